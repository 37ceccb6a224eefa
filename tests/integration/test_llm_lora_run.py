"""A LoRA run of a `model.path` model, end to end: it trains a few versions, is resumed, keeps
only the adapters in its checkpoints, saves them as PEFT does, and the saved adapters, loaded
onto the base with PEFT in plain transformers, draw the same greedy tokens and score the same
held-out accuracy as `surge eval` of the run. A target the model lacks stops the run with exit
code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("peft")

import torch  # noqa: E402

from tests.conftest import metrics_so_far, run_surge  # noqa: E402

pytestmark = pytest.mark.integration
REWARD = "tests.integration.test_llm_lora_run:length"
LORA = ["model.lora.r=4", "model.lora.alpha=8", "model.lora.target_modules=[q_proj,v_proj,o_proj]"]


def length(prompt: str, completion: str, **meta: object) -> float:
    """Longer completions score more (a random model's lengths vary, so the adapters learn);
    three characters or more count as solved."""
    return len(completion) / 3


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A tiny Llama with random weights whose logits are far apart (no near-ties for greedy
    decoding to break differently), saved as a Hugging Face directory."""
    from transformers import LlamaForCausalLM

    from surge.llm.model import save_model_dir
    from surge.llm.tiny import ARITHMETIC_ALPHABET, char_tokenizer, tiny_config

    tokenizer = char_tokenizer(ARITHMETIC_ALPHABET)
    config = tiny_config(len(tokenizer), hidden=64, layers=2, heads=2, max_length=64)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    save_model_dir(LlamaForCausalLM(config), tokenizer, tmp_path / "base")
    return tmp_path / "base"


def test_a_lora_run_saves_adapters_that_peft_loads_onto_its_base(
    tmp_path: Path, base: Path
) -> None:
    run_dir = tmp_path / "run"
    common = [
        f"model.path={base}", *LORA, "sft.steps=0", "rollout.prompts_per_batch=4",
        "rollout.group_size=4", "runtime=serial", "eval.workers=0", "max_policy_lag=0",
        "grpo.lr=0.01", f"task.reward_fn={REWARD}", "task.heldout=40", "log.progress=false",
    ]  # fmt: skip
    result = run_surge(
        "train", "arith-grpo", f"run_dir={run_dir}", *common, "total_env_steps=64", timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_surge("resume", str(run_dir), "total_env_steps=128", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    training = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    assert training[-1]["policy_version"] == 8 and training[-1]["env_steps"] == 128

    from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and checkpoint.name == "ckpt-00000008.safetensors"
    state = load_checkpoint(checkpoint)
    assert state["model"] and all(".lora_" in name for name in state["model"])

    # PEFT in plain transformers, from the files the run wrote.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    adapter = run_dir / "model"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {
        p.name for p in adapter.iterdir()
    }
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
    peft_model.eval()
    trained = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    assert max(float(p.abs().max()) for p in trained) > 0  # the adapters moved off B = 0
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    generation = GenerationConfig.from_pretrained(adapter)

    # surge's own engine on the checkpoint, as `surge eval` builds it.
    from surge.config.load import load_config
    from surge.llm.engine_protocol import Decoding, Request
    from surge.llm.engines import make_engine
    from surge.llm.lora import load_trained_state
    from surge.llm.model import encode_prompt, load_model
    from surge.llm.tasks import heldout_set, task_of

    cfg, _ = load_config(str(run_dir / "config.yaml"), [])
    model, own_tokenizer = load_model(base, cfg.model.lora, cfg.seed)
    load_trained_state(model, state["model"])
    problems = heldout_set(task_of(cfg), cfg.task.heldout)
    prompts = [tuple(encode_prompt(own_tokenizer, p.prompt)) for p in problems]
    decoding = Decoding(
        max_prompt=max(len(p) for p in prompts), max_new_tokens=cfg.rollout.max_new_tokens,
        eos_id=own_tokenizer.eos_token_id, temperature=0.0,
    )  # fmt: skip
    engine = make_engine(None, model.eval(), decoding, slots=len(prompts))
    ours = engine.generate([Request(i, p) for i, p in enumerate(prompts)])
    solved = 0
    for problem, completion in zip(problems, ours, strict=True):
        inputs = tokenizer(problem.prompt, return_tensors="pt")
        out = peft_model.generate(**inputs, generation_config=generation)
        tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
        assert tokens == completion.tokens
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        solved += length(problem.prompt, text) >= 1

    from surge.recipes.grpo import GRPO

    line = GRPO.evaluate(run_dir, [], video=False)
    assert f"greedy accuracy {solved / len(problems):.3f}" in line, line


def test_targets_the_model_lacks_stop_the_run_with_exit_code_2(tmp_path: Path, base: Path) -> None:
    result = run_surge(
        "train", "arith-grpo", f"run_dir={tmp_path / 'run'}", f"model.path={base}",
        "model.lora.r=4", "model.lora.target_modules=[q_proj,qkv]", timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "model.lora.target_modules: 'qkv' matches no module of this model" in result.stderr
    assert "q_proj, up_proj, v_proj" in result.stderr

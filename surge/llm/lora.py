"""LoRA for LLM runs (`model.lora`): low-rank adapters on the model's linear layers, through PEFT.

Every worker of a LoRA run loads the run's base model (its starting directory) and adds the
same adapters to it with `add_adapters`, seeded by the run's seed: one layout everywhere.
`trained_parameters` lists the adapters in `named_parameters` order; that list is what the
trainer optimises and publishes as the flat vector, and what generation workers and
evaluators load it into. The base weights never change and never move.

surge/llm/lean.py applies an adapted layer as one merged weight, W + (alpha / r) B A
(`merged_weight`): in training inside the autograd graph (so the gradient reaches A and B),
in generation computed once per version, so decoding costs what the base model's does. With
`model.lora.dropout` above 0 the trainer runs each adapted layer's own forward instead
(dropout acts on the layer's input, which a merged weight cannot express).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch

from surge.errors import ConfigError

if TYPE_CHECKING:
    from surge.config.llm_schema import LoraConfig


def add_adapters(model: Any, lora: LoraConfig, seed: int) -> Any:
    """`model` (a transformers causal LM) with adapters on the layers `lora.target_modules`
    names, added in place (only they train); the PEFT model around it, which saves them. The
    adapters start at A random (seeded), B = 0: the model computes what its base did."""
    import peft

    check_targets(model, lora.target_modules)
    config = peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # PEFT calls a transformers method transformers has deprecated, and warns about
        # adapting a tied output layer; neither is the user's to act on.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        torch.manual_seed(seed)
        return peft.get_peft_model(model, config)


def check_targets(model: Any, targets: list[str]) -> None:
    """A ConfigError naming `model.lora.target_modules` unless each name matches at least one
    linear layer of `model` and nothing else (PEFT's matching: the module's name, or a
    suffix after a `.`)."""
    names = {name: type(module) for name, module in model.named_modules() if name}
    linear = sorted({n.rsplit(".", 1)[-1] for n, t in names.items() if t is torch.nn.Linear})
    for target in targets:
        kinds = {t for n, t in names.items() if n == target or n.endswith("." + target)}
        if kinds != {torch.nn.Linear}:
            found = ", ".join(sorted(k.__name__ for k in kinds))
            what = f"names {found} modules, not linear layers" if kinds else "matches no module"
            raise ConfigError(
                f"model.lora.target_modules: {target!r} {what} of this model",
                f"choose among the model's linear layers: {', '.join(linear)}",
            )


def is_adapter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def has_adapters(model: Any) -> bool:
    return any(is_adapter(name) for name, _ in model.named_parameters())


def trained_parameters(model: Any) -> list[torch.nn.Parameter]:
    """What the trainer optimises and publishes: a LoRA model's adapters (in
    `named_parameters` order), any other model's every parameter."""
    params = list(model.named_parameters())
    if any(is_adapter(name) for name, _ in params):
        return [p for name, p in params if is_adapter(name)]
    return [p for _, p in params]


def trained_state(model: Any) -> dict[str, torch.Tensor]:
    """What a checkpoint holds of the model: its state dict, or a LoRA model's adapters alone
    (the base is the run's starting directory, unchanged)."""
    state: dict[str, torch.Tensor] = model.state_dict()
    if not has_adapters(model):
        return state
    return {name: tensor for name, tensor in state.items() if is_adapter(name)}


def load_trained_state(model: Any, state: dict[str, Any]) -> None:
    """Restore what `trained_state` saved; a ValueError when it is not this model's."""
    tensors = {name: torch.as_tensor(value) for name, value in state.items()}
    if not has_adapters(model):
        model.load_state_dict(tensors)
        return
    result = model.load_state_dict(tensors, strict=False)
    missing = [name for name in result.missing_keys if is_adapter(name)]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"the saved weights do not fit the model's LoRA adapters (missing {missing[:3]}, "
            f"unexpected {result.unexpected_keys[:3]})"
        )


def merged_weight(linear: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A linear layer's weight and bias as its forward applies them: an adapted layer's base
    weight plus each active adapter's update (alpha / r) B A."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight, linear.bias
    weight = base.weight
    if not linear.merged and not linear.disable_adapters:
        for name in linear.active_adapters:
            if name in linear.lora_A:
                weight = weight + linear.get_delta_weight(name)
    return weight, base.bias


def uses_dropout(model: Any) -> bool:
    """Whether an adapter of `model` has dropout on its input (active in training)."""
    return any(
        isinstance(m, torch.nn.Dropout) and m.p > 0
        for name, m in model.named_modules()
        if ".lora_dropout." in name
    )

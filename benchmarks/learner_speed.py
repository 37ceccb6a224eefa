"""How fast can the Nature CNN actor-critic learn on this CPU? Times one PPO update and the
batch-8 inference forward under variants of threads, memory format, bf16, compile and Adam.

One update is CleanRL ppo_atari's: a batch of 1024 steps (8 envs x 128), 4 epochs x 4
minibatches of 256, obs uint8 [4, 84, 84], Adam, grad-norm clip 0.5. The observations are
real Pong frames (random play through ale-py), the rest synthetic. Each variant runs in its
own process (threads, compile caches and allocator state do not leak between variants).

For correctness every variant starts from the same parameters, batch and shuffling as the
fp32 baseline and reports: the losses of the first minibatch against fp32, the cosine between
its parameter change after one update and fp32's, and whether anything became NaN.

    python benchmarks/learner_speed.py                   # every variant, a table at the end
    python benchmarks/learner_speed.py --only bf16 fp32  # variants whose name contains these
    python benchmarks/learner_speed.py --json out.json   # also write the results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

T, N, EPOCHS, MINIBATCHES = 128, 8, 4, 4
BATCH = T * N
ACTIONS = 6  # Pong's minimal action set


@dataclass(frozen=True)
class Variant:
    name: str
    threads: int = 2
    channels_last: bool = False
    bf16: str = "none"  # none | encoder (NatureCNN's own autocast) | loss (autocast in the loop)
    compile: bool = False
    adam: str = "default"  # default | foreach | fused
    scale: str = "fold"  # fold (1/255 in conv1's weights) | divide (x / 255 first, CleanRL)
    # minibatch: frames gathered per minibatch (obs[idx]), laid out by the encoder each time;
    # batch: as PPOUpdater, laid out once per batch (encoder.prepare) and gathered per epoch
    # with one index_select of whole rows (ppo.gather_rows)
    gather: str = "minibatch"


VARIANTS = [
    # 1 thread first: its CPU time per update hardly depends on what else runs on the machine.
    Variant("fp32 1 thread, divide by 255 (CleanRL)", threads=1, scale="divide"),
    Variant("fp32 1 thread", threads=1),
    Variant("fp32 1 thread, channels_last", threads=1, channels_last=True),
    Variant(
        "fp32 1 thread, channels_last, frames laid out per batch",
        threads=1,
        channels_last=True,
        gather="batch",
    ),
    Variant("bf16 encoder 1 thread", threads=1, bf16="encoder"),
    Variant("bf16 encoder 1 thread, channels_last", threads=1, bf16="encoder", channels_last=True),
    Variant("fp32 2 threads, divide by 255 (CleanRL)", scale="divide"),
    Variant("fp32 2 threads"),
    Variant("fp32 2 threads, channels_last", channels_last=True),
    Variant("fp32 2 threads, foreach Adam", adam="foreach"),
    Variant("fp32 2 threads, fused Adam", adam="fused"),
    Variant("bf16 encoder 2 threads", bf16="encoder"),
    Variant("bf16 encoder 2 threads, channels_last", bf16="encoder", channels_last=True),
    Variant(
        "bf16 encoder 2 threads, channels_last, fused Adam",
        channels_last=True,
        bf16="encoder",
        adam="fused",
    ),
    Variant("bf16 loss autocast 2 threads, channels_last", bf16="loss", channels_last=True),
    Variant("fp32 2 threads, compile", compile=True),
    Variant(
        "bf16 encoder 2 threads, channels_last, compile",
        bf16="encoder",
        channels_last=True,
        compile=True,
    ),
]


# --- one variant, in its own process ------------------------------------------------------


def pong_frames(n: int, seed: int = 0) -> np.ndarray:
    """n real preprocessed Pong observations [n, 4, 84, 84] uint8 from random play."""
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("pong", N, num_threads=1)
    obs, _ = env.reset(seed=np.arange(1, N + 1) + seed)
    rng = np.random.default_rng(seed)
    out = np.empty((n, *obs.shape[1:]), np.uint8)
    for t in range(0, n, N):
        out[t : t + N] = obs[: n - t]
        obs, *_ = env.step(rng.integers(0, ACTIONS, N))
    env.close()
    return out


def run_variant(v: Variant, reference: Path | None, updates: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(v.threads)
    import gymnasium as gym

    from surge.algos.losses import clipped_surrogate_loss, value_loss
    from surge.algos.ppo import gather_rows
    from surge.config.schema import ModelConfig
    from surge.models.actor_critic import ActorCritic
    from surge.models.encoders import NatureCNN

    class DivideCNN(NatureCNN):
        """CleanRL's order: x / 255 as a float pass over the frames, then conv1."""

        def _trunk(self, x: torch.Tensor) -> torch.Tensor:
            relu = torch.nn.functional.relu
            x = relu(self.conv1(x / 255.0))
            x = relu(self.conv2(x))
            x = relu(self.conv3(x))
            out: torch.Tensor = relu(self.fc(x.flatten(1)))
            return out

    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    torch.manual_seed(1)
    cnn_type = DivideCNN if v.scale == "divide" else NatureCNN
    encoder = cnn_type(obs_space, channels_last=v.channels_last, bf16=v.bf16 == "encoder")
    model = ActorCritic(
        obs_space,
        gym.spaces.Discrete(ACTIONS),
        ModelConfig(hidden_sizes=[], activation="relu"),
        encoder=encoder,
    )
    init = {k: p.detach().clone() for k, p in model.named_parameters()}

    g = torch.Generator().manual_seed(2)
    obs = torch.from_numpy(pong_frames(BATCH))
    actions = torch.randint(0, ACTIONS, (BATCH,), generator=g)
    old_logp = torch.full((BATCH,), -float(np.log(ACTIONS))) + 0.1 * torch.randn(BATCH, generator=g)
    old_values = 0.1 * torch.randn(BATCH, generator=g)
    advantages = torch.randn(BATCH, generator=g)
    returns = old_values + 0.5 * torch.randn(BATCH, generator=g)

    kw: dict[str, Any] = {"lr": 2.5e-4, "eps": 1e-5}
    if v.adam != "default":
        kw[v.adam] = True
    optimizer = torch.optim.Adam(model.parameters(), **kw)
    params = list(model.parameters())

    prepared = encoder.prepare({"obs": obs})["obs"]

    def loss_fn(frames: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        new_logp, entropy, new_values = model.evaluate({"obs": frames}, actions[idx])
        adv = advantages[idx]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)  # CleanRL's per-minibatch normalisation
        pg, _, _ = clipped_surrogate_loss(new_logp.float(), old_logp[idx], adv, 0.1)
        vl = value_loss(new_values.float(), old_values[idx], returns[idx], 0.1, True)
        ent = entropy.float().mean()
        return pg - 0.01 * ent + 0.5 * vl, pg, vl, ent

    step_fn = loss_fn
    if v.compile:
        step_fn = torch.compile(loss_fn)

    def minibatch(frames: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if v.bf16 == "loss":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return step_fn(frames, idx)
        return step_fn(frames, idx)

    def update(seed: int) -> list[float]:
        perm_gen = torch.Generator().manual_seed(seed)
        first: list[float] = []
        for _ in range(EPOCHS):
            perm = torch.randperm(BATCH, generator=perm_gen)
            epoch_frames = gather_rows(prepared, perm) if v.gather == "batch" else None
            for start in range(0, BATCH, BATCH // MINIBATCHES):
                idx = perm[start : start + BATCH // MINIBATCHES]
                if epoch_frames is None:
                    frames = obs[idx]
                else:
                    frames = epoch_frames[start : start + BATCH // MINIBATCHES]
                out = minibatch(frames, idx)
                if not first:
                    first = [float(x) for x in out]
                optimizer.zero_grad(set_to_none=True)
                out[0].backward()
                torch.nn.utils.clip_grad_norm_(params, 0.5)
                optimizer.step()
        return first

    t0 = time.perf_counter()
    first_losses = update(seed=3)  # the compared update (and the warm-up / compile)
    first_update_s = time.perf_counter() - t0
    delta = torch.cat([(p.detach() - init[k]).flatten() for k, p in model.named_parameters()])
    nan = not bool(torch.isfinite(delta).all())
    times, cpu_times, foreign = [], [], []
    for u in range(updates):
        busy0, cpu0, t0 = _machine_busy_s(), time.process_time(), time.perf_counter()
        update(seed=10 + u)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        times.append(wall)
        cpu_times.append(cpu)
        foreign.append(max(0.0, (_machine_busy_s() - busy0 - cpu) / wall))

    # Inference: the policy worker's forward for one group of 8 (act: sample, logp, value).
    model.eval()
    small = {"obs": obs[:N].clone()}
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for _ in range(20):
            model.act(small, generator=gen)
        t0 = time.perf_counter()
        reps = 200
        for _ in range(reps):
            model.act(small, generator=gen)
        infer_ms = (time.perf_counter() - t0) / reps * 1e3

    result: dict[str, Any] = {
        **asdict(v),
        "update_s": min(times),
        "update_s_median": statistics.median(times),
        "update_s_all": times,
        "update_cpu_s": cpu_times,
        "foreign_cores": max(foreign),
        "first_update_s": first_update_s,
        "samples_per_s": BATCH / min(times),
        "cpu_s_per_update": min(cpu_times),
        "infer_b8_ms": infer_ms,
        "first_losses": first_losses,  # total, policy, value, entropy of minibatch 1
        "nan": nan,
    }
    if reference is None:
        # The scale for "close to fp32": the same update with another minibatch order.
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(init[k])
        optimizer.state.clear()
        model.train()
        update(seed=4)
        other = torch.cat([(p.detach() - init[k]).flatten() for k, p in model.named_parameters()])
        result["shuffle_cosine"] = float(torch.nn.functional.cosine_similarity(other, delta, dim=0))
        return {**result, "delta": delta.tolist()}
    ref = torch.tensor(json.loads(reference.read_text())["delta"])
    result["delta_cosine_vs_fp32"] = float(torch.nn.functional.cosine_similarity(delta, ref, dim=0))
    result["delta_rel_norm_vs_fp32"] = float(delta.norm() / ref.norm())
    return result


def _machine_busy_s() -> float:
    """CPU seconds all processes on the machine have used (from /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _wait_quiet(limit_s: float, window_s: float = 3.0, cores: float = 0.25) -> None:
    """Wait (at most limit_s) for a window in which the machine is nearly idle: the machine
    is shared, and two-thread timings are meaningless while others hold a core."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        busy0 = _machine_busy_s()
        time.sleep(window_s)
        if (_machine_busy_s() - busy0) / window_s < cores:
            return


# --- the driver ---------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=[], help="run variants whose name has any")
    ap.add_argument("--updates", type=int, default=3, help="timed updates per variant")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each variant wait up to S seconds until other processes use < 0.25 cores",
    )
    ap.add_argument("--_variant", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_reference", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._variant is not None:
        out = run_variant(VARIANTS[args._variant], args._reference, args.updates)
        print("RESULT " + json.dumps(out))
        return

    chosen = [
        i for i, v in enumerate(VARIANTS) if not args.only or any(s in v.name for s in args.only)
    ]
    results = []
    floor = None
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp) / "fp32.json"
        base = next(i for i, v in enumerate(VARIANTS) if v.name == "fp32 2 threads")
        for i in [base] + [i for i in chosen if i != base]:
            cmd = [sys.executable, __file__, "--_variant", str(i), "--updates", str(args.updates)]
            if i != base:
                cmd += ["--_reference", str(reference)]
            _wait_quiet(args.wait_quiet)
            env = {**os.environ, "OMP_NUM_THREADS": str(VARIANTS[i].threads)}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            line = next((s for s in proc.stdout.splitlines() if s.startswith("RESULT ")), None)
            if line is None:
                print(f"{VARIANTS[i].name}: failed\n{proc.stderr[-3000:]}", flush=True)
                continue
            res = json.loads(line[len("RESULT ") :])
            if i == base:
                reference.write_text(json.dumps(res))
                res.pop("delta")
                floor = res.get("shuffle_cosine")
            if i in chosen:
                results.append(res)
            print(_row(res), flush=True)
    print("\n" + _table(results))
    if floor is not None:
        print(f"\nfp32 vs fp32 with another minibatch order: Δθ cosine {floor:.4f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def _row(r: dict[str, Any]) -> str:
    cos = r.get("delta_cosine_vs_fp32")
    return (
        f"{r['name']}: update {r['update_s']:.3f} s (median {r['update_s_median']:.3f}; "
        f"{r['samples_per_s']:.0f} samples/s; others used {r['foreign_cores']:.2f} cores), "
        f"first update {r['first_update_s']:.1f} s, infer b8 {r['infer_b8_ms']:.2f} ms, "
        f"losses {[round(x, 4) for x in r['first_losses']]}, "
        f"cos vs fp32 {'-' if cos is None else f'{cos:.4f}'}, nan {r['nan']}"
    )


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | update s (best) | median | learner samples/s | CPU s / update "
        "| first update s | infer b8 ms | loss mb1 | Δθ cos vs fp32 | NaN | others' cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cos = r.get("delta_cosine_vs_fp32")
        lines.append(
            f"| {r['name']} | {r['update_s']:.3f} | {r['update_s_median']:.3f} | "
            f"{r['samples_per_s']:.0f} | {r['cpu_s_per_update']:.2f} | "
            f"{r['first_update_s']:.1f} | {r['infer_b8_ms']:.2f} | {r['first_losses'][0]:.5f} | "
            f"{'(reference)' if cos is None else f'{cos:.4f}'} | {r['nan']} | "
            f"{r['foreign_cores']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

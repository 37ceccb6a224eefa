"""Which device each role's torch model runs on.

Four settings, one per role: `workers.trainer_device` (the learner), `workers.policy_device`
(policy workers' batched inference), `eval.device` (evaluation workers) and `rollout.device`
(LLM generation). Each takes `auto`, `cpu`, `cuda` or `cuda:N`.

The rule (`choose_device`): an explicit setting is taken as it is; `auto` is CUDA (the
process's first visible GPU) when the role runs a torch model and its process sees a GPU,
and the CPU otherwise. The numpy paths (the MLP learners and policies) always run on the
CPU: for small MLPs and few envs they are faster than any GPU. A process sees the GPUs
that `CUDA_VISIBLE_DEVICES` leaves it, which is how Ray hands each actor the GPUs it
declared (`ray.trainer_gpus`, `ray.policy_gpus`).

Asking for CUDA where there is none is a configuration error naming the setting (exit 2),
found before the run starts on the serial and local runtimes (`check_devices`), and by the
settings on Ray (a worker that declares no GPU gets none).
"""

from __future__ import annotations

import functools
import glob
import os
import re
from pathlib import Path
from typing import Any

from surge.errors import ConfigError

PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
"""A device setting's syntax."""

ROLES = (
    ("trainer", "workers.trainer_device"),
    ("policy workers", "workers.policy_device"),
    ("evaluation", "eval.device"),
)
"""(role, setting) of the roles of an algorithm whose graph has a trainer, policy workers
and evaluators (the default of a plug-in's `device_roles`; GRPO's are its trainer and its
generation workers)."""

Roles = tuple[tuple[str, str], ...]


def valid(setting: Any) -> bool:
    return isinstance(setting, str) and PATTERN.fullmatch(setting) is not None


def choose_device(setting: str, torch_model: bool, visible: int) -> str:
    """The device a role runs on: `setting` if explicit; for `auto`, `cuda:0` when the role
    runs a torch model (`torch_model`) and its process sees a GPU (`visible` > 0), else
    `cpu`. A numpy model always runs on the CPU (an explicit CUDA trainer device makes the
    learners choose their torch backend instead)."""
    if not valid(setting):
        raise ValueError(f"not a device setting: {setting!r}")
    if not torch_model:
        return "cpu"
    if setting == "auto":
        return "cuda:0" if visible > 0 else "cpu"
    return "cuda:0" if setting == "cuda" else setting


def visible_gpus() -> int:
    """CUDA GPUs this process sees. Without NVIDIA device files (or with an empty
    `CUDA_VISIBLE_DEVICES`) the answer is 0 without importing torch, so a CPU machine's
    numpy runs start as fast as before; else torch counts them (without initialising CUDA,
    so worker processes forked later may still use it)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    if not glob.glob("/dev/nvidia[0-9]*"):
        return 0
    import torch

    return int(torch.cuda.device_count()) if torch.backends.cuda.is_built() else 0


def require(device: str, setting: str, visible: int) -> None:
    """A ConfigError unless this process can use `device` (a CPU always; cuda:N with N below
    the visible GPUs' count)."""
    if device == "cpu":
        return
    index = int(device.partition(":")[2] or 0)
    if visible == 0:
        raise ConfigError(
            f"{setting}={device}: no CUDA GPU is visible here (a CPU build of torch, no "
            "NVIDIA device, or CUDA_VISIBLE_DEVICES empty)",
            f"set {setting}=auto (CUDA where a GPU is visible, else the CPU) or cpu",
        )
    if index >= visible:
        raise ConfigError(
            f"{setting}={device}: only {visible} GPU(s) are visible here (cuda:0 to "
            f"cuda:{visible - 1})",
            f"set {setting} to one of them, or auto",
        )


def role_device(setting: str, name: str) -> str:
    """The device a torch model of the role with `setting` (named `name`) runs on in this
    process, checked against the GPUs it sees (ConfigError otherwise): what a worker calls
    where its runtime placed it."""
    visible = visible_gpus() if setting != "cpu" else 0
    device = choose_device(setting, True, visible)
    require(device, name, visible)
    return device


def trainer_device(cfg: Any) -> Any:
    """The torch device of this process's learner (`workers.trainer_device`), checked here,
    where the runtime placed the trainer."""
    import torch

    return torch.device(role_device(cfg.workers.trainer_device, "workers.trainer_device"))


def settings_of(cfg: Any, roles: Roles) -> list[tuple[str, str, str]]:
    """(role, setting name, value) of the run's roles (the algorithm's `device_roles`)."""
    return [(role, name, functools.reduce(getattr, name.split("."), cfg)) for role, name in roles]


def check_devices(cfg: Any, roles: Roles, visible: int | None = None) -> None:
    """Before a serial or local run: every explicit CUDA setting of `roles` names a GPU this
    machine has (ConfigError otherwise). `visible`: the GPUs seen (default: `visible_gpus()`)."""
    explicit = [
        (name, value) for _, name, value in settings_of(cfg, roles) if value.startswith("cuda")
    ]
    if not explicit or cfg.runtime == "ray":
        return  # Ray: each worker sees the GPUs it declares (config/load.py checks those)
    seen = visible_gpus() if visible is None else visible
    for name, value in explicit:
        require(choose_device(value, True, seen), name, seen)


def describe(cfg: Any, roles: Roles, visible: int | None = None) -> str:
    """The header's line: what each role's torch model runs on here."""
    if cfg.runtime == "ray":
        where = ", ".join(f"{role} {value}" for role, _, value in settings_of(cfg, roles))
        return f"devices: {where} (auto: CUDA where Ray gives the worker a GPU)"
    seen = visible_gpus() if visible is None else visible
    where = ", ".join(
        f"{role} {choose_device(value, True, seen)}" for role, _, value in settings_of(cfg, roles)
    )
    return f"devices: {where} (torch models; numpy MLPs run on the CPU)"


ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)
"""oneDNN's `ONEDNN_MAX_CPU_ISA` values below its native bfloat16 kernels (AVX512_CORE_BF16)."""


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 dot products natively (AVX512-BF16 or AMX), where
    oneDNN's bf16 kernels are about twice as fast as float32 or more, and oneDNN may use
    them: held below them (`ONEDNN_MAX_CPU_ISA=AVX2`, as the narrow-kernel test pass sets)
    it emulates bfloat16, a 256x256 product some 300 times slower than with AMX."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    return cap.strip().upper() not in ONEDNN_ISAS_WITHOUT_BF16 and _cpu_has_bf16()


@functools.cache
def _cpu_has_bf16() -> bool:
    """AVX512-BF16 or AMX-BF16 among the CPU's flags (Linux: from /proc/cpuinfo)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_bfloat16(precision: str) -> bool:
    """Whether a `precision` setting (`auto`, `float32` or `bfloat16`) computes in bfloat16
    on this CPU: `auto` does where the CPU has native bf16 (elsewhere it is emulated, slower
    than float32)."""
    return precision == "bfloat16" or (precision == "auto" and native_bf16())

"""Create one virtual environment per peer library under benchmarks/.venvs/<name>.

    python3 benchmarks/peers/setup_venvs.py            # all: base sf rllib trl benchmarl
    python3 benchmarks/peers/setup_venvs.py sf --force # rebuild one

Idempotent: a venv whose `.complete` marker names the same requirement list is skipped.
Each install is logged to benchmarks/.venvs/<name>.install.log, and its wall time, pip freeze
and size are recorded in benchmarks/.venvs/<name>/.complete (JSON).

torch is pinned to 2.13.0 everywhere: this machine has that CPU wheel on disk, and an
unpinned torch would let pip pull a multi-gigabyte CUDA build.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VENV_ROOT = Path(__file__).resolve().parents[1] / ".venvs"
TORCH = "torch==2.13.0"

# name -> pip requirements (installed in one resolver run)
VENVS: dict[str, list[str]] = {
    # CleanRL-style PPO and Stable-Baselines3 share one venv: same gymnasium and ale-py.
    "base": [
        TORCH,
        "gymnasium[mujoco]==1.4.0",  # mujoco: the CleanRL-style continuous PPO (MuJoCo)
        "ale-py==0.12.1",
        "stable-baselines3",
        "opencv-python-headless",
        "psutil",
        "numpy",
    ],
    # sample-factory 2.1.1 pins gymnasium 0.29 and numpy<2; ale-py>=0.10 needs gymnasium 1.x.
    "sf": [TORCH, "sample-factory==2.1.1", "ale-py==0.9.1", "psutil"],
    # pettingzoo + mpe2: the multi-agent benchmark (benchmarks/marl.py, simple_spread_v3)
    "rllib": [
        TORCH,
        "ray[rllib]==2.60.0",
        "gymnasium",
        "ale-py",
        "opencv-python-headless",
        "psutil",
        "pettingzoo==1.27.0",
        "mpe2==1.1.1",
    ],
    # BenchMARL's MAPPO on PettingZoo's simple_spread (benchmarks/marl.py), through TorchRL
    # (benchmarl 1.5.2 needs torchrl < 0.12)
    "benchmarl": [
        TORCH,
        "benchmarl==1.5.2",
        "torchrl==0.11.1",
        "tensordict==0.11.0",
        "pettingzoo==1.27.0",
        "mpe2==1.1.1",
        "psutil",
    ],
    # TRL's GRPOTrainer, the CPU peer of LLM RL (benchmarks/llm.py); transformers as surge's.
    "trl": [TORCH, "trl==1.16.0", "transformers==5.23.0", "tokenizers", "datasets", "psutil"],
}

# imports that must work for a venv to count as complete
CHECKS: dict[str, str] = {
    "base": "import torch, gymnasium, ale_py, stable_baselines3, cv2, psutil, mujoco",
    "sf": "import torch, gymnasium, ale_py, sample_factory, cv2, psutil",
    "rllib": "import torch, gymnasium, ale_py, ray.rllib, cv2, psutil, pettingzoo, mpe2",
    "benchmarl": "import torch, benchmarl, torchrl, tensordict, pettingzoo, mpe2, psutil",
    "trl": "import torch, trl, transformers, datasets, psutil",
}


def find_python() -> str:
    """A Python 3.11 interpreter (the torch wheel on disk is cp311)."""
    for cand in (
        os.environ.get("SURGE_PEERS_PYTHON", ""),
        "/root/.pyenv/versions/3.11.7/bin/python3",
        shutil.which("python3.11") or "",
    ):
        if cand and Path(cand).exists():
            return cand
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    raise SystemExit(
        "setup_venvs: no Python 3.11 found; set SURGE_PEERS_PYTHON=/path/to/python3.11"
    )


def venv_python(name: str) -> Path:
    return VENV_ROOT / name / "bin" / "python"


def is_complete(name: str) -> bool:
    marker = VENV_ROOT / name / ".complete"
    if not marker.exists() or not venv_python(name).exists():
        return False
    try:
        return json.loads(marker.read_text()).get("requirements") == VENVS[name]
    except (OSError, ValueError):
        return False


def du_mb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return round(total / 2**20, 1)


def create(name: str, python: str) -> dict[str, object]:
    path = VENV_ROOT / name
    log_path = VENV_ROOT / f"{name}.install.log"
    if path.exists():
        shutil.rmtree(path)
    started = time.monotonic()
    with open(log_path, "w") as log:
        subprocess.run([python, "-m", "venv", str(path)], check=True, stdout=log, stderr=log)
        vpy = str(venv_python(name))
        subprocess.run(
            [vpy, "-m", "pip", "install", "--upgrade", "pip"], check=True, stdout=log, stderr=log
        )
        cmd = [vpy, "-m", "pip", "install", *VENVS[name]]
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        subprocess.run(cmd, check=True, stdout=log, stderr=log)
        subprocess.run([vpy, "-c", CHECKS[name]], check=True, stdout=log, stderr=log)
    seconds = round(time.monotonic() - started, 1)
    freeze = subprocess.run(
        [str(venv_python(name)), "-m", "pip", "freeze"], capture_output=True, text=True, check=True
    ).stdout.split()
    info = {
        "requirements": VENVS[name],
        "install_s": seconds,
        "size_mb": du_mb(path),
        "python": python,
        "freeze": freeze,
    }
    (path / ".complete").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(VENVS), help=f"of {list(VENVS)}")
    parser.add_argument("--force", action="store_true", help="rebuild even if complete")
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in VENVS]
    if unknown:
        parser.error(f"unknown venv(s) {unknown}; choose from {list(VENVS)}")
    VENV_ROOT.mkdir(parents=True, exist_ok=True)
    python = find_python()
    failed = []
    for name in args.names:
        if is_complete(name) and not args.force:
            print(f"{name}: complete, skipped ({VENV_ROOT / name})", flush=True)
            continue
        print(f"{name}: installing {' '.join(VENVS[name])} ...", flush=True)
        try:
            info = create(name, python)
        except subprocess.CalledProcessError as e:
            print(
                f"{name}: FAILED ({e}); see {VENV_ROOT / f'{name}.install.log'}",
                file=sys.stderr,
                flush=True,
            )
            failed.append(name)
            continue
        pins = [p for p in info["freeze"] if isinstance(p, str)]  # type: ignore[union-attr]
        keys = (
            "torch",
            "gymnasium",
            "ale-py",
            "numpy",
            "stable",
            "sample-factory",
            "ray",
            "benchmarl",
            "tensordict",
            "pettingzoo",
            "mpe2",
        )
        shown = [p for p in pins if p.lower().startswith(keys)]
        print(
            f"{name}: done in {info['install_s']} s, {info['size_mb']} MB: {' '.join(shown)}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

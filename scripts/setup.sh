#!/usr/bin/env bash
# Create .venv and install surge with its development tools.
# torch is pinned to 2.13.0: on these machines that is a CPU wheel already on disk; an
# unpinned torch would make pip download a multi-GB CUDA build. The `ray` extra brings Ray for
# `runtime=ray`, so the test suite runs the Ray runtime on a real (loopback) cluster; the
# `envpool` extra brings EnvPool so the tests run `env.backend=envpool` for real, the
# `mujoco` extra MuJoCo so they train the hopper-ppo preset for a few seconds, the
# `minigrid` extra MiniGrid for the small-image (small_cnn) learning test, `video` PyAV for
# episode videos, `wandb` lets them check `log.wandb=true` (offline), and `llm` brings
# transformers, tokenizers, datasets and peft (LoRA) for LLM RL (surge/llm), `reasoning-gym` its
# procedural datasets for the `reasoning-gym:<dataset>` tasks, `multiagent` PettingZoo
# with its MPE envs (the spread-* presets, self-play), and `highway` highway-env for the
# driving env (surge/envs/driving.py), `games` OpenSpiel for PSRO (env.id=openspiel:...),
# and `docs` mkdocs with mkdocstrings for the documentation site (mkdocs.yml).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0" \
  -e ".[dev,atari,ray,envpool,mujoco,minigrid,video,wandb,llm,reasoning-gym,multiagent,highway,lbf,report,games,docs]"
echo "surge installed in .venv ($(.venv/bin/python -c 'import torch, surge; print("torch", torch.__version__)'))"

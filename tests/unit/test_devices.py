"""The device of each role (surge/devices.py): the choice rule, the checks that stop a run
asking for a GPU it cannot have (exit 2, naming the setting), and the run's header line."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from surge.config.algorithms import device_roles
from surge.config.load import load_config
from surge.devices import check_devices, choose_device, describe, require, visible_gpus
from surge.errors import ConfigError

NO_GPU = not glob.glob("/dev/nvidia[0-9]*")


@pytest.mark.parametrize(
    ("setting", "torch_model", "visible", "device"),
    [
        ("auto", True, 0, "cpu"),
        ("auto", True, 2, "cuda:0"),
        ("auto", False, 2, "cpu"),  # numpy paths stay on the CPU
        ("cpu", True, 2, "cpu"),
        ("cuda", True, 2, "cuda:0"),
        ("cuda:1", True, 2, "cuda:1"),
        ("cuda:1", True, 0, "cuda:1"),  # explicit: taken as it is (`require` refuses it)
        ("cuda", False, 1, "cpu"),
    ],
)
def test_the_choice_rule(setting: str, torch_model: bool, visible: int, device: str) -> None:
    assert choose_device(setting, torch_model, visible) == device


def test_a_device_that_is_not_there_is_refused_naming_the_setting() -> None:
    require("cpu", "workers.trainer_device", 0)
    require("cuda:1", "workers.trainer_device", 2)
    with pytest.raises(ConfigError, match=r"workers.trainer_device=cuda:0: no CUDA GPU"):
        require("cuda:0", "workers.trainer_device", 0)
    with pytest.raises(ConfigError, match=r"eval.device=cuda:2: only 2 GPU\(s\)"):
        require("cuda:2", "eval.device", 2)
    with pytest.raises(ValueError, match="not a device setting"):
        choose_device("gpu", True, 1)


def test_settings_are_checked_by_syntax_backend_and_ray_gpus() -> None:
    with pytest.raises(ConfigError, match="workers.trainer_device: must be auto, cpu, cuda"):
        load_config("cartpole-ppo", ["workers.trainer_device=gpu"])
    with pytest.raises(ConfigError, match="rollout.device: must be auto, cpu, cuda"):
        load_config("arith-grpo", ["rollout.device=cuda:x"])
    with pytest.raises(ConfigError, match="model.backend=numpy: the numpy learner runs on"):
        load_config("cartpole-ppo", ["workers.trainer_device=cuda", "model.backend=numpy"])
    with pytest.raises(ConfigError, match="ray.trainer_gpus=0: Ray gives the worker no GPU"):
        load_config("cartpole-ppo", ["runtime=ray", "workers.trainer_device=cuda"])
    with pytest.raises(ConfigError, match="ray.policy_gpus=0"):
        load_config("arith-grpo", ["runtime=ray", "rollout.device=cuda"])
    with pytest.raises(ConfigError, match="ray.policy_gpus=0"):
        load_config("cartpole-ppo", ["runtime=ray", "workers.policy_device=cuda"])
    cfg, _ = load_config(
        "cartpole-ppo", ["runtime=ray", "workers.trainer_device=cuda", "ray.trainer_gpus=1"]
    )
    # Ray places it: the GPU need not be on this machine
    check_devices(cfg, device_roles(cfg), visible=0)


def test_cuda_makes_the_learners_choose_torch() -> None:
    from surge.envs.make import probe_policies
    from surge.learners.ppo import backend_name
    from surge.learners.q_backends import q_backend_name

    for preset, name_of in (("cartpole-ppo", backend_name), ("cartpole-dqn", q_backend_name)):
        cfg, _ = load_config(preset, [])
        env = next(iter(probe_policies(cfg).values()))
        assert name_of(cfg, env) == "numpy"  # an MLP: numpy on the CPU
        cfg, _ = load_config(preset, ["workers.trainer_device=cuda"])
        assert name_of(cfg, env) == "torch"


def test_the_header_says_what_each_role_got() -> None:
    cfg, _ = load_config("cartpole-ppo", [])
    assert describe(cfg, device_roles(cfg), visible=0) == (
        "devices: trainer cpu, policy workers cpu, evaluation cpu "
        "(torch models; numpy MLPs run on the CPU)"
    )
    cfg, _ = load_config("arith-grpo", ["rollout.device=cpu"])
    assert describe(cfg, device_roles(cfg), visible=1) == (
        "devices: trainer cuda:0, generation cpu (torch models; numpy MLPs run on the CPU)"
    )
    cfg, _ = load_config("cartpole-ppo", ["eval.device=cpu"])
    assert describe(cfg, device_roles(cfg), visible=1).startswith(
        "devices: trainer cuda:0, policy workers cuda:0, evaluation cpu ("
    )


@pytest.mark.skipif(not NO_GPU, reason="this machine has an NVIDIA GPU")
def test_cuda_without_a_gpu_stops_the_run_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from surge.cli import main

    assert visible_gpus() == 0
    run_dir = tmp_path / "r"
    code = main(["train", "cartpole-ppo", "workers.trainer_device=cuda", f"run_dir={run_dir}"])
    assert code == 2
    assert "workers.trainer_device=cuda:0: no CUDA GPU is visible" in capsys.readouterr().err
    assert not run_dir.exists()

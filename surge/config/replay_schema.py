"""Config sections of replay-based RL (`algo: dqn | sac`, docs/replay.md): the replay workers
between the actors and the trainer, and each algorithm's settings.

Part of the experiment config (surge/config/schema.py imports these); documented the same way,
by the string under each field (docs/configuration.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from surge.config.rules import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, UNIT, between, ruled

TDLoss = Literal["huber", "mse"]
Exploration = Literal["linear", "apex"]
WeightNorm = Literal["batch", "replay"]
MatmulLibrary = Literal["auto", "numpy", "torch"]
ProductPrecision = Literal["auto", "float32", "bfloat16"]


@dataclass
class ReplayConfig:
    """The replay: a ring of transitions in each replay worker (a shard), filled by the
    actors' segments and sampled by the trainer, at a rate the limiter holds."""

    capacity: int = ruled(100_000, AT_LEAST_ONE)
    """Transitions kept, over all shards (the oldest are overwritten)."""

    shards: int = ruled(1, AT_LEAST_ONE)
    """Replay workers; actor a's env groups go to shard a % shards, and the trainer draws
    batch u from shard u % shards."""

    batch_size: int = ruled(128, AT_LEAST_ONE)
    """Transitions in one training batch."""

    ratio: float = ruled(8.0, POSITIVE)
    """Samples per inserted transition (Reverb's `SampleToInsertRatio`): the trainer samples
    `ratio` transitions for every transition the actors insert. Inserts wait for the
    trainer (the actors' sample stream holds them by version) and samples wait for inserts
    (the replay worker holds them), each within `error_buffer`."""

    min_size: int = ruled(1_000, NON_NEGATIVE)
    """Transitions in the replay before the first batch is sampled (learning starts)."""

    error_buffer: float = ruled(0.0, NON_NEGATIVE)
    """How far, in samples, the ratio may drift either way before one side waits. 0: the
    largest of 0.1 * min_size * ratio (Acme's tolerance), 10 * ratio, two batches (in
    transitions: a batch of R2D2 sequences counts each sequence's trained steps) and twice
    the floor below which the actors and the replay could wait for each other forever
    (docs/replay.md, rate limiting); a value set below that floor is an error."""

    prefetch: int = ruled(2, AT_LEAST_ONE)
    """Batches each shard keeps sampled ahead of the trainer."""

    segment_len: int = ruled(32, AT_LEAST_ONE)
    """Steps per env in the segments the actors send (how often a transition reaches the
    replay: every this many steps)."""

    prioritized: bool = False
    """Proportional prioritised replay (Schaul et al. 2016): sample transition i with
    probability p_i^alpha / sum p^alpha, p the absolute TD error, and weight its loss by
    importance weights (beta annealed to 1 over `total_env_steps`). New transitions get a
    priority from the actors' Q-values (Ape-X). false: uniform sampling."""

    alpha: float = ruled(0.6, NON_NEGATIVE)
    """Prioritisation exponent (0: uniform)."""

    beta0: float = ruled(0.4, UNIT)
    """Initial importance-sampling exponent, annealed linearly to 1."""

    weight_norm: WeightNorm = "batch"
    """What the importance weights are divided by, so the largest is 1: `batch`, the
    largest weight in the batch (Acme's and Dopamine's prioritised replay); `replay`, the
    weight of the least likely transition in the whole replay (the PER paper as OpenAI
    Baselines reads it, through a min tree). In a large replay some transition's TD error is
    always near 0, so `replay` shrinks every weight, and the learning rate with it, by
    orders of magnitude as beta nears 1 (measured on breakout-apex: a mean weight of about
    1e-3 at 1M steps)."""

    priority_eps: float = ruled(1e-6, POSITIVE)
    """Added to every priority, so no transition's probability is 0."""

    checkpoint: bool = False
    """Save the replay with each checkpoint (its size and write time are logged), so a
    resumed run samples what it had; false: a resumed run starts with an empty replay."""


@dataclass
class DQNConfig:
    """DQN (Mnih et al. 2015) and its extensions: double Q-learning, dueling heads, n-step
    returns, prioritised replay (`replay.prioritized`), Ape-X's per-env exploration and, with
    a recurrent core (`model.core`), R2D2. Defaults follow CleanRL's dqn.py."""

    lr: float = ruled(2.5e-4, POSITIVE)
    """Adam learning rate."""

    adam_eps: float = 1e-8
    """Adam epsilon."""

    gamma: float = ruled(0.99, between(0, 1, "(]"))
    """Discount factor."""

    nstep: int = ruled(1, AT_LEAST_ONE)
    """Steps in each return: R = r_t + ... + gamma^(n-1) r_{t+n-1}, then bootstrap (cut at
    episode ends; a truncation bootstraps from the final observation)."""

    target_every: int = ruled(50, AT_LEAST_ONE)
    """Updates between two target-network updates (CleanRL's 500 env steps at one update per
    10 steps)."""

    target_tau: float = ruled(1.0, between(0, 1, "(]"))
    """The target update: target = tau * online + (1 - tau) * target. 1: a hard copy."""

    double: bool = False
    """Double Q-learning (van Hasselt et al. 2016): the online network picks the next action,
    the target network values it."""

    dueling: bool = False
    """Dueling heads (Wang et al. 2016): Q = V + A - mean(A)."""

    loss: TDLoss = "mse"
    """The TD loss: `mse` (CleanRL's dqn.py) or `huber` (smooth L1, delta 1)."""

    max_grad_norm: float | None = None
    """Clip the gradient's global norm to this; None: no clipping."""

    exploration: Exploration = "linear"
    """epsilon-greedy in the actors: `linear` from `epsilon_start` to `epsilon_end` over
    `epsilon_fraction` of `total_env_steps` (CleanRL), or `apex`: a fixed epsilon per env,
    0.4^(1 + 7 i / (N - 1)) for env i of N (Ape-X)."""

    epsilon_start: float = 1.0
    """`linear`: epsilon at the start."""

    epsilon_end: float = 0.05
    """`linear`: epsilon at the end of the schedule."""

    epsilon_fraction: float = ruled(0.5, UNIT)
    """`linear`: the share of `total_env_steps` over which epsilon falls."""

    apex_base: float = ruled(0.4, between(0, 1, "()"))
    """`apex`: epsilon_i = apex_base^(1 + apex_alpha i / (N - 1))."""

    apex_alpha: float = 7.0
    """`apex`: see `apex_base`."""

    sequence_len: int = 80
    """With a recurrent core (R2D2, Kapturowski et al. 2019): steps in each replayed sequence.
    Sequences start every `replay.segment_len` steps of an env, so they overlap by
    sequence_len - segment_len (R2D2: 80 overlapping by 40); it must be a multiple of it."""

    burn_in: int = 40
    """R2D2: the first steps of a sequence only rebuild the recurrent state from the stored
    one (no loss, no gradient): the stored state came from an older version."""

    value_rescale: bool = True
    """R2D2: learn h(Q) with h(x) = sign(x)(sqrt(|x| + 1) - 1) + 1e-3 x (Pohlen et al. 2018),
    so targets of very different scales fit one network."""

    priority_eta: float = ruled(0.9, UNIT)
    """R2D2: a sequence's priority, eta * max |TD| + (1 - eta) * mean |TD| over its steps."""

    threads: int = ruled(1, AT_LEAST_ONE)
    """torch threads of the learner."""


@dataclass
class SACConfig:
    """SAC (Haarnoja et al. 2018) for Box actions: twin Q-networks with a min target, a
    tanh-squashed Gaussian policy, the entropy temperature tuned to a target. Defaults follow
    CleanRL's sac_continuous_action.py."""

    gamma: float = ruled(0.99, between(0, 1, "(]"))
    """Discount factor."""

    tau: float = ruled(0.005, between(0, 1, "(]"))
    """Target networks: target = tau * online + (1 - tau) * target, every update."""

    policy_lr: float = ruled(3e-4, POSITIVE)
    """Adam learning rate of the policy."""

    q_lr: float = ruled(1e-3, POSITIVE)
    """Adam learning rate of the Q-networks (and of the temperature)."""

    policy_every: int = ruled(2, AT_LEAST_ONE)
    """Updates between policy updates; each then takes this many policy steps (CleanRL's
    delayed update, TD3-style)."""

    alpha: float = ruled(0.2, NON_NEGATIVE)
    """The entropy temperature when `autotune` is off (its starting value is 1 otherwise)."""

    autotune: bool = True
    """Tune the temperature so the policy's entropy tracks `target_entropy`."""

    target_entropy: float | None = None
    """None: -dim(A)."""

    threads: int = ruled(1, AT_LEAST_ONE)
    """Threads of the learner. With MLP networks the twin critics can run side by side on 2
    (numpy releases the GIL in their matmuls) and torch keeps one thread; with
    `matmul: auto` this is the most they take, and the learner's trial keeps 1 where that
    updates faster. With a CNN encoder these are torch's intra-op threads. 2 can pay on 2
    cores when the actors leave a core mostly idle (one MuJoCo env: `halfcheetah-sac`)."""

    matmul: MatmulLibrary = "auto"
    """Where the MLP networks' matrix products run: `numpy` (OpenBLAS) or `torch` (MKL).
    Which is faster depends on the CPU. `auto`: the learner's first updates go round the
    ways to run them, each library with the twin critics on one thread and (with
    `threads: 2`) on two, `policy_every` updates at a time, 16 turns each, and the way with
    the lowest median time stays (models/gemm.py); the choice and every median are logged
    (`matmul/*`). CNN encoders always compute in torch, and on a GPU everything does."""

    precision: ProductPrecision = "float32"
    """The MLP networks' large matrix products (their hidden layers' 256 x 256 at batch 256,
    forward and backward) in `bfloat16`: both factors rounded to bfloat16, sums in float32
    (oneDNN), the product widened back to float32. The thin products (the first layer's,
    the heads'), the element-wise work, the parameters, the gradients and Adam stay
    float32, and the actors act in float32. About 1.3x cheaper SAC updates on CPUs with
    native bfloat16 (AVX512-BF16 or AMX), slower elsewhere (emulated); `auto`: `bfloat16`
    on such CPUs, else `float32`. Logged as `matmul/bfloat16`. CPU only: on a GPU the
    networks compute in float32."""

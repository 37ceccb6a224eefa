"""The experiment config: typed dataclasses, one per component, with a docstring per field.

These types are the single source of truth: the YAML presets fill them, `key=value`
overrides address their fields by dotted path (`ppo.lr=3e-4`), validation checks them,
and docs/configuration.md is generated from them (`python -m surge.config.docs`).

A field's documentation is the string literal placed right under it (as in CleanRL's
`Args`); `surge.config.docs` reads those with `ast`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from surge.config.llm_schema import (
    ContextConfig,
    GRPOConfig,
    LoraConfig,
    RolloutConfig,
    SFTConfig,
    TaskConfig,
    TinyModelConfig,
)
from surge.config.qmix_schema import QMIXConfig
from surge.config.replay_schema import DQNConfig, ReplayConfig, SACConfig
from surge.config.reward_model_schema import RewardModelConfig
from surge.config.rules import (
    AT_LEAST_ONE,
    DEVICE,
    NON_NEGATIVE,
    POSITIVE,
    UNIT,
    Rule,
    between,
    or_null,
    ruled,
    ruled_factory,
)

RuntimeName = Literal["serial", "local", "ray"]
Activation = Literal["tanh", "relu"]
EnvBackend = Literal["auto", "gymnasium", "ale", "envpool"]
EncoderName = Literal["auto", "flat", "nature_cnn", "small_cnn", "grid_cnn"]
ImageLayout = Literal["auto", "chw", "hwc"]
GridActions = Literal["none", "cells", "columns"]
Precision = Literal["auto", "float32", "bfloat16"]
Backend = Literal["auto", "torch", "numpy"]
InferenceMode = Literal["remote", "inline"]
CoreName = Literal["none", "gru", "lstm"]
GlobalState = Literal["none", "auto", "env", "concat"]

NON_EMPTY_ID = Rule(lambda v: bool(v.strip()), "a non-empty Gymnasium id")
NON_EMPTY_WIDTHS = Rule(lambda v: len(v) > 0, "a non-empty list such as [64, 64]")
POSITIVE_WIDTHS = Rule(lambda v: all(s >= 1 for s in v), "a list of positive widths")
EVAL_OPPONENTS = Rule(
    lambda v: set(v) <= {"random", "heuristic"} and len(set(v)) == len(v),
    "a list of distinct players from [random, heuristic]",
)


@dataclass
class AtariConfig:
    """Atari preprocessing (the standard DQN/PPO recipe), applied to `ALE/*` env ids."""

    noop_max: int = ruled(30, NON_NEGATIVE)
    """Up to this many no-op actions after each reset, for varied starts."""

    frame_skip: int = ruled(4, AT_LEAST_ONE)
    """Repeat each action this many frames; the observation is the max of the last two."""

    screen_size: int = ruled(84, AT_LEAST_ONE)
    """Frames are resized to screen_size x screen_size greyscale."""

    frame_stack: int = ruled(4, AT_LEAST_ONE)
    """Consecutive frames stacked into one observation [frame_stack, H, W] uint8."""

    episodic_life: bool = True
    """A lost life ends the training episode (not the game, nor the reported return)."""

    clip_rewards: bool = True
    """Train on the sign of each reward; reported returns stay the raw game score."""

    repeat_action_probability: float = ruled(0.0, between(0, 1, "[)"))
    """Sticky actions (ALE v5 defaults to 0.25; CleanRL's ppo_atari uses 0)."""

    full_action_space: bool = False
    """Use all 18 Atari actions instead of the game's minimal set."""

    fire_reset: bool = True
    """Press FIRE for one frame at each reset in games that have it (Breakout waits for it to
    serve the ball), as ale-py's vector env does; after a lost life the agent must fire
    itself."""


@dataclass
class MultiAgentEnvConfig:
    """How a PettingZoo env's agents become rows of a policy's batch (`env.id=pettingzoo:...`,
    docs/multiagent.md). Ignored by single-agent envs."""

    agent_id: bool = False
    """Add the field `agent_id` to every agent's observation: a one-hot of the agent's index
    among the env's `possible_agents`. With parameter sharing (one policy for many agents) it
    lets the policy act differently per agent."""

    global_state: GlobalState = "none"
    """Add the field `global_state` (the same for every agent of an env) for a centralised
    critic (MAPPO: `model.critic_inputs: [global_state]`). `env`: the env's `state()`; `concat`: the
    agents' observations concatenated in `possible_agents` order (zeros for an agent not in
    the episode); `auto`: `env` when the env implements `state()`, else `concat`; `none`: no
    such field."""


NOT_A_KEY = "surge.not_a_key"
"""Field metadata: the field holds other sections' values and is no key of a config file (it
stays an init argument, so `dataclasses.replace` keeps it)."""

MULTI_AGENT_PREFIXES = ("pettingzoo:", "lbforaging:")
"""`env.id` prefixes of multi-agent envs, trained as agent rows (surge/envs/pettingzoo.py)."""


@dataclass
class EnvConfig:
    """Which environment to train on and how to build it."""

    id: str = ruled("CartPole-v1", NON_EMPTY_ID)
    """A Gymnasium id (`CartPole-v1`), or `module:EnvName-v0` to import `module` first so it
    can register a user's own env, or `pettingzoo:<module>` for a PettingZoo multi-agent env
    (`pettingzoo:mpe2.simple_spread_v3`; `pettingzoo:<module>:<factory>` for your own;
    docs/multiagent.md)."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed to `gymnasium.make` (for `ALE/*` ids on the `ale`
    backend: to `ale_py.vector_env.AtariVectorEnv`)."""

    wrappers: list[str] = field(default_factory=list)
    """Wrappers applied in order to each env after `gymnasium.make`: import paths
    `module:Name` (or `module.Name`) of a class or function that takes the env and returns
    the wrapped env, e.g. `minigrid.wrappers:ImgObsWrapper`. Backend `gymnasium` only (the
    `ale` and `envpool` groups are not gymnasium envs)."""

    info_keys: list[str] = field(default_factory=list)
    """Entries of each step's `info` recorded into the sample stream beside the reward
    (`info/<key>`, one array per step and env: numbers, bools or fixed-shape arrays such as
    a camera frame), for a stage that reads them (a reward model, surge/workers/
    reward_model.py). Checked on a probe step; backend `gymnasium`, single-agent envs."""

    max_episode_steps: int | None = ruled(None, or_null(AT_LEAST_ONE))
    """Override the env's time limit (episodes are truncated, not terminated, after this many
    steps). None keeps the registered limit."""

    clip_actions: bool = True
    """Clip continuous (Box) actions to the action space bounds before stepping the env."""

    backend: EnvBackend = "auto"
    """How an env group is stepped: `gymnasium` (one `gymnasium.make` env per slot, stepped
    in turn), `ale` (ale-py's native vectorised Atari env, threads in C++), `envpool`
    (EnvPool's C++ pools: Atari and its other envs with Box observations, such as CartPole;
    needs the `envpool` extra). `auto`: `ale` for `ALE/*` ids, else `gymnasium`."""

    atari: AtariConfig = field(default_factory=AtariConfig)
    """Preprocessing for Atari (`ALE/*`) ids; ignored for other envs."""

    multiagent: MultiAgentEnvConfig = field(default_factory=MultiAgentEnvConfig)
    """Multi-agent (PettingZoo) envs: what each agent's observation holds."""

    threads: int = 1
    """C++ threads stepping the envs of one group with the `ale` and `envpool` backends (0:
    one per core).
    1 is fastest on small machines: the other core runs the policy and the trainer, and
    threads only pay off for groups of many envs."""


@dataclass
class WorkersConfig:
    """How many workers of each kind, and how actors lay out their environments."""

    actors: int = ruled(1, AT_LEAST_ONE)
    """Number of actor workers (processes in the `local` runtime, Ray actors in `ray`)."""

    ring_size: int = ruled(2, AT_LEAST_ONE)
    """Env groups per actor. The actor steps group k+1 while group k waits for its actions."""

    envs_per_group: int = ruled(2, AT_LEAST_ONE)
    """Environments in one group. One inference request carries a whole group."""

    policy_workers: int = ruled(1, AT_LEAST_ONE)
    """Number of policy (inference) workers; actor i is served by policy worker i % this.
    Ignored with `inference: inline`."""

    inference: InferenceMode = "remote"
    """`remote`: policy workers serve batched inference to actors over the inference stream;
    `inline`: each actor runs the policy itself (SRL's CPU-inference mode), which saves a
    process hop per step: best for cheap policies and small machines."""

    inference_splits: int = 0
    """Times per ring rotation the actor flushes its pending inference requests (must divide
    `ring_size`). Fewer flushes mean fewer, larger messages; 0 means `ring_size` (send each
    group's request as soon as it is stepped)."""

    inference_spin_us: float = ruled(200.0, Rule(NON_NEGATIVE.check, ">= 0 (0: never poll)"))
    """With remote inference, how long (microseconds) an actor polls its inference slots
    for answers, and a policy worker for requests, before sleeping on its channel: a peer on
    another core answers a small batch sooner than a sleeper wakes. Polling stops after a
    wait longer than this, and resumes after one shorter (streams/spin.py); a process
    that may use one CPU only never polls. 0: always sleep."""

    actor_threads: int = ruled(1, AT_LEAST_ONE)
    """torch / OpenMP threads in each actor worker process."""

    policy_threads: int = ruled(1, AT_LEAST_ONE)
    """torch / OpenMP threads in each policy worker process."""

    trainer_threads: int = ruled(1, AT_LEAST_ONE)
    """torch / OpenMP threads in the trainer process (1 is fastest for small MLPs)."""

    trainer_threads_alone: int = ruled(0, NON_NEGATIVE)
    """torch threads of the torch learner while it runs alone: once every actor has filled
    all the batches it may fill ahead (`max_policy_lag`) and waits for new parameters, so
    the actors' and policy workers' cores are idle. Checked before every minibatch; with
    `max_policy_lag: 0` that is the whole update. 0: `trainer_threads` throughout. On 2
    cores, `trainer_threads: 1` with 2 here lets a CNN learner use the second core once
    the actor is done with the next batch."""

    trainer_device: str = ruled("auto", DEVICE)
    """Where the learner's torch model trains: `auto` (CUDA when the trainer's process sees a
    GPU and its model is a torch one; numpy MLP learners stay on the CPU), `cpu`, `cuda` or
    `cuda:N` (surge/devices.py). On Ray the trainer sees the GPUs `ray.trainer_gpus`
    declares."""

    policy_device: str = ruled("auto", DEVICE)
    """Where policy workers run a torch model's batched inference (as `trainer_device`; on
    Ray they see the GPUs `ray.policy_gpus` declares, a fraction to share one)."""

    heartbeat_timeout_s: float = ruled(60.0, POSITIVE)
    """A worker that has not reported progress for this long is declared hung: an actor or
    policy worker is then killed and restarted (see `max_restarts`), the trainer stops the run."""

    max_restarts: int = ruled(3, NON_NEGATIVE)
    """How many times each actor or policy worker may be restarted in place after it died
    (e.g. killed) or hung. The run goes on; the segments a dead actor was writing are
    discarded. 0: any worker failure stops the run. The trainer is never restarted: the run
    stops with its last checkpoint, and `surge resume` continues it."""

    restart_on_error: bool = False
    """Also restart an actor or policy worker that raised an exception (e.g. its env raised).
    Off by default: an exception is usually a bug, best reported at once with its traceback."""


@dataclass
class RayConfig:
    """Where a `runtime=ray` run places its workers (docs/scaling.md). Ignored by other runtimes."""

    address: str | None = None
    """Address of a running Ray cluster (`HOST:PORT` of its head, or `auto`). None: start a
    Ray instance on this machine for the run and stop it at the end."""

    trainer_node: str | None = None
    """The node (its Ray node id, or a prefix of it) the trainer's pod goes to. None: where
    its GPUs are, preferring the controller's node. A population on Ray spreads its members'
    trainers over the cluster's nodes with it (docs/population.md); the run directory must
    then be on a file system every node shares."""

    trainer_cpus: float = ruled(1.0, NON_NEGATIVE)
    """Ray CPUs the trainer declares (fractions allowed). Ray CPUs are a scheduling budget:
    the trainer still uses `workers.trainer_threads` threads."""

    trainer_gpus: float = ruled(0.0, NON_NEGATIVE)
    """GPUs the trainer declares; above 0 it is placed on a node with a free GPU."""

    policy_cpus: float = ruled(0.5, NON_NEGATIVE)
    """Ray CPUs each policy worker declares."""

    policy_gpus: float = ruled(0.0, NON_NEGATIVE)
    """GPUs each policy worker declares; fractions let several policy workers share a device."""

    actor_cpus: float = ruled(0.5, NON_NEGATIVE)
    """Ray CPUs each actor worker declares."""

    eval_cpus: float = ruled(0.25, NON_NEGATIVE)
    """CPUs each evaluation worker declares (they run on the trainer's node)."""


@dataclass
class ModelConfig:
    """The actor-critic network (LLM runs: the language model)."""

    path: str | None = None
    """LLM runs (`algo: grpo`): a local Hugging Face causal LM directory (safetensors weights,
    config and tokenizer), loaded offline. None: the built-in tiny Llama (`tiny_model`)."""

    lora: LoraConfig = field(default_factory=LoraConfig)
    """LLM runs: LoRA adapters instead of full fine-tuning (`model.lora.r` > 0)."""

    hidden_sizes: list[int] = ruled_factory(lambda: [64, 64], NON_EMPTY_WIDTHS, POSITIVE_WIDTHS)
    """Widths of the hidden layers of the MLP torso on the `flat` or `small_cnn` encoder's
    features (one torso each for actor and critic unless `shared` is set). Not used with
    `nature_cnn`: the CNN is the torso, and the heads sit on its 512 features."""

    activation: Activation = "tanh"
    """Non-linearity between hidden layers of the MLP torso (the CNNs always use ReLU)."""

    shared: bool = False
    """Share one MLP torso between the policy and value heads. With `nature_cnn` the CNN is
    always shared by both heads (as in CleanRL's ppo_atari)."""

    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy for Box actions."""

    encoder: EncoderName = "auto"
    """How observations become features: `flat` (concatenate vector fields, then the MLP
    torso), `nature_cnn` (the DQN Nature CNN for one uint8 image field, images of at least
    36x36 such as Atari's 84x84, scaled by 1/255: conv 32 8x8/4, 64 4x4/2, 64 3x3/1, linear
    512, ReLU; it is the torso), `small_cnn` (MiniGrid's baseline CNN for one uint8 image
    field of 7x7 to 35x35, raw values: conv 16 2x2, max-pool 2x2, conv 32 2x2, conv 64 2x2,
    ReLU; the MLP torso sits on its features). `auto`: for one uint8 image observation,
    `nature_cnn` if its height and width are at least 36, `small_cnn` from 7, an error below
    7 (use `flat`); else `flat`. `grid_cnn` (never chosen by `auto`): for board games' small
    grids of any dtype ([H, W, C] or [C, H, W], at least 3x3, e.g. connect four's 6x7x2):
    3x3 convolutions with zero padding that keep the grid's size (`model.grid_channels`),
    ReLU, flattened; the MLP torso sits on them, and an `action_mask` field is left to the
    logits."""

    grid_channels: list[int] = field(default_factory=lambda: [32, 32])
    """Channels of the `grid_cnn` encoder's 3x3 convolutions, one entry per layer."""

    grid_actions: GridActions = "none"
    """With `grid_cnn`, where the policy's logits come from. `none`: the MLP torso, like any
    model. `cells` (action i plays cell i, row-major: tic-tac-toe) or `columns` (action i
    drops into column i and lands on its lowest empty cell: connect four): each action's
    logit is read from the cell it plays, by a 1x1 convolution over the last grid features
    plus a per-action bias (models/grid_actions.py), so a pattern learned in one place is
    known in every place; the MLP torso then serves the value head alone. Torch acts (not
    numpy). Needs a feed-forward model whose value function reads the policy's inputs."""

    image_layout: ImageLayout = "auto"
    """Axis order of an image observation for the CNN encoders. `auto`: `hwc` when the last
    dim is at most 4 and the first is larger (MiniGrid's (7, 7, 3), RGB frames), else `chw`
    (Atari frame stacks (4, 84, 84)). Set it when the guess is wrong, e.g. for an [H, W, C]
    image with more than 4 channels."""

    backend: Backend = "auto"
    """What the trainer computes with. `numpy`: the MLP's forward and backward, the loss
    (PPO's, or DQN's TD loss) and Adam written out in numpy (models/numpy_net.py,
    algos/numpy_ppo.py, algos/numpy_dqn.py): a small-MLP update costs a fraction of torch's
    (per-op dispatch dominates there), and PPO's trainer never imports torch (about 1.3 s
    less start-up). Covers feed-forward models on the `flat` encoder with any hidden sizes
    (PPO: Discrete, MultiDiscrete and Box actions; DQN: Q-networks, dueling or not); one BLAS
    thread (a recurrent `core` trains in torch, and acts in numpy). `torch`: the torch model
    and autograd (any model). `auto`: `numpy` for the models it covers, else `torch`.
    Checkpoints hold the same torch state dict either way; a PPO run resumes with the
    backend it started with, a DQN run with either."""

    actor_inputs: list[str] = field(default_factory=list)
    """Observation fields the policy reads (the keys of a Dict observation, as in
    docs/environments.md; a multi-agent row's `obs`, `agent_id`, `global_state`). Empty:
    every field except `global_state` and `action_mask` (a mask is applied to the logits,
    never encoded)."""

    critic_inputs: list[str] = field(default_factory=list)
    """Observation fields the value function reads. Empty: the policy's. A centralised critic
    (MAPPO) reads the global state: `[global_state]` or `[global_state, agent_id]` (with
    `env.multiagent.global_state`). Different inputs need separate torsos (`shared: false`)."""

    value_norm: bool = False
    """Normalise the value targets by their running mean and std (MAPPO's value
    normalisation): the critic learns targets in those units, and every value leaving it is
    mapped back, so recorded values, bootstraps and advantages stay in reward units. The
    statistics are published with the weights and checkpointed."""

    normalize_obs: bool = False
    """Normalise observations by their running mean and variance: the policy sees
    `clip((obs - mean) / sqrt(var + 1e-8), -clip_obs, clip_obs)`. The trainer keeps the
    statistics (updated from every batch's raw observations), publishes them with the
    weights as one version, and checkpoints them; `surge eval` applies them frozen.
    Real-valued Box observations only (docs/environments.md)."""

    clip_obs: float = ruled(10.0, POSITIVE)
    """Normalised observations are clipped to [-clip_obs, clip_obs] (with `normalize_obs`)."""

    core: CoreName = "none"
    """A recurrent core between the encoder and the MLP torsos, shared by the policy and
    the value function: `gru` (a GRU cell) or `lstm` (an LSTM cell); `none`: a feed-forward
    policy. Its state is carried per env from step to step (reset when an episode ends),
    stored at the start of every segment, and the learner backpropagates through each
    segment from that stored state (truncated BPTT; `ppo.burn_in`). Recurrent models train
    with the torch backend (docs/recurrent.md)."""

    core_size: int = ruled(128, AT_LEAST_ONE)
    """Hidden size of the recurrent core (`core`); its state is this many floats per env
    for `gru`, twice as many for `lstm` (h and c)."""

    precision: Precision = "auto"
    """Compute dtype of the `nature_cnn` encoder (bfloat16 autocast around its convolutions
    and linear layer; parameters, gradients, Adam state and the heads stay float32).
    `bfloat16` makes a Nature CNN PPO update about 2x cheaper on CPUs with native bf16
    (AVX512-BF16 or AMX) and emulates it slowly elsewhere; `auto`: `bfloat16` on such CPUs,
    else `float32`. On a CUDA device `auto` is `bfloat16` where the GPU computes it
    (Ampere and later). The flat and small_cnn encoders always compute in float32."""


@dataclass
class PPOConfig:
    """PPO hyperparameters (defaults follow CleanRL's ppo.py)."""

    rollout_len: int = ruled(128, AT_LEAST_ONE)
    """Steps per env in one trajectory segment; one update trains on one segment of every env."""

    epochs: int = ruled(4, AT_LEAST_ONE)
    """Passes over each batch."""

    minibatches: int = ruled(4, AT_LEAST_ONE)
    """Minibatches per epoch; the batch (rollout_len x total envs) must divide evenly. With a
    recurrent model (`model.core`) a minibatch is whole segments (sequences), so this must
    divide the number of envs."""

    lr: float = ruled(2.5e-4, POSITIVE)
    """Adam learning rate."""

    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 at `total_env_steps`."""

    adam_eps: float = ruled(1e-5, POSITIVE)
    """Adam epsilon."""

    gamma: float = ruled(0.99, between(0, 1, "(]"))
    """Discount factor."""

    gae_lambda: float = ruled(0.95, UNIT)
    """GAE lambda."""

    clip_coef: float = ruled(0.2, POSITIVE)
    """Surrogate clipping coefficient."""

    clip_vloss: bool = True
    """Clip the value loss around the old values (by `clip_coef`)."""

    ent_coef: float = ruled(0.01, NON_NEGATIVE)
    """Entropy bonus coefficient."""

    vf_coef: float = ruled(0.5, NON_NEGATIVE)
    """Value loss coefficient."""

    max_grad_norm: float = ruled(0.5, POSITIVE)
    """Global gradient-norm clip."""

    norm_adv: bool = True
    """Normalise advantages per minibatch."""

    cuda_graphs: bool = True
    """With the learner on a CUDA GPU and a feed-forward model: capture the minibatch step
    (forward, loss, backward, clip, Adam) as a CUDA graph once per minibatch shape and replay
    it, one launch instead of a few hundred kernels (algos/cuda_graph.py). The same maths
    as the eager step; updates with inactive multi-agent rows run eagerly. No effect on the
    CPU."""

    target_kl: float | None = ruled(None, or_null(POSITIVE))
    """Stop the epochs of an update early once the approximate KL exceeds this. None: never."""

    normalize_reward: bool = False
    """Scale rewards by the running standard deviation of each env's discounted return
    (discount `gamma`, restarted at episode ends; not mean-centred), as CleanRL's
    NormalizeReward wrapper, but kept by the trainer and checkpointed. Reported episode
    returns stay raw."""

    clip_reward: float = ruled(10.0, POSITIVE)
    """Scaled rewards are clipped to [-clip_reward, clip_reward] (with `normalize_reward`)."""

    burn_in: int = ruled(0, NON_NEGATIVE)
    """Recurrent models (`model.core`): the first this many steps of every segment only
    rebuild the recurrent state from the stored one, under no gradient, and are left out
    of the loss (R2D2's burn-in: the stored state came from an older policy version). Must
    be below `rollout_len`; 0: every step is trained on."""


@dataclass
class APPOConfig:
    """APPO (asynchronous PPO, as in IMPALA and Sample Factory): PPO's clipped surrogate on
    V-trace targets, which correct for actions chosen by an older policy (`max_policy_lag`).
    The PPO settings (rollout, epochs, clipping, coefficients) apply as well."""

    rho_bar: float = ruled(1.0, POSITIVE)
    """Truncation of the importance weights in the V-trace value targets (rho-bar)."""

    c_bar: float = ruled(1.0, POSITIVE)
    """Truncation of the trace-cutting weights in V-trace (c-bar)."""


@dataclass
class LogConfig:
    """What the run records and shows."""

    interval_s: float = ruled(2.0, NON_NEGATIVE)
    """Seconds between lines of metrics.jsonl / TensorBoard points (at most one per update)."""

    tensorboard: bool = True
    """Write TensorBoard event files into the run directory."""

    progress: bool = True
    """Show the live progress display on the terminal."""

    wandb: bool = False
    """Mirror the metrics and the config to Weights & Biases (needs the `wandb` extra:
    `pip install 'surge-rl[wandb]'`). The run is stored under `run_dir/wandb/` and keeps
    one W&B run id across `surge resume`; `WANDB_MODE=offline` records it with no network
    (upload later with `wandb sync`)."""

    wandb_project: str = "surge"
    """The W&B project the run goes into."""

    wandb_entity: str | None = None
    """The W&B entity (user or team); None: your default entity."""

    checkpoint_interval_s: float = ruled(60.0, NON_NEGATIVE)
    """Seconds between checkpoints (one is always written at the end and on Ctrl+C)."""

    first_checkpoint_s: float = ruled(5.0, NON_NEGATIVE)
    """Seconds from the trainer's start to its first checkpoint (or `checkpoint_interval_s`
    if that is shorter), so that a run whose trainer dies early can still be resumed."""

    keep_checkpoints: int = ruled(3, AT_LEAST_ONE)
    """How many of the newest checkpoints to keep."""


@dataclass
class EvalConfig:
    """Evaluation during training: workers that play whole episodes with the latest published
    policy on their own env instances and seeds, and never write samples."""

    workers: int = ruled(0, NON_NEGATIVE)
    """Evaluation worker processes (0: no evaluation during training)."""

    every_versions: int = ruled(0, NON_NEGATIVE)
    """Evaluate every this many policy versions; 0: every `every_s` seconds instead."""

    every_s: float = ruled(30.0, POSITIVE)
    """Seconds between evaluations when `every_versions` is 0."""

    episodes: int = ruled(10, AT_LEAST_ONE)
    """Episodes per evaluation (split over the evaluation workers)."""

    deterministic: bool = True
    """Act with the policy's mode (greedy) instead of sampling."""

    video_every: int = ruled(0, NON_NEGATIVE)
    """Record the first episode of every this many evaluations as an MP4 under
    `run_dir/videos/` (and in TensorBoard); an evaluation skipped because the evaluator lagged
    passes its video to the next one played. 0: no videos. Needs the `video` extra."""

    nice: int = ruled(19, between(0, 19))
    """OS niceness added to evaluation processes, so that they use the CPU training leaves."""

    device: str = ruled("auto", DEVICE)
    """Where evaluation workers run a torch policy (as `workers.trainer_device`)."""

    final: bool = True
    """When the run ends on its budget or time, the evaluation workers also evaluate its last
    version before the run closes (unless the schedule just did), so the closing line and the
    metrics report the policy the run saved, not one a few versions older."""

    final_timeout_s: float = ruled(600.0, POSITIVE)
    """The longest the run waits for that final evaluation before it closes without it."""


@dataclass
class SelfPlayConfig:
    """Self-play (`env.id=selfplay:<game>`, docs/multiagent.md): the learner plays one seat
    of a two-player game; the other seat's player is drawn for each episode from a league of
    the learner's past versions, kept by the league worker."""

    snapshot_every: int = ruled(10, AT_LEAST_ONE)
    """Versions between two snapshots of the learner taken into the league (version 0 is
    the first)."""

    pool_size: int = ruled(20, AT_LEAST_ONE)
    """Snapshots the league keeps; a new one replaces the oldest."""

    latest_share: float = ruled(0.5, UNIT)
    """Share of episodes played against the newest snapshot; the others draw an opponent
    from the whole pool, uniformly or by `pfsp_power`."""

    pfsp_power: float = ruled(0.0, NON_NEGATIVE)
    """Prioritised fictitious self-play (AlphaStar): a pool draw picks a snapshot with
    weight (1 - the learner's win rate against it) ** pfsp_power, each actor counting its
    own games. 0: uniform."""

    eval_opponents: list[str] = ruled_factory(lambda: ["random", "heuristic"], EVAL_OPPONENTS)
    """Fixed players the evaluation workers play (`eval.episodes` games each, seats
    alternating), logged as `eval/win_rate_vs_<player>`, `eval/draw_rate_vs_<player>` and
    `eval/loss_rate_vs_<player>`: `random` (a uniformly random legal move), `heuristic` (the
    game's heuristic player: connect four's wins, blocks, and prefers the centre)."""


@dataclass
class ExperimentConfig:
    """One experiment: runs unchanged on every runtime."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment."""

    seed: int = 1
    """Seed for the env, the networks and the sampling; each worker derives its own from it."""

    runtime: RuntimeName = "local"
    """`serial`: every worker in this process (deterministic, for debugging); `local`: one
    process per worker, streams over shared memory; `ray`: one Ray actor per worker on a Ray
    cluster (see `ray` and docs/scaling.md)."""

    run_dir: str | None = None
    """Where the run writes everything. None: `runs/<preset>-<timestamp>`."""

    total_env_steps: int = ruled(500_000, AT_LEAST_ONE)
    """Stop after this many environment steps (summed over all envs)."""

    max_train_time_s: float | None = ruled(None, or_null(POSITIVE))
    """Also stop once the trainer has trained this long (seconds on its clock, from its start,
    resumed runs included): a time budget, as benchmarks use. None: no limit."""

    stop_return: float | None = None
    """Also stop once the mean return of the last `return_window` episodes reaches this, and
    an evaluation of the newest version confirms it (`stop_confirm`)."""

    stop_confirm: bool = True
    """Stop at `stop_return` only when an evaluation of the newest version also reaches it:
    `eval.episodes` episodes (`eval.deterministic`) played by the evaluation workers, or by
    the trainer itself when there are none (LLM runs: held-out accuracy). Training waits for
    it, so the final checkpoint holds the version evaluated; after a failed check the next
    comes once `return_window` more episodes have finished. The closing line gives both
    numbers. false: stop on the training mean alone."""

    return_window: int = ruled(20, AT_LEAST_ONE)
    """Episodes averaged for `stop_return` and for `episode_return_mean` in the metrics."""

    max_policy_lag: int = ruled(0, NON_NEGATIVE)
    """How many versions older than the trainer's current one the acting policy may be.
    0: synchronous on-policy training (actors wait for every update)."""

    policies: list[str] = field(default_factory=list)
    """Named policies of a multi-agent run (`env.id=pettingzoo:...`, docs/multiagent.md), each
    with its own parameter stream, version, trainer (`trainer-<i>` for the i-th) and
    optimiser; `policy_mapping` routes every agent to one. Empty: one policy, `default`, for
    every agent (parameter sharing). The first policy's trainer writes the run's
    metrics.jsonl and checkpoints; the others' go to `policies/<name>/` in the run
    directory."""

    policy_mapping: dict[str, str] = field(default_factory=dict)
    """Agent-name pattern (shell-style: `adversary_*`) -> policy, for `policies`; each agent
    takes the first pattern it matches, and every agent must match one."""

    algo: str = "ppo"
    """The learning algorithm: `ppo` (GAE advantages from the behaviour policy's values),
    `appo` (V-trace targets and advantages, corrected for policy lag), or `grpo` (LLM RL:
    group-relative advantages; the sections `task`, `rollout`, `grpo`, `sft`, docs/llm.md);
    or `module:Object`, an algorithm plug-in of your own (docs/architecture.md)."""

    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings (also used by `appo`)."""

    appo: APPOConfig = field(default_factory=APPOConfig)
    """V-trace settings of `appo`."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Network settings."""

    workers: WorkersConfig = field(default_factory=WorkersConfig)
    """Worker counts and layout."""

    log: LogConfig = field(default_factory=LogConfig)
    """Logging, progress and checkpoints."""

    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation workers during training (off by default; `surge eval` evaluates a run
    after it)."""

    ray: RayConfig = field(default_factory=RayConfig)
    """The Ray cluster and the resources each worker declares (`runtime=ray` only)."""

    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    """Self-play: the league of past versions the learner plays against (`selfplay:` envs)."""

    task: TaskConfig = field(default_factory=TaskConfig)
    """LLM RL: the prompts and their verifier (the environment of `algo: grpo`)."""

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """LLM RL: the generation workers."""

    context: ContextConfig = field(default_factory=ContextConfig)
    """LLM RL, multi-turn tasks: the working context and how it is managed (SUPO)."""

    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """LLM RL: advantages, loss and optimiser."""

    sft: SFTConfig = field(default_factory=SFTConfig)
    """LLM RL: the supervised warm start before RL."""

    tiny_model: TinyModelConfig = field(default_factory=TinyModelConfig)
    """LLM RL: the built-in model's sizes (used without `model.path`)."""

    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """Replay-based RL (`algo: dqn | sac`): the replay workers and their rate limiter."""

    dqn: DQNConfig = field(default_factory=DQNConfig)
    """`algo: dqn`: DQN, double, dueling, n-step, Ape-X exploration, R2D2 (docs/replay.md)."""

    sac: SACConfig = field(default_factory=SACConfig)
    """`algo: sac`: soft actor-critic for Box actions (docs/replay.md)."""

    qmix: QMIXConfig = field(default_factory=QMIXConfig)
    """`algo: qmix`: QMIX, VDN and independent Q-learning for cooperative multi-agent envs
    (docs/multiagent.md)."""

    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    """Replay-based RL: rewards from a model scoring each step's frame (docs/reward-models.md)."""

    sections: dict[str, Any] = field(default_factory=dict, metadata={NOT_A_KEY: True})
    """The sections an algorithm plug-in brings beyond the ones above (its
    `config_sections`), by name: written at the top level like any section (`a2c: {lr:
    7e-4}`, `a2c.lr=7e-4`), read with `section(name)`."""

    def section(self, name: str) -> Any:
        """The section `name`: one of the fields above, or a plug-in's own."""
        if name in self.sections:
            return self.sections[name]
        return getattr(self, name)

    # Derived values: computed, never configured.
    @property
    def policy_names(self) -> list[str]:
        """The run's policies, the first one leading (its trainer ends the run)."""
        return list(self.policies) or ["default"]

    @property
    def total_envs(self) -> int:
        """Envs in the run: `workers.actors` x `workers.ring_size` x `workers.envs_per_group`."""
        return self.workers.actors * self.workers.ring_size * self.workers.envs_per_group

    @property
    def total_groups(self) -> int:
        """Env groups in the run: `workers.actors` x `workers.ring_size`."""
        return self.workers.actors * self.workers.ring_size

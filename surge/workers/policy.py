"""Inference on versioned parameters: the policy worker, and the same engine inline in an actor.

`PolicyEngine` holds the algorithm's acting policy (`RunContext.acting_policy`), loads
parameters from the parameter service when a newer version exists (between batches, never
during one), and answers a list of env groups with one forward pass over all of them,
writing the actions, the policy's outputs (PPO's log-probs and values) and the version it
used into the groups' inference slots. A recurrent policy reads each row's state from the
slots' `core_in` and writes the state after the step into `core_out`
(models/recurrent_state.py): the engine keeps no state between requests.

- `PolicyWorker` (`workers.inference: remote`): a process serving many actors. Each poll
  takes every ready request, runs one forward pass, and answers. Requests that need a newer
  version than the one loaded wait in `pending`; the trainer's publish record wakes it.
- `InlineInference` (`workers.inference: inline`, SRL's CPU-inference mode): the engine runs
  inside the actor process, behind the same post/ready interface as the remote client, so the
  actor's ring is unchanged. It saves a process hop per group step.
"""

from __future__ import annotations

import time

import numpy as np

from surge.devices import role_device
from surge.models.acting import acting_policy
from surge.models.recurrent_state import CORE_IN, CORE_OUT
from surge.seeds import derive_seed
from surge.streams.inference import InferenceServer, request_obs
from surge.streams.params import ParameterService
from surge.streams.ports import Port
from surge.streams.spin import polling
from surge.streams.transport import Transport
from surge.threads import limit_torch_threads
from surge.tracking.timing import INFERENCE
from surge.workers.base import Binding, RunContext


def build(ctx: RunContext, b: Binding) -> PolicyWorker:
    return PolicyWorker(ctx.for_policy(b.policy), b)


class PolicyEngine:
    """Acts for env groups whose observations sit in inference slots, on versioned params."""

    def __init__(
        self,
        ctx: RunContext,
        arrays: dict[str, np.ndarray],
        transport: Transport,
        params: Port,
        seed: int,
    ) -> None:
        cfg = ctx.cfg
        self.params = ParameterService(transport, params.block)
        device = role_device(cfg.workers.policy_device, "workers.policy_device")
        self.policy = acting_policy(ctx.acting_policy, ctx.env, cfg, seed, device)
        assert self.policy.flat.size == ctx.n_params, "the policy and the trainer disagree"
        self.loaded = -1  # version of the parameters in use; -1: none yet
        self.group_size = ctx.group_rows
        # The per-row fields viewed as [groups * rows, ...]: the rows of consecutive groups
        # are one slice, which `infer` hands to the policy without a copy or a reshape.
        self.obs = {key: _by_row(v) for key, v in request_obs(arrays).items()}
        self.action = _by_row(arrays["action"])
        self.outputs = [_by_row(arrays[name]) for name in self.policy.OUTPUTS]  # `act`'s order
        core_in, core_out = arrays.get(CORE_IN), arrays.get(CORE_OUT)  # recurrent state
        self.core_in = None if core_in is None else _by_row(core_in, flatten=True)
        self.core_out = None if core_out is None else _by_row(core_out, flatten=True)
        assert (self.core_in is None) == (self.policy.state_size == 0), "state fields differ"
        # The per-group fields.
        self.version, self.min_version = arrays["version"], arrays["min_version"]
        self.request_id, self.response_id = arrays["request_id"], arrays["response_id"]

    def refresh(self) -> bool:
        """Load the newest parameters if they are newer than the loaded ones."""
        if self.params.latest_version() <= self.loaded:
            return False
        self.loaded = self.params.read(self.policy.flat)
        self.policy.reload()
        return True

    def servable(self, groups: set[int]) -> list[int]:
        return sorted([g for g in groups if self.min_version[g] <= self.loaded])

    def infer(self, groups: list[int]) -> None:
        """Answer the requests of `groups` (sorted, distinct) in one forward pass."""
        g0, k, size = groups[0], len(groups), self.group_size
        rows: slice | list[int]
        flat: slice | np.ndarray
        if groups[-1] - g0 == k - 1:  # consecutive groups: slices, so views and no copies
            rows, flat = slice(g0, g0 + k), slice(g0 * size, (g0 + k) * size)
        else:
            rows, flat = groups, (np.asarray(groups)[:, None] * size + np.arange(size)).ravel()
        ids = self.request_id[rows].copy()  # before the observations: see streams/inference.py
        obs = {key: v[flat] for key, v in self.obs.items()}
        if self.core_in is None:
            action, *outputs = self.policy.act(obs)  # normalised with its version's statistics
        else:  # recurrent: the state each request carries in, the state after it out
            assert self.core_out is not None
            action, *outputs, core = self.policy.act(obs, core=self.core_in[flat])
            self.core_out[flat] = core
        self.action[flat] = action
        for slots, values in zip(self.outputs, outputs, strict=True):
            slots[flat] = values
        self.version[rows] = self.loaded
        self.response_id[rows] = ids


def _by_row(field: np.ndarray, flatten: bool = False) -> np.ndarray:
    """A view of a [groups, rows, ...] field as [groups * rows, ...] (`flatten`: [.., -1])."""
    shape = (field.shape[0] * field.shape[1], -1) if flatten else (-1, *field.shape[2:])
    view = field.reshape(shape)
    assert np.shares_memory(view, field), "a copy: writes would miss the shared block"
    return view


class PolicyWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = ctx.cfg
        self.name = b.name
        self.finished = False
        self.timers = b.control.timers
        self.server = InferenceServer(b.transport, b.port_of_kind("request/response"), b.inbox)
        seed = derive_seed(cfg.seed, "policy", ctx.resumes, b.index)
        params = b.port_of_kind("versions")
        self.engine = PolicyEngine(ctx, self.server.arrays, b.transport, params, seed)
        limit_torch_threads(cfg.workers.policy_threads)
        self._woken = True  # look at the slots once at start: a restart finds requests there
        self._spin = polling(cfg.workers.inference_spin_us * 1e-6, self.server.concurrent)

    def _work(self) -> bool:
        """Whether a request it can serve, or newer parameters, came (read from shared
        memory: what the spin polls)."""
        engine = self.engine
        if engine.params.latest_version() > engine.loaded:
            return True
        return bool(engine.servable(self.server.pending()))

    def poll(self, timeout: float) -> bool:
        if not self._woken and not self._spin.poll(self._work):
            waited = time.perf_counter()
            self._woken = self.server.receive(timeout)
            self._spin.slept(self.timers.add_wait(waited) - waited)
        t = self.timers.now()
        self.engine.refresh()
        serve = self.engine.servable(self.server.pending())
        if not serve:
            self._woken = False  # nothing servable until a request or new parameters come
            return False
        self._woken = self.server.receive(0.0)  # drain wake-ups; the slots say what to do
        self.engine.infer(serve)
        self.server.respond(serve)
        self.timers.add(INFERENCE, t)
        return True

    def close(self) -> None:
        pass


class InlineInference:
    """The actor-side inference client of `workers.inference: inline`.

    `post` only records the request; `ready` answers every posted group whose `min_version`
    the loaded parameters satisfy in one forward pass, and when none is servable, waits for
    the trainer's next publish in this actor's inbox (the trainer notifies it directly).
    """

    def __init__(
        self,
        ctx: RunContext,
        b: Binding,
        arrays: dict[str, np.ndarray],
        params: Port | None = None,
        policy: str = "",
    ) -> None:
        """`params`: the parameter stream of the policy it runs (default: the actor's one);
        `policy`: its name when the actor runs several (mixed into the sampling seed)."""
        keys = (policy,) if policy else ()
        seed = derive_seed(ctx.cfg.seed, "inline-policy", ctx.resumes, b.index, *keys)
        params = params or b.port_of_kind("versions")
        self.engine = PolicyEngine(ctx, arrays, b.transport, params, seed)
        limit_torch_threads(ctx.cfg.workers.actor_threads)
        self._published = b.transport.channel(b.inbox)  # the trainer announces versions here
        self._pending: set[int] = set()
        self.timers = b.control.timers

    def post(self, group: int, min_version: int) -> None:
        self.engine.min_version[group] = min_version
        self.engine.request_id[group] += 1
        self._pending.add(group)

    def flush(self) -> None:
        pass  # nothing is sent anywhere

    def answered(self, group: int) -> bool:
        """Whether the group's latest request has its answer."""
        return bool(self.engine.response_id[group] == self.engine.request_id[group])

    def answer_servable(self) -> list[int]:
        """Answer every posted group the loaded (or newly published) parameters can serve,
        without waiting; the groups answered."""
        self.engine.refresh()
        serve = self.engine.servable(self._pending)
        if serve:
            t = self.timers.now()
            self._pending.difference_update(serve)
            self.engine.infer(serve)
            self.timers.add(INFERENCE, t)
        return serve

    def ready(self, timeout: float) -> list[int]:
        self.engine.refresh()
        serve = self.engine.servable(self._pending)
        if not serve:
            waited = time.perf_counter()
            self._published.recv(timeout)  # PARAMS_UPDATED records; content does not matter
            self.timers.add_wait(waited)
            self.engine.refresh()
            serve = self.engine.servable(self._pending)
            if not serve:
                return []
        t = self.timers.now()
        self._pending.difference_update(serve)
        self.engine.infer(serve)
        self.timers.add(INFERENCE, t)
        return serve

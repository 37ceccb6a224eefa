"""One optimiser step captured as a CUDA graph and replayed for every minibatch.

A small model's training step on a GPU is bound by launching kernels, not by running them:
the Nature CNN's forward, PPO loss, backward, gradient clip and Adam on a 256-frame
minibatch are a few hundred kernels of microseconds each, and the host spends longer
issuing them than the GPU spends running them. Captured once, the step is one graph launch:
on an NVIDIA H200, PPO's Pong update ran 3.7x as fast (benchmarks/results/gpu.md).

`GraphedStep` holds the step's inputs in static buffers (each minibatch is copied into them)
and replays the graph; whatever the step writes (parameters, Adam's moments, running sums)
must live in tensors that outlast it, updated in place, and the step must not read anything
back to the host. Before the capture the step runs once on the capture stream (cuBLAS and
cuDNN set up their workspaces there); that run's effects on `state` are undone, so the first
replay starts from the same parameters as the eager step would have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Inputs = dict[str, Tensor]


class GraphedStep:
    def __init__(
        self, step: Callable[[Inputs], Tensor], example: Inputs, state: Sequence[Tensor]
    ) -> None:
        """`step(inputs) -> output` is the function captured; `example` has the shapes, dtypes
        and memory layouts of every call's inputs; `state`: the tensors the step changes in
        place (restored after the warm-up run)."""
        self.inputs = {key: x.clone() for key, x in example.items()}  # strides kept
        saved = [t.clone() for t in state]
        self._warm_up(step)
        with torch.no_grad():
            for t, s in zip(state, saved, strict=True):
                t.copy_(s)
        self.output = self._capture(step)

    def __call__(self, inputs: Inputs) -> Tensor:
        """Run the step on `inputs` (each the example's shape and dtype); its output, a
        static tensor that the next call overwrites."""
        for key, x in inputs.items():
            self.inputs[key].copy_(x)
        self._replay()
        return self.output

    def _warm_up(self, step: Callable[[Inputs], Tensor]) -> None:
        device = next(iter(self.inputs.values())).device
        self.stream = torch.cuda.Stream(device=device)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            step(self.inputs)  # libraries' handles and workspaces made on this stream
        torch.cuda.current_stream().wait_stream(self.stream)

    def _capture(self, step: Callable[[Inputs], Tensor]) -> Tensor:
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            return step(self.inputs)

    def _replay(self) -> None:
        self.graph.replay()

"""Replaying repeated calls as CUDA graphs, so a call costs one graph launch instead of the Python
work and kernel launches behind it.

A captured graph holds raw pointers, shapes and strides, nothing else: replaying it is correct
whenever the caller passes tensors at the same addresses with the same layout, whatever their
contents now are. ``tensor_signature`` is exactly that identity, so a cache keyed on it never
replays a graph onto memory it was not captured for.
"""

from __future__ import annotations

import collections
from typing import Callable

import torch


def tensor_signature(t: torch.Tensor) -> tuple:
    """What a captured graph depends on: address, shape, strides, dtype and device."""
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device)


class GraphCache:
    """Least-recently-used CUDA graphs of calls that write one output tensor.

    ``run(key, launch, out_like)``: the first time a key is seen, ``launch(out)`` runs eagerly into
    a fresh tensor; the second time, it is captured into a graph with its own static output; from
    then on the graph is replayed and a copy of the static output is returned (so results of
    earlier calls are never overwritten). ``launch`` must do no host synchronization and no
    allocation when given ``out`` (as ``DecodePlan.run``).
    """

    def __init__(self, capacity: int = 16):
        self.capacity = capacity
        self._graphs: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
        self._seen: "collections.OrderedDict[tuple, int]" = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()

    def replay(self, key: tuple) -> torch.Tensor | None:
        """If ``key`` has a captured graph: replay it and return a copy of its output; else None."""
        entry = self._graphs.get(key)
        if entry is None:
            return None
        self._graphs.move_to_end(key)
        graph, static_out = entry
        graph.replay()
        return static_out.clone()

    def run(self, key: tuple, launch: Callable[[torch.Tensor], object], shape, dtype, device) -> torch.Tensor:
        """Run ``launch`` for ``key`` (replaying, or eagerly and capturing on the second sight) and
        return a new output of ``shape`` and ``dtype`` on ``device``."""
        out = self.replay(key)
        if out is not None:
            return out
        out = torch.empty(shape, dtype=dtype, device=device)
        launch(out)
        if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            return out
        if self._seen.get(key, 0) < 1:
            self._seen[key] = 1
            if len(self._seen) > 4 * self.capacity:
                self._seen.popitem(last=False)
            return out
        static_out = torch.empty_like(out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch(static_out)
        self._graphs[key] = (graph, static_out)
        self._seen.pop(key, None)
        if len(self._graphs) > self.capacity:
            self._graphs.popitem(last=False)
        return out

"""Peak memory of a backward on the CPU: the live tensor bytes at their highest point.

``torch.cuda.max_memory_allocated`` answers "how much memory did this need at once?" on a
GPU; on the CPU torch keeps no such count. :class:`PeakMemory` (defined in ``course.memory``, beside the dispatch
mode it extends) keeps it: each new storage counts from the op that makes it until it is freed.

Limitations: only memory made by torch ops inside the block is counted — tensors made
before it (inputs, saved tensors) are not, which is why :func:`backward_peak` adds the saved
ones itself; NumPy buffers and allocator overhead are invisible. A storage freed while
Python holds a reference cycle to it is freed (and subtracted) only at the next garbage
collection. Every op inside the block costs one extra Python call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .autograd_graph import saved_for_backward
from .memory import PeakMemory, saved_bytes

__all__ = ["PeakMemory", "backward_peak", "saved_bytes"]


def backward_peak(fn: Callable, *inputs: torch.Tensor, grad: torch.Tensor) -> dict[str, int]:
    """What the backward of ``fn(*inputs)`` needs, in bytes, for the upstream gradient ``grad``.

    Returns ``{"saved": ..., "backward": ..., "total": ...}``: the bytes of what the forward
    saved for the backward (the inputs themselves left out), the highest point of what the
    backward allocated while it ran (the gradients it returns included), and their sum.
    """
    leaves = [t.detach().requires_grad_(True) for t in inputs]
    with saved_for_backward() as saved:
        out = fn(*leaves)
    kept = saved_bytes(saved, exclude=leaves)
    saved.clear()  # the graph keeps them alive for the backward; this list need not
    with PeakMemory() as mem:
        grads = torch.autograd.grad(out, leaves, grad)
    del grads, out
    return {"saved": kept, "backward": mem.peak, "total": kept + mem.peak}

"""Peak memory of a backward on the CPU: the live tensor bytes at their highest point.

``torch.cuda.max_memory_allocated`` answers "how much memory did this need at once?" on a
GPU; on the CPU torch keeps no such count. :class:`PeakMemory` keeps it: a
``TorchDispatchMode`` that sees every tensor an aten op creates inside its ``with`` block,
adds the bytes of each new storage to a running total, and subtracts them again when that
storage is freed (Python drops a storage's object exactly when its memory goes, so a
``weakref.finalize`` on it fires at the free). ``peak`` is the highest the total reached.

    with PeakMemory() as mem:
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    mem.peak                              # bytes, of tensors made inside the block

:func:`backward_peak` measures what a backward needs in all: the tensors its forward saved
for it (beyond the inputs, which exist anyway) plus the highest point of what the backward
itself allocates while it runs.

Limitations: only memory made by torch ops inside the block is counted — tensors made
before it (inputs, saved tensors) are not, which is why :func:`backward_peak` adds the saved
ones itself; NumPy buffers and allocator overhead are invisible. A storage freed while
Python holds a reference cycle to it is freed (and subtracted) only at the next garbage
collection. Every op inside the block costs one extra Python call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .autograd_graph import saved_for_backward
from .memory import _NewMemory, _storage

__all__ = ["PeakMemory", "backward_peak", "saved_bytes"]


class PeakMemory(_NewMemory):
    """Inside ``with PeakMemory() as mem:``, track the bytes of live tensors made by torch ops.

    ``live`` is the total now, ``peak`` the highest it has been since the block began (or
    since :meth:`reset_peak`). Views, in-place results and outputs that reuse an input's
    memory add nothing; a new storage adds its size until it is freed (the mechanism is
    ``course.memory``'s, which AllocationRecorder shares).
    """

    def reset_peak(self) -> None:
        """Start the peak again from what is live now."""
        self.peak = self.live


def saved_bytes(tensors: Sequence[torch.Tensor], exclude: Sequence[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages behind ``tensors``, leaving out those of ``exclude``."""
    skip = {_storage(t)[0] for t in exclude}
    seen = {key: s.nbytes() for t in tensors for key, s in [_storage(t)] if s is not None and key not in skip}
    return sum(seen.values())


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

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

import weakref
from collections.abc import Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .autograd_graph import saved_for_backward

__all__ = ["PeakMemory", "backward_peak", "saved_bytes"]


def _tensors(obj):
    """The tensors in an op's arguments or results (nested tuples, lists and dicts), quickly.

    torch's own pytree flattening costs more than a small op itself; this walk is all a
    dispatch mode needs.
    """
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less tensors
        return None


class PeakMemory(TorchDispatchMode):
    """Inside ``with PeakMemory() as mem:``, track the bytes of live tensors made by torch ops.

    ``live`` is the total now, ``peak`` the highest it has been since the block began (or
    since :meth:`reset_peak`). Views, in-place results and outputs that reuse an input's
    memory add nothing; a new storage adds its size until it is freed.
    """

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._tracked: dict[int, int] = {}  # id of a live storage object -> its bytes

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # never under torch.compile; skip the import of torch._dynamo

    def _free(self, key: int) -> None:
        self.live -= self._tracked.pop(key, 0)

    def reset_peak(self) -> None:
        """Start the peak again from what is live now."""
        self.peak = self.live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out  # shares its input's memory
        inputs = None
        for t in _tensors(out):
            storage = _storage(t)
            if storage is None or id(storage) in self._tracked:
                continue  # memory already counted: an in-place result, or a second output on it
            if inputs is None:
                inputs = {id(s) for a in _tensors((args, kwargs)) for s in [_storage(a)] if s is not None}
            if id(storage) in inputs:
                continue  # an input handed back, or written in place
            key, nbytes = id(storage), storage.nbytes()
            self._tracked[key] = nbytes
            weakref.finalize(storage, self._free, key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        return out


def saved_bytes(tensors: Sequence[torch.Tensor], exclude: Sequence[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages behind ``tensors``, leaving out those of ``exclude``."""
    skip = {id(s) for t in exclude for s in [_storage(t)] if s is not None}
    seen: dict[int, int] = {}
    for t in tensors:
        s = _storage(t)
        if s is not None and id(s) not in skip:
            seen[id(s)] = s.nbytes()
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

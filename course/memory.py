"""Record every tensor a function allocates while it runs: how a check sees an N×N tensor being built.

A backward can give the right numbers and still be wrong for a kernel writer, because of
what it built on the way: the softmax backward that materializes its N×N Jacobian, the
attention backward that allocates a T×T score matrix. :class:`AllocationRecorder` makes
that visible. It is a ``TorchDispatchMode``, so it sees the output of every aten op that
runs inside its ``with`` block — including ops called from library code — and keeps one
:class:`Allocation` for each output that lives in **new memory**:

    with AllocationRecorder() as rec:
        dx = softmax_backward(y, dy)
    rec.largest_numel                # elements in the biggest new tensor
    rec.offenders(min_numel=N * N)   # [("aten.diag_embed", (B, N, N)), ...]

What counts as an allocation: an op output whose storage is not the storage of one of
that op's tensor inputs. So these are *not* counted, because they share memory with
something that already exists:

- the caller's inputs (they were allocated before the block);
- views: ``view``, ``reshape`` of a contiguous tensor, ``expand``, ``transpose``,
  ``unsqueeze``, slicing, ``detach`` — an ``expand`` of an (N, 1) column to (N, N) holds N
  elements, not N²;
- in-place ops (``mul_``) and ``out=`` results that fit their buffer.

And these are counted: every new result (``a * b``, ``clone``, a ``reshape`` that must
copy — once, although aten does it as ``clone`` then ``_unsafe_view``), and every factory
(``zeros``, ``empty``, ``eye``, ``arange``, ``torch.tensor``), which ``factory_calls``
also counts. The size of an allocation is the number of elements its new storage holds,
which for an ordinary result is its ``numel()``.

Limitations: memory made outside torch's dispatcher is invisible — NumPy arrays, and
tensors wrapping them via ``torch.from_numpy``. The recorder sees allocations, not peak
memory: it does not track when a tensor is freed, so ten temporaries of N elements, made
one after another in a loop, are ten allocations of N (never one of 10·N). Python-level
work is slower inside the block (every op makes one extra Python call).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import witness

__all__ = ["Allocation", "AllocationRecorder", "record_allocations"]

# Ops whose output aliases a tensor made outside the dispatcher (``torch.tensor(...)``
# builds its data first, then "lifts" it): the memory is new all the same.
_LIFTS = {"lift_fresh", "lift_fresh_copy", "lift"}


@dataclass(frozen=True)
class Allocation:
    """One op output that lives in new memory."""

    op: str  # e.g. "aten.diag_embed"
    shape: tuple[int, ...]  # the output's shape
    numel: int  # elements held by its new storage (= shape's product for an ordinary result)
    nbytes: int  # bytes of that storage
    dtype: torch.dtype | None  # None: measured in another process, which reports bytes (course.witness)
    factory: bool  # made from no tensor input: zeros, empty, eye, arange, torch.tensor, ...

    def __str__(self) -> str:
        if self.dtype is None:  # measured elsewhere: bytes, with no shape
            return f"{self.op}: {self.nbytes:,} bytes, {self.numel:,} elements"
        dims = "×".join(str(d) for d in self.shape) or "scalar"
        return f"{self.op} {dims} ({self.numel:,} elements)"


def _storage_key(t: torch.Tensor) -> int | None:
    """The address of t's storage (shared by all views of it); None when t has no real storage."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, meta and other storage-less tensors
        return None


def _storage_elements(t: torch.Tensor) -> tuple[int, int]:
    """(elements, bytes) of t's storage; falls back to t.numel() for storage-less tensors."""
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return t.numel(), t.numel() * t.element_size()
    return nbytes // max(t.element_size(), 1), nbytes


class AllocationRecorder(TorchDispatchMode):
    """Inside ``with AllocationRecorder() as rec:``, record every tensor allocated by torch ops.

    ``ignore``: tensors whose memory never counts even if an op hands it back unchanged
    (the inputs of the function under test, say). Views and in-place results of any
    tensor are excluded anyway; see the module docstring for the rules.
    """

    def __init__(self, ignore=()):
        super().__init__()
        self.allocations: list[Allocation] = []
        self.ops: Counter = Counter()  # op name -> calls, views and in-place ops included
        keys = (_storage_key(t) for t in tree_flatten(ignore)[0] if isinstance(t, torch.Tensor))
        self._ignored = {k for k in keys if k}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # By default torch wraps __torch_dispatch__ in a dynamo "disable", which imports
        # torch._dynamo (and sympy) on the first op: seconds, once per process, for nothing —
        # the recorder never runs under torch.compile.
        return False

    # -- what the process that ran the call measured (the grader's re-check: course.witness) ----

    def __enter__(self):
        self._watch = witness.watching(self._witnessed)
        self._watch.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._watch.__exit__(None, None, None)

    def _witnessed(self, m: witness.Measurement) -> None:
        """Record a call measured in another process as this recorder would have recorded it here.

        Each torch allocation becomes one ``Allocation`` (its elements counted in the call's
        own dtype), and so do NumPy's and Python's allocations, counted together at their
        peak: an N×N array built in NumPy is as big as one built in torch.
        """
        for nbytes in m.allocations:
            self.allocations.append(Allocation(witness.ALLOCATED, (m.elements(nbytes),), m.elements(nbytes), nbytes,
                                               None, True))
        if m.peak:
            self.allocations.append(Allocation(witness.NUMPY_PEAK, (m.elements(m.peak),), m.elements(m.peak), m.peak,
                                               None, True))
        self.ops.update(m.ops)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        # Read the input storages before the op runs: an out= buffer that must grow moves.
        seen = {_storage_key(t) for t in inputs} | self._ignored
        out = func(*args, **kwargs)
        name = f"aten.{func.overloadpacket.__name__}"
        self.ops[name] += 1
        lifted = func.overloadpacket.__name__ in _LIFTS
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            key = _storage_key(t)
            if key in seen and not lifted:
                continue  # a view, an in-place result, or the input handed back
            numel, nbytes = _storage_elements(t)
            self.allocations.append(Allocation(name, tuple(t.shape), numel, nbytes, t.dtype, not inputs or lifted))
            if key:
                seen.add(key)  # a second output on the same new storage is not a second allocation
        return out

    # -- questions about what was recorded ------------------------------------------

    @property
    def factory_calls(self) -> int:
        """How many tensors were made from nothing (zeros, empty, eye, arange, torch.tensor, ...)."""
        return sum(a.factory for a in self.allocations)

    @property
    def largest(self) -> Allocation | None:
        """The allocation with the most elements, or None when nothing was allocated."""
        return max(self.allocations, key=lambda a: a.numel, default=None)

    @property
    def largest_numel(self) -> int:
        """Elements in the biggest allocation (0 when nothing was allocated)."""
        return self.largest.numel if self.allocations else 0

    @property
    def total_bytes(self) -> int:
        """Bytes of all allocations added up (not the peak: frees are not tracked)."""
        return sum(a.nbytes for a in self.allocations)

    def offenders(self, min_numel: int) -> list[tuple[str, tuple[int, ...]]]:
        """(op name, shape) of every allocation holding at least ``min_numel`` elements, in order."""
        return [(a.op, a.shape) for a in self.allocations if a.numel >= min_numel]

    def summary(self, top: int = 3) -> str:
        """The biggest allocations, one per line, for a message or a print."""
        if not self.allocations:
            return "no tensor was allocated"
        biggest = sorted(self.allocations, key=lambda a: -a.numel)[:top]
        return "\n".join(str(a) for a in biggest)


def record_allocations(fn, *args, **kwargs) -> tuple[object, AllocationRecorder]:
    """Call ``fn(*args, **kwargs)`` under a recorder that ignores the arguments; return (result, recorder)."""
    with AllocationRecorder(ignore=(args, kwargs)) as rec:
        result = fn(*args, **kwargs)
    return result, rec

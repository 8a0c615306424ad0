"""Record every tensor a function allocates while it runs: how a check sees an N×N tensor being built.

A backward can give the right numbers and still build what a kernel writer must not: softmax's N×N
Jacobian, attention's T×T scores. :class:`AllocationRecorder`, a ``TorchDispatchMode``, sees the output of
every aten op inside its ``with`` block (library code's included) and keeps one :class:`Allocation` for each
output that lives in **new memory**:

    with AllocationRecorder() as rec:
        dx = softmax_backward(y, dy)
    rec.largest_numel                # elements in the biggest new tensor
    rec.offenders(min_numel=N * N)   # [("aten.diag_embed", (B, N, N)), ...]

Not counted, because the memory already exists: the caller's inputs; views (``view``, ``reshape`` of a
contiguous tensor, ``expand``, ``transpose``, slicing, ``detach``: an ``expand`` of an (N, 1) column to (N, N)
holds N elements, not N²); in-place ops and ``out=`` results that fit their buffer. Counted: every new result
(a ``reshape`` that must copy, once) and every factory (``zeros``, ``eye``, ``torch.tensor``, ...), which
``factory_calls`` also counts. An allocation's size is the elements its new storage holds.

Limitations: memory made outside torch's dispatcher is invisible (NumPy arrays, ``torch.from_numpy``). The
recorder lists allocations, not peak memory: ten temporaries of N made one after another are ten allocations
of N. Every op inside the block costs one extra Python call.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import witness

# Ops whose output aliases a tensor made outside the dispatcher (``torch.tensor(...)``
# builds its data first, then "lifts" it): the memory is new all the same.
_LIFTS = {"lift_fresh", "lift_fresh_copy", "lift"}


def tensors_in(obj, levels: int | None = None):
    """The tensors in ``obj`` and in the lists, tuples and dicts it nests, at most ``levels`` deep (None: all).

    torch's own pytree flattening costs more than a small op itself; this walk is all a dispatch mode needs.
    """
    if isinstance(obj, torch.Tensor):
        yield obj
    elif levels != 0 and isinstance(obj, (list, tuple, dict)):
        for item in obj.values() if isinstance(obj, dict) else obj:
            yield from tensors_in(item, None if levels is None else levels - 1)


def _storage(t: torch.Tensor):
    """(key, storage) of t's memory: the storage's object (shared by all views of it) and where it lies now;
    (None, None) for a tensor without real storage (sparse, and the like)."""
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None, None
    return (id(storage), storage.data_ptr()), storage


def storage_key(t: torch.Tensor):
    """What tells ``t``'s memory apart from other memory alive now (None for a tensor without real storage)."""
    return _storage(t)[0]


def _repointed(key, owned: set, inputs: list[torch.Tensor]) -> bool:
    """Whether an input lies on ``key``'s storage after the op without having held it before: ``set_`` points a
    tensor at memory that already exists (Triton's interpreter does, for every kernel argument)."""
    return key is not None and all(k is None or k[0] != key[0] for k in owned) and any(
        _storage(t)[0] == key for t in inputs)


class _NewMemory(TorchDispatchMode):
    """Inside its ``with`` block, sees each storage a torch op creates, and when it is freed: one mechanism for
    :class:`AllocationRecorder` and ``PeakMemory``.

    An op's output is new memory unless its storage is one of the op's inputs' (a view, an in-place or
    ``out=`` result, an input handed back or pointed elsewhere by ``set_``), one of ``ignore``'s, or one made
    earlier in the block and still alive; a lifted tensor is new memory all the same. A storage is known by its
    Python object (one per storage, shared by all views of it) at its current address (an ``out=`` buffer that
    had to grow lies elsewhere: new memory). Each new one is handed to ``_made``; ``live`` is the bytes of those
    still alive (Python drops a storage's object exactly when its memory goes, so a ``weakref.finalize`` on it
    fires at the free), ``peak`` the most they reached.
    """

    def __init__(self, ignore=()):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._live: dict[tuple, int] = {}  # key of a storage made in the block and not yet freed -> its bytes
        self._ignored = {key for t in tensors_in(ignore) if (key := _storage(t)[0]) is not None}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # By default torch wraps __torch_dispatch__ in a dynamo "disable", which imports
        # torch._dynamo (and sympy) on the first op: seconds, once per process, for nothing —
        # the probes never run under torch.compile.
        return False

    def _free(self, key: tuple) -> None:
        self.live -= self._live.pop(key, 0)

    def _made(self, op: str, t: torch.Tensor, storage, factory: bool) -> None:
        """A new tensor ``t`` on the new memory ``storage`` (None: t has no storage)."""

    def _ran(self, op: str) -> None:
        """Every op, views and in-place ops included."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = list(tensors_in((args, kwargs)))
        # Read where the inputs lie before the op runs: an out= buffer that must grow moves.
        owned = {_storage(t)[0] for t in inputs} | self._ignored
        out = func(*args, **kwargs)
        op = f"aten.{func.overloadpacket.__name__}"
        lifted = func.overloadpacket.__name__ in _LIFTS
        self._ran(op)
        for t in tensors_in(out):
            key, storage = _storage(t)
            if key in self._live or not lifted and (key in owned or _repointed(key, owned, inputs)):
                continue  # a view, an in-place result, an input handed back or set_, or a second output on new memory
            if storage is not None:
                nbytes = self._live[key] = storage.nbytes()
                weakref.finalize(storage, self._free, key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
            self._made(op, t, storage, not inputs or lifted)
        return out


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


class AllocationRecorder(_NewMemory):
    """Inside ``with AllocationRecorder() as rec:``, record every tensor allocated by torch ops.

    ``ignore``: tensors whose memory never counts even if an op hands it back unchanged
    (the inputs of the function under test, say). Views and in-place results of any
    tensor are excluded anyway; see the module docstring for the rules.
    """

    def __init__(self, ignore=()):
        super().__init__(ignore)
        self.allocations: list[Allocation] = []
        self.ops: Counter = Counter()  # op name -> calls, views and in-place ops included
        # What the operating system counted the call touching, where another process ran it (course.witness):
        # one entry per measured call, never in the notebook.
        self.touched: list[Allocation] = []

    def _ran(self, op: str) -> None:
        self.ops[op] += 1

    def _made(self, op: str, t: torch.Tensor, storage, factory: bool) -> None:
        size = max(t.element_size(), 1)
        nbytes = storage.nbytes() if storage is not None else t.numel() * t.element_size()
        numel = nbytes // size if storage is not None else t.numel()
        self.allocations.append(Allocation(op, tuple(t.shape), numel, nbytes, t.dtype, factory))

    # -- what the process that ran the call measured (the grader's re-check: course.witness) ----

    def _watches(self) -> list:
        """What this recorder listens to in ``course.witness`` while its block runs."""
        return [witness.watching(self._witnessed)]

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        for watch in self._watches():
            self._stack.enter_context(watch)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._stack.close()

    def _witnessed(self, m: witness.Measurement) -> None:
        """Record a call measured in another process as this recorder would have recorded it here.

        Each torch allocation becomes one ``Allocation`` (its elements counted in the call's
        own dtype), and so do NumPy's and Python's allocations, counted together at their
        peak: an N×N array built in NumPy is as big as one built in torch.
        """

        def measured(op: str, nbytes: int) -> Allocation:
            return Allocation(op, (m.elements(nbytes),), m.elements(nbytes), nbytes, None, True)

        self.allocations += [measured(witness.ALLOCATED, nbytes) for nbytes in m.allocations]
        if m.peak:
            self.allocations.append(measured(witness.NUMPY_PEAK, m.peak))
        if m.touched is not None:  # apart: the rules read it on their large cases only (witness.touched_over)
            self.touched.append(measured(witness.TOUCHED, m.touched))
        self.ops.update(m.ops)

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


class RecordedCalls:
    """Wrap a function so that every call runs under an AllocationRecorder that ignores its arguments;
    ``calls`` keeps (arguments, recorder) per call.

    ``counted(args)``: true for a call whose memory the grader's re-check counts from outside the process that
    runs it (``course.witness.counted_by_os``): the large cases of a memory rule. No effect in the notebook.
    """

    def __init__(self, counted: Callable[[tuple], bool] | None = None):
        self.calls: list[tuple[tuple, AllocationRecorder]] = []
        self.counted = counted

    def __call__(self, fn: Callable) -> Callable:
        def recorded(*args, **kwargs):
            rec = AllocationRecorder(ignore=(args, kwargs))
            self.calls.append((args, rec))
            by_os = witness.counted_by_os() if self.counted and self.counted(args) else contextlib.nullcontext()
            with by_os, rec:
                return fn(*args, **kwargs)

        return recorded


# ---------------------------------------------------------------------------
# Which token rows each allocation was computed from: how a check sees a walk that is not tiled


# Ops whose result takes its shape, dtype or device from a tensor but none of its values.
_SHAPE_ONLY = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "new_empty",
               "new_zeros", "new_ones", "new_full", "new_empty_strided", "empty", "zeros", "ones", "full"}
# Ops that copy their input element for element, besides those torch tags pointwise.
_COPIES = {"clone", "_to_copy", "contiguous", "alias_copy"}


def _bits(rows: torch.Tensor) -> int:
    """The set of token indices in ``rows`` (−1: no token), as the bits of an int."""
    return sum(1 << r for r in rows.unique().tolist() if r >= 0)


class TokenRecorder(AllocationRecorder):
    """An :class:`AllocationRecorder` that also keeps, for each allocation, how many token rows of the
    ``queries`` and of the ``keys`` its values were computed from (``spans``, one per allocation).

    Each input is a tensor whose axis 1 indexes tokens — (B, T, d) or (B, T) — and the two lists are
    the two sides of a score matrix (``queries=(q, ō, o, lse)``, ``keys=(k, v)``). A row of scores
    against every key, (B, 1, T), is computed from 1 query row and T key rows: an axis of T cannot
    index queries then, so it indexes keys — which is how a check tells it from (B, T) per-query
    results (lse, D) computed from T query rows.

    How rows are followed: a slice of an input knows its rows exactly (from its strides and offset);
    a result made element for element from one such tensor of its own shape (``q * c``, ``clone``)
    inherits them exactly; any other result is computed from the union of its inputs' rows, and memory
    written in place gathers the rows of what is written into it. A result that takes only a shape
    from a tensor (``zeros_like``) is computed from no rows. The union errs towards more rows, so a
    check that refuses an axis longer than the rows it came from errs towards letting code pass.
    """

    def __init__(self, queries=(), keys=(), ignore=()):
        super().__init__(ignore)
        self.spans: list[tuple[int, int]] = []  # per allocation: (query rows, key rows) it was computed from
        self.keys: list[tuple | None] = []  # per allocation: its storage's key, to tell the call's results apart
        self._rows: dict[tuple, list] = {}  # storage key -> [query bits, key bits, query map, key map]
        self._now = (0, 0, [None, None])
        self.sides = tuple(tuple(tensors_in(tensors)) for tensors in (queries, keys))
        # Measured in another process (the grader's re-check): (allocation, (query rows, key rows), returned).
        self.followed: list[tuple[Allocation, tuple[int, int], bool]] = []
        for side, tensors in enumerate(self.sides):
            for t in tensors:
                self._map_input(t, side)

    def _watches(self) -> list:
        return [*super()._watches(), witness.following(self.sides)]  # a call measured elsewhere follows them too

    def tiles(self, out) -> list[tuple[Allocation, tuple[int, int], bool]]:
        """(allocation, (query rows, key rows) it came from, whether it is memory of ``out``) for every allocation
        recorded: here, with ``out`` the call's results, and in another process (``followed``), as measured there."""
        returned = {storage_key(t) for t in tensors_in(out, 2)}
        here = [(a, span, key in returned) for a, span, key in zip(self.allocations, self.spans, self.keys)]
        return here + self.followed

    def _map_input(self, t: torch.Tensor, side: int) -> None:
        key, storage = _storage(t)
        if key is None or t.ndim < 2:
            return
        entry = self._rows.setdefault(key, [0, 0, None, None])
        rows = entry[2 + side]
        if rows is None:
            rows = entry[2 + side] = torch.full((storage.nbytes() // max(t.element_size(), 1),), -1, dtype=torch.long)
        shape = [1] * t.ndim
        shape[1] = t.shape[1]
        rows.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(
            torch.arange(t.shape[1]).view(shape).expand(t.shape))

    def _span(self, t: torch.Tensor) -> tuple[int, int, list]:
        """(query bits, key bits, per-side row map of ``t``'s elements or None) of an op's input."""
        key = _storage(t)[0]
        entry = self._rows.get(key)
        if entry is None:
            return 0, 0, [None, None]
        bits, maps = [entry[0], entry[1]], [None, None]
        for side in (0, 1):
            if entry[2 + side] is not None:
                try:
                    maps[side] = entry[2 + side].as_strided(t.shape, t.stride(), t.storage_offset())
                    bits[side] = _bits(maps[side])
                except RuntimeError:  # viewed as another dtype, or outside the map: the storage's rows will do
                    maps[side] = None
        return bits[0], bits[1], maps

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        inputs = list(tensors_in((args, kwargs)))
        spans = [] if name in _SHAPE_ONLY else [(t, *self._span(t)) for t in inputs]
        q = k = 0
        for _, a, b, _ in spans:
            q, k = q | a, k | b
        maps: list = [None, None]
        if torch.Tag.pointwise in func.tags or name in _COPIES:  # element for element: rows carry over exactly
            for side in (0, 1):
                carriers = [(t, m[side]) for t, *b, m in spans if b[side]]
                if len(carriers) == 1 and carriers[0][1] is not None:
                    maps[side] = carriers[0]
        self._now = (q, k, maps)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func._schema.is_mutable and not func.is_view:  # written in place: that memory now holds these rows too
            for t in tensors_in(out):
                key = _storage(t)[0]
                if key is not None:
                    entry = self._rows.setdefault(key, [0, 0, None, None])
                    for side, bits in enumerate((q, k)):  # the map no longer says which element holds which row
                        if entry[2 + side] is not None:
                            entry[side] |= _bits(entry[2 + side])
                        entry[side] |= bits
                        entry[2 + side] = None
        return out

    def _witnessed(self, m: witness.Measurement) -> None:
        """Measured in another process: bytes without shapes or rows, each kept as computed from no rows; and, where
        the worker followed the call's token rows too (``m.followed``), each allocation it saw, with its rows."""
        before = len(self.allocations)
        super()._witnessed(m)
        self.spans += [(0, 0)] * (len(self.allocations) - before)
        self.keys += [None] * (len(self.allocations) - before)
        for f in m.followed or ():  # the same call, followed there by a TokenRecorder like this one
            self.followed.append((Allocation(f.op, f.shape, f.numel, f.nbytes, getattr(torch, f.dtype), f.factory),
                                  (f.queries, f.keys), f.returned))

    def _made(self, op: str, t: torch.Tensor, storage, factory: bool) -> None:
        super()._made(op, t, storage, factory)
        q, k, maps = self._now
        key = _storage(t)[0] if storage is not None else None
        self.spans.append((q.bit_count(), k.bit_count()))
        self.keys.append(key)
        if key is None:
            return
        entry = self._rows[key] = [q, k, None, None]
        for side, carrier in enumerate(maps):
            if carrier is not None and tuple(carrier[0].shape) == tuple(t.shape):
                rows = torch.full((storage.nbytes() // max(t.element_size(), 1),), -1, dtype=torch.long)
                rows.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(carrier[1])
                entry[2 + side] = rows


# Peak memory (course.peak_memory builds on these): here, beside the dispatch mode they extend.
class PeakMemory(_NewMemory):
    """Inside ``with PeakMemory() as mem:``, ``live`` is the bytes of live tensors made by torch ops, ``peak`` the
    highest it has been since the block began (or since :meth:`reset_peak`)."""

    def reset_peak(self) -> None:
        """Start the peak again from what is live now."""
        self.peak = self.live


def saved_bytes(tensors: Sequence[torch.Tensor], exclude: Sequence[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages behind ``tensors``, leaving out those of ``exclude``."""
    skip = {_storage(t)[0] for t in exclude}
    seen = {key: s.nbytes() for t in tensors for key, s in [_storage(t)] if s is not None and key not in skip}
    return sum(seen.values())

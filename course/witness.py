"""Measurements of a student's call made in the process that ran it, handed to the checks watching it.

In the notebook, a check measures a call where it runs (``AllocationRecorder``, ``forbid_autograd``);
in the grader's trusted re-check the value worker measures it (docs/grading.md, "What the worker
measures") and the checker reports that here, so one check, unchanged, reaches the same verdict in both.

A :class:`Measurement` counts memory in bytes; a check thinks in elements, so each is
turned into elements of the call's own floating-point inputs (``itemsize``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

# An Allocation's op names for what the worker measured, as a diagnosis quotes them.
ALLOCATED = "an allocation (measured where the code ran)"
NUMPY_PEAK = "NumPy arrays and Python objects, live at once (measured where the code ran)"
HELD = "memory still held when it returned, beyond its outputs and saved tensors (measured where the code ran)"
TOUCHED = "memory the call touched, counted by the operating system from outside its process"
# A rule reads TOUCHED only on a case whose forbidden tensor is at least this big: there it stands far above what an
# honest call touches (its inputs, outputs and tiles, and about 10 MiB of the worker's own: 12 MiB for 02's honest
# softmax_backward on a row of 4,099, 24 MiB for 07's chunked walk), and a count of half the forbidden size catches
# it made at once, in halves alive together, written into a workspace made beforehand, or kept in float32 where the
# checks' inputs are float64.
TOUCHED_MIN_BYTES = 128 << 20
TOUCHED_FRACTION = 2


@dataclass(frozen=True)
class Followed:
    """One allocation of the call as a ``course.memory.TokenRecorder`` in the worker recorded it: its shape, and
    how many query rows and key rows its values were computed from (the worker's report, checked by the checker)."""

    op: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int
    dtype: str  # "float64", ...
    factory: bool
    queries: int
    keys: int
    returned: bool  # on the memory of something the call returned (o, lse): exempt from the tile rule


@dataclass(frozen=True)
class Measurement:
    """What one call of the student's code did, as the value worker measured it."""

    allocations: tuple[int, ...] = ()  # bytes of each torch allocation, largest first
    ops: dict[str, int] = field(default_factory=dict)  # "aten.<op>" -> calls
    engine: tuple[str, ...] = ()  # the autograd nodes the engine evaluated during the call
    peak: int = 0  # bytes of NumPy arrays and Python objects the call allocated, at their peak
    held: int = 0  # bytes it allocated (NumPy, Python, torch) and still held on return, beyond what it returned
    itemsize: int = 8  # bytes of one element of the call's floating-point inputs
    delegated: tuple[str, ...] = ()  # the course helpers it called (course.delegation's tripwires, armed there)
    followed: tuple[Followed, ...] | None = None  # what a TokenRecorder saw in the worker, when one was asked for
    touched: int | None = None  # bytes of memory the call touched, counted by the OS kernel (None: not counted)
    # course.sanitizer's findings in the kernels the call launched there, each as Finding.record() made it (checked by
    # the checker); the sanitize() blocks watching the call read them (course.sanitizer.read_record)
    sanitized: tuple[dict, ...] = ()
    # What each program of those kernels loaded, as Launch.loads() made it (checked by the checker), where a check
    # asked for it (asking_loads): the sanitize() blocks watching the call read them as launches (read_loads)
    loads: tuple[dict, ...] = ()

    def elements(self, nbytes: int) -> int:
        return nbytes // max(1, self.itemsize)


def _held_on(stack: list) -> Callable[..., AbstractContextManager[None]]:
    """``with held(item):`` keeps ``item`` on ``stack`` while the block runs. A closure, so never one of the course's
    tripwires (course.delegation): the instruments enter it while a student's call runs."""

    @contextmanager
    def held(item) -> Iterator[None]:
        stack.append(item)
        try:
            yield
        finally:
            del stack[max(i for i, x in enumerate(stack) if x is item)]

    return held


_watchers: list[Callable[[Measurement], None]] = []
watching = _held_on(_watchers)  # with watching(watcher): the watcher receives every measurement reported
# (query tensors, key tensors) of the TokenRecorders active now: with following((queries, keys)), a call measured
# in another process follows these two sides' token rows too (Measurement.followed).
_followed: list[tuple[tuple, tuple]] = []
following = _held_on(_followed)


def followed() -> tuple[tuple, tuple] | None:
    """(query tensors, key tensors) of the innermost TokenRecorder active now; None when none is."""
    return _followed[-1] if _followed else None


_loads_asked: list[bool] = []


def asking_loads() -> AbstractContextManager[None]:
    """While the block runs, a call measured in another process sends what each program of its launches loaded too
    (``Measurement.loads``): a check that reads a kernel's walk of its tiles asks for it. No effect where nothing
    measures elsewhere."""
    return _held_on(_loads_asked)(True)


def loads_asked() -> bool:
    """True inside :func:`asking_loads`."""
    return bool(_loads_asked)


_counting: list[bool] = []


def counted_by_os() -> AbstractContextManager[None]:
    """While the block runs, a call measured in another process has its memory counted by the operating system
    there (``Measurement.touched``) and is measured by nothing else: the large cases of a memory rule, where the
    other instruments' own memory would stand above an honest call's. No effect where nothing measures elsewhere."""
    return _held_on(_counting)(True)


def counting_pages() -> bool:
    """True inside :func:`counted_by_os`."""
    return bool(_counting)


def large_enough(forbidden_elements: int, itemsize: int) -> bool:
    """A case whose forbidden tensor (``forbidden_elements`` of ``itemsize`` bytes) the operating system's count
    tells from an honest call: at least :data:`TOUCHED_MIN_BYTES`."""
    return forbidden_elements * itemsize >= TOUCHED_MIN_BYTES


def touched_over(touched, forbidden_elements: int, itemsize: int) -> list:
    """The counts of touched memory (``AllocationRecorder.touched``) that betray a forbidden tensor of
    ``forbidden_elements`` elements of ``itemsize`` bytes: none on a case too small for the count to tell
    (:data:`TOUCHED_MIN_BYTES`), else those of at least a :data:`TOUCHED_FRACTION` of its elements."""
    if not large_enough(forbidden_elements, itemsize):
        return []
    return [a for a in touched if a.numel * TOUCHED_FRACTION >= forbidden_elements]


def report(measurement: Measurement) -> None:
    """Hand a measurement to every instrument watching now (none in the notebook: nothing reports there)."""
    for watcher in list(_watchers):
        watcher(measurement)


# Forward-mode autograd: dual tensors, no engine, the same answer as autograd's.
FORWARD_AD_OPS = ("aten._make_dual", "aten._unpack_dual")


def is_library_backward(op: str) -> bool:
    """An aten op that is autograd by another door: one of torch's own backward kernels
    (``aten._softmax_backward_data``, ...) or forward-mode autograd's dual tensors."""
    return "_backward" in op or op in FORWARD_AD_OPS

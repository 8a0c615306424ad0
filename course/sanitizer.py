"""Races between programs and accesses out of bounds, read from what an interpreted Triton launch touched.

Triton's interpreter runs a grid's programs one after another, so a read-add-store that two programs make into
one address gives the right number on a CPU and loses an update on a GPU, where the programs run at once. The
values cannot show it; the accesses can. While :func:`sanitize` is active, every load, store and atomic of every
program of an interpreted launch is recorded (the addresses its mask lets through, the program, the kernel's
source line, the locks the program holds), and each launch is read when it ends:

- **race**: an address one program stores to without an atomic and another program loads, stores or updates
  atomically in the same launch, neither holding a lock the other holds. Atomics never race with each other.
  A lock is an address a program took with ``tl.atomic_cas`` (it found the expected value and wrote another; the
  pattern of Triton's LayerNorm tutorial) or ``tl.atomic_xchg`` (it wrote a value other than it found: a
  test-and-set), and gave back with ``tl.atomic_xchg``. What is taken and never given back (an atomic update in
  a CAS loop, a flag one program claims, an exchange of data) guards nothing;
- **lock** (raised as a race): a program that ends holding a lock leaves every other program waiting for it
  forever. A program whose ``tl.atomic_cas`` keeps failing the same way would spin forever (nothing else runs
  in the interpreter meanwhile): the launch is stopped there and the lock reported;
- **out-of-bounds**: an address that is no element of any tensor argument (a missing or wrong mask, a wrong
  stride, padding between a view's rows). An access outside every argument's memory is not made (a load gives
  0): on a CPU it could read or overwrite anything.

The checks sanitize every call of a student's code (``course.diagnose.call_student``); in a notebook, ``with
course.sanitize() as report:`` around a launch shows the report, and :meth:`Report.plot` which programs touched
which elements. Without the interpreter (a GPU) nothing is recorded.

Everything that runs during a launch, and what ``print(report)`` runs, has a private name: ``course.delegation``
arms each public function of ``course`` while a student's call runs.

Limitations: an access is named by the argument whose element it is, so a stride wrong enough to land exactly
on another argument's element is not seen; tensors inside tuples count, other containers do not.
"""

from __future__ import annotations

import inspect
import linecache
import os
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from . import witness

LOAD, STORE, ATOMIC = 0, 1, 2
_VERB = {LOAD: "loads", STORE: "stores to", ATOMIC: "updates atomically"}
KINDS = ("race", "out-of-bounds")  # the diagnosis classes a finding is raised as
MAX_FINDINGS = 8  # findings kept per launch: the first of each kind says what to fix
MAX_PLOTTED = 1 << 14  # a tensor's elements kept for Report.plot (larger tensors are left out of the picture)
MAX_LOAD_RUNS = 8192  # runs of loaded elements a launch may send to the grader (Launch.loads)
MAX_LOAD_ELEMENTS = 1 << 22  # the elements those runs may cover
MAX_KEPT = 1 << 21  # accesses (lanes) of a launch kept for Report.plot after it is read: more are let go
# A program whose compare-and-swap fails the same way this many times in a row spins forever: the interpreter runs
# one program at a time, so nothing else can change that memory. (A CAS loop that updates a value succeeds at once;
# a flag a program claims fails once in each later program.)
SPINS = 1000


@dataclass(frozen=True)
class Site:
    """Where an access was made: the kernel's (or a @triton.jit helper's) function, its line and the code there."""

    function: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"line {self.line} of {self.function}: `{self.code}`" if self.code else f"line {self.line} of {self.function}"


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a launch. ``kind`` is "race", "out-of-bounds" or "lock" (a lock never given back,
    reported as a race). ``tensor`` is the argument's name, ``index`` the element's index in it; for an address
    that is no element of it, the offset in elements from its first element as a 1-tuple, and ``outside`` says
    where that lies. ``also`` names the same element in other arguments that view the same memory. ``programs``
    and ``sites`` list the program(s) and line(s), ``ops`` what each did; ``count`` how many addresses (a race)
    or accesses (out of bounds) are affected in all."""

    kind: str
    kernel: str
    tensor: str
    index: tuple[int, ...]
    programs: tuple[tuple[int, int, int], ...]
    sites: tuple[Site, ...]
    ops: tuple[str, ...]
    count: int = 1
    outside: str = ""
    shape: tuple[int, ...] = ()
    also: tuple[str, ...] = ()

    @property
    def cls(self) -> str:
        """The diagnosis class this finding is raised as."""
        return "race" if self.kind in ("race", "lock") else "out-of-bounds"

    def sentence(self) -> str:
        """What went wrong, in the words a check raises it with."""
        return _sentence(self)

    def record(self) -> dict:
        """The finding as JSON-ready data (what the trusted re-check receives from the worker)."""
        return _record(self)


def _sentence(f: Finding, lead: str = "") -> str:
    """``f`` as a sentence, opened by ``lead`` ("scatter_add launched") when a check raises it. Private: a student
    may print a report inside a checked call, where the public methods are tripwires (course.delegation)."""
    said = f"{lead} {f.kernel}, which" if lead else f.kernel
    return f"{said} {_PHRASES[f.kind](f)}"


def _at(f: Finding) -> str:
    """The element, as the kernel's pointer arithmetic would name it: ``out[0, 0]``, or ``y + 10`` when the address
    is no element of ``y``."""
    if f.outside:
        offset = f.index[0] if f.index else 0
        return f"{f.tensor} {'-' if offset < 0 else '+'} {abs(offset)}"
    named = f"{f.tensor}[{', '.join(map(str, f.index))}]"
    return f"{named} (also {', '.join(f.also)})" if f.also else named


def _race(f: Finding) -> str:
    (p, q), (s, t), (a, b) = f.programs, f.sites, f.ops
    more = f" ({f.count} elements of {f.tensor} are shared this way)" if f.count > 1 else ""
    return (f"races on {_at(f)}: program {p} {a} it ({s}) and program {q} {b} it ({t}), with no atomic and no "
            f"lock between them{more}. On a GPU the programs run at the same time and in any order, so one update "
            "can overwrite the other; Triton's interpreter runs them one after another, which is why the values "
            "here can still come out right.")


def _lock(f: Finding) -> str:
    (p,), (s,), (op,) = f.programs, f.sites, f.ops
    if op == "waits for":
        return (f"spins forever in program {p} ({s}): its tl.atomic_cas on {_at(f)} keeps failing, and no program "
                "left to run will change that memory, so the launch was stopped. A lock must be free when the "
                "launch starts and given back by the program that took it.")
    return (f"leaves the lock at {_at(f)} taken: program {p} took it ({s}) and never gave it back, so on a GPU "
            "every other program that waits for it spins forever. A lock is given back with tl.atomic_xchg once "
            "the accesses it guards are done.")


def _out_of_bounds(f: Finding) -> str:
    (p,), (s,), (op,) = f.programs, f.sites, f.ops
    more = f" ({f.count} accesses out of bounds in this launch)" if f.count > 1 else ""
    return (f"{op} {_at(f)} in program {p} ({s}), {f.outside}: no element of any tensor argument{more}. A mask "
            "is missing or off by one, or a stride or an offset is wrong: on a GPU this reads or overwrites another "
            "tensor's memory, or faults.")


_PHRASES = {"race": _race, "lock": _lock, "out-of-bounds": _out_of_bounds}


def _record(f: Finding) -> dict:
    return {"kind": f.kind, "kernel": f.kernel, "tensor": f.tensor, "index": list(f.index),
            "programs": [list(p) for p in f.programs], "sites": [[s.function, s.line, s.code] for s in f.sites],
            "ops": list(f.ops), "count": f.count, "outside": f.outside, "shape": list(f.shape),
            "also": list(f.also)}


@dataclass
class Launch:
    """What one interpreted launch did: the kernel, the grid, each tensor argument, and what was found."""

    kernel: str
    grid: tuple[int, int, int]
    tensors: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, dtype)
    findings: list[Finding] = field(default_factory=list)
    programs: tuple[tuple[int, int, int], ...] = ()  # each program's ids, in the order the interpreter ran them
    _recording: _Recording | None = field(default=None, repr=False)
    broken: str = ""  # the sanitizer's own failure: the launch ran, unchecked from there on

    @property
    def touched(self) -> dict[str, dict[str, np.ndarray]]:
        """name -> "load"/"store"/"atomic" -> a (2, n) array of (program, row-major element) for each tensor
        argument small enough to draw (worked out when first asked: the checks never ask)."""
        if self._recording is not None:
            self._touched = self._recording._touches()
            self._recording = None
        return getattr(self, "_touched", {})

    def loads(self, budget: int = MAX_LOAD_RUNS) -> dict | None:
        """What each program loaded, as the grader's worker sends it for a check that reads the walk
        (:func:`read_loads` reads it back): ``{"kernel", "programs", "tensors"}``, ``programs`` each program's ids
        in the order they ran, ``tensors`` for each argument of :attr:`touched` a flat list of runs
        ``[program, first element, count]`` of the row-major elements its programs loaded. A tile of whole rows is
        one run, whatever the strides. None when the runs would pass ``budget`` or :data:`MAX_LOAD_ELEMENTS`."""
        tensors: dict[str, list[int]] = {}
        elements = 0
        if len(self.programs) > MAX_PLOTTED:
            return None
        for name, kinds in self.touched.items():
            program, flat = kinds["load"]
            key = np.unique(program.astype(np.int64) * MAX_PLOTTED + flat)  # (program, element), sorted and once
            p, f = key // MAX_PLOTTED, key % MAX_PLOTTED
            starts = np.flatnonzero(np.r_[True, (np.diff(p) != 0) | (np.diff(f) != 1)]) if key.size else key
            budget, elements = budget - starts.size, elements + key.size
            if budget < 0 or elements > MAX_LOAD_ELEMENTS:
                return None
            counts = np.diff(np.r_[starts, key.size])
            tensors[name] = np.stack([p[starts], f[starts], counts], axis=1).ravel().tolist()
        return {"kernel": self.kernel, "programs": [list(map(int, ids)) for ids in self.programs], "tensors": tensors}


@dataclass
class Report:
    """What :func:`sanitize` saw: every launch, in order. ``findings`` gathers theirs."""

    launches: list[Launch] = field(default_factory=list)
    received: list[Finding] = field(default_factory=list)  # findings measured in another process (the grader's)

    @property
    def findings(self) -> list[Finding]:
        return [f for launch in self.launches for f in launch.findings] + list(self.received)

    @property
    def clean(self) -> bool:
        return not self.findings

    def __str__(self) -> str:
        if not self.launches and not self.received:
            return "sanitizer: no interpreted launch ran (on a GPU the sanitizer records nothing)"
        lines = [f"sanitizer: {len(self.launches)} launch(es), "
                 f"{'no race, no access out of bounds' if self.clean else f'{len(self.findings)} finding(s)'}"]
        lines += [f"- {f.cls}: {_sentence(f)}" for f in self.findings]
        lines += [f"- the sanitizer itself failed in {launch.kernel} ({launch.broken}): that launch was not checked "
                  "from there on" for launch in self.launches if launch.broken]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return str(self).replace("\n- ", "\n\n- ")

    def failure(self, name: str):
        """The first finding as the GradingFailure a check raises (None when there is none)."""
        from .vocabulary import GradingFailure

        findings = self.findings
        if not findings:
            return None
        first = findings[0]
        # A kernel checked on its own is the one that launched: "k loads …", not "k launched k, which loads …".
        said = _sentence(first) if name == first.kernel else _sentence(first, f"{name} launched")
        return GradingFailure(first.cls, said, _where(first))

    def plot(self, tensor: str, launch: int = -1):
        """Draw which program touched which element of argument ``tensor`` in a launch (the last by default): one
        stripe per program in each element, solid where it wrote, pale where it only read; a race outlined in red,
        dashed where a lock guarded the sharing. Returns the matplotlib Figure."""
        from .sanitizer_plot import plot_touches

        if not self.launches:
            raise ValueError("no interpreted launch ran inside the sanitize() block: nothing to draw")
        return plot_touches(self.launches[launch], tensor, MAX_PLOTTED)


def _where(finding: Finding) -> str:
    shape = f" (shape {tuple(finding.shape)})" if finding.shape else ""
    return f"in {finding.kernel}: {finding.tensor}{shape}, programs {', '.join(map(str, finding.programs))}"


def read_record(data) -> Finding | None:
    """A finding from untrusted JSON data (a worker's report): every field of its type and within its bounds, or
    None (never an exception: the grader reads what a student's process wrote)."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or data["kind"] not in _PHRASES:
        return None
    n = 2 if data["kind"] == "race" else 1  # a race is between two programs; the rest name one
    programs, sites, ops = (data.get(key) for key in ("programs", "sites", "ops"))
    if not all(isinstance(x, list) and len(x) == n for x in (programs, sites, ops)):
        return None
    programs = tuple(_ints(p, 3, 3, 0) for p in programs)
    sites = tuple(_site_of(s) for s in sites)
    index, shape = _ints(data.get("index"), 1, 8), _ints(data.get("shape"), 0, 8, 0)
    texts = [data.get(key) for key in ("kernel", "tensor", "outside")]
    also, count = data.get("also", []), data.get("count")
    if (None in programs or None in sites or index is None or shape is None
            or not all(isinstance(o, str) and o in _OPS for o in ops) or not all(isinstance(t, str) for t in texts)
            or not isinstance(count, int) or isinstance(count, bool) or count < 1
            or not isinstance(also, list) or len(also) > 4 or not all(isinstance(a, str) for a in also)):
        return None
    kernel, tensor, outside = (_text(t) for t in texts)
    return Finding(data["kind"], kernel, tensor, index, programs, sites, tuple(ops), min(count, _MAX_INT), outside,
                   shape, tuple(_text(a) for a in also))


def read_loads(data) -> Launch | None:
    """A launch whose :attr:`Launch.touched` holds the loads of :meth:`Launch.loads`' record, from untrusted data (a
    worker's report); None when anything in it is not of its type or out of its bounds, never an exception."""
    if not (isinstance(data, dict) and set(data) == {"kernel", "programs", "tensors"} and isinstance(data["kernel"], str)
            and isinstance(data["programs"], list) and 0 < len(data["programs"]) <= MAX_PLOTTED
            and isinstance(data["tensors"], dict) and len(data["tensors"]) <= 64):
        return None
    programs = [_ints(ids, 3, 3, 0) for ids in data["programs"]]
    runs = {name: _ints(flat, 0, 3 * MAX_LOAD_RUNS, 0) for name, flat in data["tensors"].items()}
    if None in programs or None in runs.values() or not all(isinstance(n, str) for n in runs):
        return None
    touched, runs_in, elements = {}, 0, 0
    for name, flat in runs.items():
        p, first, count = (np.asarray(flat[i::3], dtype=np.int64) for i in range(3))
        if len(flat) % 3 or (p >= len(programs)).any() or (count < 1).any() or (count > MAX_PLOTTED).any():
            return None
        runs_in, elements = runs_in + len(p), elements + int(count.sum())
        if (first + count > MAX_PLOTTED).any() or runs_in > MAX_LOAD_RUNS or elements > MAX_LOAD_ELEMENTS:
            return None
        # Each run [program, first, count] back to one (program, element) pair per element, as Launch.touched has them.
        element = np.repeat(first - np.r_[0, np.cumsum(count)[:-1]], count) + np.arange(count.sum())
        none = np.zeros((2, 0), dtype=np.int64)
        touched[_text(name)] = {"load": np.stack([np.repeat(p, count), element]), "store": none, "atomic": none}
    grid = tuple(max(ids[i] for ids in programs) + 1 for i in range(3))
    launch = Launch(_text(data["kernel"]), grid, {}, programs=tuple(programs))
    launch._touched = touched
    return launch


_OPS = frozenset(("loads", "stores to", "updates atomically", "takes", "waits for"))
_MAX_TEXT = 300  # characters of a name or a line of code received
_MAX_INT = 1 << 62  # an index, a count, a program id or a line received is at most this (JSON ints are unbounded)


def _text(s: str) -> str:
    """A received name or line of code, cut to length, on one line (it is printed inside a diagnosis)."""
    return "".join(c if c.isprintable() else " " for c in s[:_MAX_TEXT])


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and -_MAX_INT <= x <= _MAX_INT


def _ints(xs, least: int, most: int, low: int = -_MAX_INT) -> tuple[int, ...] | None:
    """``xs`` as a tuple of ``least`` to ``most`` ints, each at least ``low``; None when it is anything else."""
    if not isinstance(xs, list) or not least <= len(xs) <= most or not all(_is_int(x) and x >= low for x in xs):
        return None
    return tuple(xs)


def _site_of(data) -> Site | None:
    if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], str) and _is_int(data[1])
            and data[1] >= 0 and isinstance(data[2], str)):
        return None
    return Site(_text(data[0]), data[1], _text(data[2]))


# ---------------------------------------------------------------------------
# Recording


class _Stop(Exception):
    """Ends a launch early: a program would wait forever (for a lock another program never gave back)."""

    def __init__(self, finding: Finding):
        super().__init__(finding.kind)  # the report says the rest
        self.finding = finding


@dataclass
class _Arg:
    name: str
    ptr: int
    itemsize: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str
    lo: int  # the argument's storage, in bytes
    hi: int


class _Recording:
    """One launch being recorded."""

    def __init__(self, kernel: str, grid: tuple[int, int, int]):
        self.kernel, self.grid = kernel, grid
        self.args: list[_Arg] = []
        self.programs: list[tuple[int, int, int]] = []
        self.held: set[int] = set()  # lock addresses the current program holds
        self.held_at: dict[int, int] = {}  # lock address -> the site it was taken at
        self.abandoned: dict[int, tuple[int, int]] = {}  # lock address -> (program, site) that never gave it back
        self.released: set[int] = set()  # addresses a program took and gave back: locks (not a CAS-loop update)
        self.failing: dict[int, tuple[tuple, int]] = {}  # address -> (found, expected), times the current program's
        # compare-and-swap failed that way in a row
        self.locksets: dict[frozenset, int] = {frozenset(): 0}
        self.last_site = 0
        self.sites: list[Site] = []
        self.site_ids: dict[tuple, int] = {}
        # (program, kind, lockset, site, addresses, lowest, highest, bytes per element): one per access made
        self.events: list[tuple[int, int, int, int, np.ndarray, int, int, int]] = []
        self.holder: _Arg | None = None  # the argument whose storage held the last access
        self.atomic_plain = False  # inside create_atomic_load/store: the load/store they make is an atomic
        # (program, kind, site, addresses, an address of the same access inside some argument or -1): never made
        self.outside: list[tuple[int, int, int, np.ndarray, int]] = []
        self.stopped: Finding | None = None
        self.broken = ""  # what went wrong in the sanitizer itself, if anything
        self.known = True  # every argument that points at memory is in args: an address outside them is wrong

    # -- what each access is

    def _site(self) -> int:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
            frame = frame.f_back
        key = ("?", 0) if frame is None else (frame.f_code, frame.f_lineno)
        found = self.site_ids.get(key)
        if found is None:
            found = self.site_ids[key] = len(self.sites)
            if frame is None:
                self.sites.append(Site("?", 0, ""))
            else:
                text = linecache.getline(frame.f_code.co_filename, key[1]).strip()
                self.sites.append(Site(frame.f_code.co_name, key[1], text[:120]))
        return found

    def _program(self) -> int:
        return len(self.programs) - 1

    def _lockset(self) -> int:
        if not self.held:
            return 0
        key = frozenset(self.held)
        found = self.locksets.get(key)
        if found is None:
            found = self.locksets[key] = len(self.locksets)
        return found

    def _holding(self, lo: int, hi: int) -> _Arg | None:
        """An argument whose storage holds the bytes from ``lo`` to ``hi``: the last one asked first."""
        a = self.holder
        if a is not None and a.lo <= lo and hi <= a.hi:
            return a
        for a in self.args:
            if a.lo <= lo and hi <= a.hi:
                self.holder = a
                return a
        return None

    def _inside_memory(self, addresses: np.ndarray, nbytes: int) -> np.ndarray:
        """Which addresses lie inside some tensor argument's storage."""
        inside = np.zeros(addresses.shape, dtype=bool)
        for a in self.args:
            inside |= (addresses >= a.lo) & (addresses + nbytes <= a.hi)
        return inside

    def _access(self, kind: int, ptrs, mask) -> np.ndarray | None:
        """Record an access; return the mask to make it with when some lanes lie outside every tensor's memory."""
        data = ptrs.data
        if mask is None:
            lanes = data.reshape(-1).copy()
        else:
            lanes = data[np.broadcast_to(mask.data, data.shape)] if data.ndim else (data if bool(mask.data) else data[:0])
        addresses = (lanes.view(np.int64) if lanes.dtype == np.uint64 else lanes.astype(np.int64)).reshape(-1)
        if addresses.size == 0:
            return None
        site, program = self._site(), self._program()
        self.last_site = site
        nbytes = _itemsize(ptrs)
        lo, hi = int(addresses.min()), int(addresses.max())
        full = None
        if self._holding(lo, hi + nbytes) is None:  # some lanes may lie outside every tensor's memory
            inside = self._inside_memory(addresses, nbytes)
            if not self.known:  # an argument's memory is unknown: what lies outside the known ones is made, unread
                addresses = addresses[inside]
                if addresses.size:
                    lo, hi = int(addresses.min()), int(addresses.max())
            elif not inside.all():
                aimed = int(addresses[inside][0]) if inside.any() else -1  # which tensor the access was meant for
                self.outside.append((program, kind, site, addresses[~inside], aimed))
                addresses = addresses[inside]
                full = np.broadcast_to(np.asarray(True if mask is None else mask.data), data.shape).copy()
                full &= self._inside_memory(np.asarray(data, dtype=np.uint64).astype(np.int64), nbytes)
                if addresses.size:
                    lo, hi = int(addresses.min()), int(addresses.max())
        if addresses.size:
            self.events.append((program, kind, self._lockset(), site, addresses, lo, hi, nbytes))
        return full

    def _cas(self, ptr, cmp, val, old) -> None:
        """After a compare-and-swap: where it found ``cmp`` and wrote something else, the program holds a lock now;
        where it found something else, it failed to take one."""
        addresses = np.asarray(ptr.data, dtype=np.uint64).astype(np.int64)
        got, want, new = (np.broadcast_to(np.asarray(x.data), addresses.shape) for x in (old, cmp, val))
        self._attempt(addresses, (got == want) & (got != new), got != want, got, want)

    def _exchange(self, ptr, val, mask, old) -> None:
        """After an exchange: a lock the program holds is given back; elsewhere, one that wrote something other
        than it found took a lock (a test-and-set), one that found what it wrote failed to."""
        addresses = np.asarray(ptr.data, dtype=np.uint64).astype(np.int64)
        got, new = (np.broadcast_to(np.asarray(x.data), addresses.shape) for x in (old, val))
        if mask is not None:
            active = np.broadcast_to(np.asarray(mask.data), addresses.shape)
            addresses, got, new = addresses[active], got[active], new[active]
        held = np.array([a in self.held for a in addresses.reshape(-1).tolist()], dtype=bool).reshape(addresses.shape)
        for address in addresses[held].tolist():
            self.held.discard(address)
            self.released.add(address)
        rest = ~held
        self._attempt(addresses[rest], (got != new)[rest], (got == new)[rest], got[rest], new[rest])

    def _attempt(self, addresses, took, failed, found, expected) -> None:
        """Record an attempt at a lock in each lane: ``took`` it, ``failed`` (having ``found`` a value where it
        ``expected`` another); one that failed the same way SPINS times in a row spins forever."""
        for address in addresses[took].tolist():
            self.held.add(address)
            self.held_at[address] = self.last_site
        for address in addresses[~failed].tolist():
            self.failing.pop(address, None)
        for address, got, want in zip(addresses[failed].tolist(), found[failed].tolist(), expected[failed].tolist()):
            seen, times = self.failing.get(address, (None, 0))
            times = times + 1 if seen == (got, want) else 1
            self.failing[address] = ((got, want), times)
            if times >= SPINS:
                self._stop(address)

    def _stop(self, address: int) -> None:
        """End the launch: the current program spins on ``address`` forever."""
        if address in self.abandoned or address in self.held:
            program, site = self.abandoned.get(address) or (self._program(), self.held_at.get(address, 0))
            op = "takes"
        else:  # no program holds it: a lock that was never free, or a flag no program left to run sets
            program, site, op = self._program(), self.last_site, "waits for"
        self.stopped = self._finding_at("lock", address, (self.programs[program],), (self.sites[site],), (op,))
        raise _Stop(self.stopped)

    def _next_program(self, idx: tuple[int, int, int], grid: tuple[int, ...]) -> None:
        self.grid = grid  # a callable grid is known only now
        if self.programs:
            for address in self.held:
                self.abandoned[address] = (self._program(), self.held_at.get(address, 0))
        self.held, self.failing = set(), {}
        self.programs.append(idx)

    # -- reading the launch

    def _arg_of(self, address: int) -> _Arg | None:
        """The argument whose memory holds ``address``, else any argument, the one whose elements lie nearest."""
        pool = [a for a in self.args if a.lo <= address < a.hi] or self.args
        return min(pool, key=lambda a: _distance(a, address)) if pool else None

    def _finding_at(self, kind: str, address: int, programs, sites, ops, count: int = 1, aimed: int = -1) -> Finding:
        """The finding at ``address``, named by the first argument it is an element of (the others that view the
        same memory in ``also``); else by the argument ``aimed`` (an address the same access made) lies in."""
        at = np.array([address], dtype=np.int64)
        holding = [a for a in self.args if a.lo <= address < a.hi and bool(_elements(a, at)[0])]
        arg = holding[0] if holding else self._arg_of(aimed if aimed >= 0 else address)
        if arg is None:
            return Finding(kind, self.kernel, "memory", (address,), programs, sites, ops, count,
                           "outside every tensor argument (the kernel has none)")
        index, outside = _index_in(arg, address)
        also = tuple(f"{b.name}[{', '.join(map(str, _index_in(b, address)[0]))}]" for b in holding[1:4])
        return Finding(kind, self.kernel, arg.name, index, programs, sites, ops, count, outside, arg.shape, also)

    def findings(self) -> list[Finding]:
        found: list[Finding] = [self.stopped] if self.stopped is not None else []
        abandoned = {**{a: (self._program(), self.held_at.get(a, 0)) for a in self.held}, **self.abandoned}
        kept = [a for a in abandoned if a in self.released and self.stopped is None]
        if kept:  # a lock some program gave back and another kept: in another order, the others wait forever
            program, site = abandoned[kept[0]]
            found.append(self._finding_at("lock", kept[0], (self.programs[program],), (self.sites[site],),
                                          ("takes",)))
        columns = self._columns() if self.events else None
        stray = self._out_of_bounds(columns) if self.events or self.outside else []
        if self.stopped is not None and self.stopped.outside:  # a lock out of bounds: that is what to fix first
            found = stray + found
        else:
            found += stray
        if columns is not None:
            found += self._races(columns)
        return found[:MAX_FINDINGS]

    def _columns(self) -> tuple[np.ndarray, ...]:
        """Every access made, one lane per row: (program, kind, lockset, site, address), in the order made."""
        sizes = [e[4].size for e in self.events]
        return (*(np.repeat(np.array([e[i] for e in self.events], dtype=np.int64), sizes) for i in range(4)),
                np.concatenate([e[4] for e in self.events]))

    def _out_of_bounds(self, columns) -> list[Finding]:
        """Accesses to no element of any tensor argument: those never made first, then those inside some memory."""
        stray = [(program, kind, site, int(addresses[0]), addresses.size, aimed)
                 for program, kind, site, addresses, aimed in self.outside]
        if columns is not None:
            program, kind, _, site, address = columns
            member = self._surely_elements(address)
            unsure = np.flatnonzero(~member)
            for a in self.args:
                member[unsure] |= _elements(a, address[unsure])
            outside = np.flatnonzero(~member)
            if outside.size:
                i = int(outside[0])
                stray.append((int(program[i]), int(kind[i]), int(site[i]), int(address[i]), int(outside.size), -1))
        if not stray:
            return []
        program, kind, site, address, _, aimed = stray[0]
        return [self._finding_at("out-of-bounds", address, (self.programs[program],), (self.sites[site],),
                                 (_VERB[kind],), sum(s[4] for s in stray), aimed)]

    def _surely_elements(self, address: np.ndarray) -> np.ndarray:
        """Lanes known to be elements without a look at each: an access whose lowest and highest address lie in
        the elements of an argument without gaps (a contiguous tensor), aligned to its elements."""
        lo, hi, nbytes = (np.array([e[i] for e in self.events], dtype=np.int64) for i in (5, 6, 7))
        sure = np.zeros(lo.shape, dtype=bool)
        ptr = np.zeros(lo.shape, dtype=np.int64)
        size = np.ones(lo.shape, dtype=np.int64)
        for a in self.args:
            if not _gap_free(a):
                continue
            fits = ~sure & (nbytes == a.itemsize) & (lo >= a.ptr) & (hi <= a.ptr + _last(a) * a.itemsize)
            sure |= fits
            ptr[fits], size[fits] = a.ptr, a.itemsize
        sizes = [e[4].size for e in self.events]
        sure, ptr, size = (np.repeat(x, sizes) for x in (sure, ptr, size))
        return sure & ((address - ptr) & (size - 1) == 0)  # each lane on an element, not between two (sizes: 2^k)

    def _races(self, columns) -> list[Finding]:
        """The first pair of accesses that race, over the addresses some program stores to without an atomic."""
        program, kind, lockset, site, address = columns
        lockset, locks = self._locks(lockset)
        if not (kind == STORE).any():
            return []
        slots = self._slots(address, 2 * address.size + (1 << 16))
        if slots is not None:
            keep = _suspects(slots, program, kind, lockset)
        else:  # the addresses are too scattered for a dense map: sort them
            keep = np.isin(address, np.unique(address[kind == STORE]))
        if not keep.any():
            return []
        program, kind, lockset, site, address = program[keep], kind[keep], lockset[keep], site[keep], address[keep]
        order = np.lexsort((np.arange(address.size), address))  # by address, then in the order of the accesses
        program, kind, lockset, site, address = (x[order] for x in (program, kind, lockset, site, address))
        starts = np.flatnonzero(np.r_[True, address[1:] != address[:-1]])
        ends = np.r_[starts[1:], address.size]
        many = np.minimum.reduceat(program, starts) != np.maximum.reduceat(program, starts)
        one_lock = ((np.minimum.reduceat(lockset, starts) == np.maximum.reduceat(lockset, starts))
                    & (np.minimum.reduceat(lockset, starts) > 0))
        suspects = np.flatnonzero(many & ~one_lock)
        if suspects.size == 0:
            return []
        first, count = None, 0
        for g in suspects.tolist():
            lo, hi = int(starts[g]), int(ends[g])
            pair = _racing_pair(program[lo:hi], kind[lo:hi], lockset[lo:hi], locks)
            if pair is None:
                continue
            count += 1
            if first is None:
                first = (int(address[lo]), lo + pair[0], lo + pair[1])
            if count >= 10_000:
                break
        if first is None:
            return []
        a, i, j = first
        return [self._finding_at("race", a, (self.programs[program[i]], self.programs[program[j]]),
                                 (self.sites[site[i]], self.sites[site[j]]),
                                 (_VERB[int(kind[i])], _VERB[int(kind[j])]), count)]

    def _slots(self, address: np.ndarray, most: int) -> tuple[np.ndarray, int] | None:
        """Each address made as a small int (equal for equal addresses) and how many there can be: within each
        argument storage, the offset from the lowest address made in it, in its smallest element. None when that
        would take more than ``most``, or an address lies between two such elements."""
        storages = sorted({(a.lo, a.hi) for a in self.args})
        start = np.array([lo for lo, _ in storages], dtype=np.int64)
        step = np.array([min(a.itemsize for a in self.args if (a.lo, a.hi) == s) for s in storages], dtype=np.int64)
        region = np.searchsorted(start, address, side="right") - 1  # every address made lies in some storage
        first, last = np.full(start.size, np.iinfo(np.int64).max), np.full(start.size, -1, dtype=np.int64)
        np.minimum.at(first, region, address)
        np.maximum.at(last, region, address)
        width = np.where(last >= first, (last - first) // step + 1, 0)
        if int(width.sum()) > most:
            return None
        offset, shift = address - first[region], _log2(step)[region]  # element sizes are powers of two
        if (offset & ((1 << shift) - 1)).any():
            return None
        base = np.cumsum(width) - width
        return base[region] + (offset >> shift), int(width.sum())

    def _locks(self, lockset: np.ndarray) -> tuple[np.ndarray, dict[int, frozenset]]:
        """Each access's set of locks held, keeping only the addresses some program gave back: a compare-and-swap
        that is never undone (an atomic update in a CAS loop, a flag) guards nothing. Returns the new column and
        each set by its id (0: none)."""
        canon: dict[frozenset, int] = {frozenset(): 0}
        remap = np.zeros(len(self.locksets), dtype=np.int64)
        for held, i in self.locksets.items():
            remap[i] = canon.setdefault(held & self.released, len(canon))
        return remap[lockset], {i: held for held, i in canon.items()}

    def _drawable(self) -> bool:
        """Whether to keep this recording for Report.plot: some argument small enough to draw, and not so many
        accesses that keeping them costs much memory (a report holds every launch of a check's call)."""
        return (any(int(np.prod(a.shape, dtype=np.int64)) <= MAX_PLOTTED for a in self.args)
                and sum(e[4].size for e in self.events) <= MAX_KEPT)

    def _touches(self) -> dict[str, dict[str, np.ndarray]]:
        """For each small tensor argument: (program, element) pairs of its loads, plain stores and atomics."""
        out: dict[str, dict[str, np.ndarray]] = {}
        if not self.events:
            return out
        program, kind, _, _, address = self._columns()
        for arg in self.args:
            if int(np.prod(arg.shape, dtype=np.int64)) > MAX_PLOTTED:
                continue
            member = _elements(arg, address)
            flat = _flat_index(arg, address[member])
            out[arg.name] = {name: np.stack([program[member][kind[member] == k], flat[kind[member] == k]])
                             for k, name in enumerate(("load", "store", "atomic"))}
        return out


def _suspects(slots: tuple[np.ndarray, int], program, kind, lockset) -> np.ndarray:
    """Which lanes touch an address (a slot, :meth:`_Recording._slots`) that some program stores to and another
    program touches, not all under one set of locks: all that :meth:`_Recording._races` must read pair by pair."""
    slot, n = slots
    stored = np.zeros(n, dtype=bool)
    stored[slot[kind == STORE]] = True
    keep = stored[slot]
    slot, program, lockset = slot[keep], program[keep], lockset[keep]
    suspect = stored
    for column in (program, lockset):
        low, high = np.full(n, np.iinfo(np.int64).max), np.full(n, -1, dtype=np.int64)
        np.minimum.at(low, slot, column)
        np.maximum.at(high, slot, column)
        if column is program:
            suspect = suspect & (low != high)  # touched by two programs or more
        else:
            suspect = suspect & ~((low == high) & (low > 0))  # every access under the same locks
    keep[keep] = suspect[slot]
    return keep


def _racing_pair(program, kind, lockset, locks) -> tuple[int, int] | None:
    """The first two accesses (in order) to one address that race: different programs, one a plain store, not
    both atomics, no lock in common."""
    n = len(program)
    for j in range(n):
        for i in range(j):
            if program[i] == program[j] or (kind[i] != STORE and kind[j] != STORE):
                continue
            if lockset[i] and lockset[j] and locks[int(lockset[i])] & locks[int(lockset[j])]:
                continue
            return i, j
    return None


def _itemsize(ptrs) -> int:
    ty = ptrs.get_element_ty()
    return max(1, getattr(ty, "primitive_bitwidth", 8) // 8)


def _dense_order(arg: _Arg) -> list[int] | None:
    """The argument's axes from the largest stride to the smallest, when no two elements share an address."""
    axes = sorted((d for d in range(len(arg.shape)) if arg.shape[d] > 1), key=lambda d: -arg.strides[d])
    reach = 1
    for d in reversed(axes):
        if arg.strides[d] < reach:
            return None
        reach = arg.strides[d] * arg.shape[d]
    return axes


def _log2(sizes: np.ndarray) -> np.ndarray:
    return np.round(np.log2(sizes)).astype(np.int64)


def _gap_free(arg: _Arg) -> bool:
    """Whether every aligned address from ``arg``'s first element to its last is one of its elements."""
    n = int(np.prod(arg.shape, dtype=np.int64))
    return n > 0 and _dense_order(arg) is not None and _last(arg) + 1 == n


def _elements(arg: _Arg, addresses: np.ndarray) -> np.ndarray:
    """Which ``addresses`` are the first byte of one of ``arg``'s elements."""
    offset = addresses - arg.ptr
    if any(s == 0 for s in arg.shape):
        return np.zeros(addresses.shape, dtype=bool)
    ok = (offset >= 0) & (offset % arg.itemsize == 0)
    offset = offset // arg.itemsize
    axes = _dense_order(arg)
    if axes is None:  # overlapping strides: the span from the first element to the last
        return ok & (offset <= _last(arg))
    for d in axes:
        i = offset // arg.strides[d]
        ok &= i < arg.shape[d]
        offset = offset - np.minimum(i, arg.shape[d] - 1) * arg.strides[d]
    return ok & (offset == 0)


def _flat_index(arg: _Arg, addresses: np.ndarray) -> np.ndarray:
    """Row-major indices of ``addresses``, known to be elements of ``arg``."""
    offset = (addresses - arg.ptr) // arg.itemsize
    index = np.zeros(addresses.shape, dtype=np.int64)
    axes = _dense_order(arg) or []
    coords = {}
    for d in axes:
        coords[d] = offset // arg.strides[d]
        offset = offset - coords[d] * arg.strides[d]
    for d, n in enumerate(arg.shape):
        index = index * n + coords.get(d, 0)
    return index


def _index_in(arg: _Arg, address: int) -> tuple[tuple[int, ...], str]:
    """(index, where it lies) of ``address`` in ``arg``: the element's index and "" when it is one, else the offset
    in elements from the first element and where that lies, as a phrase naming ``arg``."""
    a = np.array([address], dtype=np.int64)
    if bool(_elements(arg, a)[0]):
        flat = int(_flat_index(arg, a)[0])
        return tuple(int(i) for i in np.unravel_index(flat, arg.shape)), ""
    offset = (address - arg.ptr) // arg.itemsize
    last = _last(arg)
    of = f"{arg.name} (shape {arg.shape})"
    if offset < 0:
        return (offset,), f"{_elements_word(-offset)} before the first element of {of}"
    if offset > last:
        return (offset,), f"{_elements_word(offset - last)} past the last element of {of}"
    return (offset,), f"between the elements of {of[:-1]}, strides {arg.strides})"


def _elements_word(n: int) -> str:
    return f"{n} element" if n == 1 else f"{n} elements"


def _last(arg: _Arg) -> int:
    """The offset in elements of ``arg``'s last element from its first."""
    return sum((n - 1) * s for n, s in zip(arg.shape, arg.strides) if s > 0)


def _distance(arg: _Arg, address: int) -> int:
    """How many bytes ``address`` lies from ``arg``'s elements (0 between its first and its last)."""
    lo, hi = arg.ptr, arg.ptr + _last(arg) * arg.itemsize
    return max(lo - address, address - hi, 0)


# ---------------------------------------------------------------------------
# The hooks on Triton's interpreter

_SKIPPED = (os.path.dirname(os.path.abspath(__file__)) + os.sep + "sanitizer",)
_recorders: list[Report] = []  # the reports of every sanitize() active now
_current: list[_Recording | None] = []  # the launch being recorded, None once it broke (no kernel launches another)
_installed: list[bool] = []
_orders: list[_Order] = []  # the shuffled_programs() blocks active now, innermost last


def _install() -> None:
    """Wrap the interpreter's memory operations and grid loop, once per process (no effect without Triton)."""
    if _installed or "triton" not in sys.modules:  # no kernel defined yet: nothing can launch (try again later)
        return
    try:
        import triton
        from triton.runtime import interpreter
    except ImportError:
        return
    _installed.append(True)
    global _SKIPPED
    _SKIPPED = _SKIPPED + (os.path.dirname(os.path.abspath(triton.__file__)) + os.sep,)
    builder_cls, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    masked_load, masked_store = builder_cls.create_masked_load, builder_cls.create_masked_store
    rmw, cas, set_idx = builder_cls.create_atomic_rmw, builder_cls.create_atomic_cas, builder_cls.set_grid_idx
    init_args, call = executor._init_args_hst, executor.__call__
    TensorHandle = interpreter.TensorHandle
    xchg = interpreter._ir.ATOMIC_OP.XCHG

    def _masked(mask, full):
        return mask if full is None else TensorHandle(full, triton.language.int1)

    # Only the leading arguments are read, the rest passed on as they came: the builder's signatures change between
    # Triton releases (3.4's masked load takes a cache modifier and an eviction policy where 3.9's takes a policy).
    def _create_masked_load(self, ptrs, mask, *rest, **kw):
        rec = _current[-1] if _current else None
        if rec is not None:
            mask = _masked(mask, _safely(rec, rec._access, ATOMIC if rec.atomic_plain else LOAD, ptrs, mask))
        return masked_load(self, ptrs, mask, *rest, **kw)

    def _create_masked_store(self, ptrs, value, mask, *rest, **kw):
        rec = _current[-1] if _current else None
        if rec is not None:
            mask = _masked(mask, _safely(rec, rec._access, ATOMIC if rec.atomic_plain else STORE, ptrs, mask))
        return masked_store(self, ptrs, value, mask, *rest, **kw)

    def _atomic(original):
        def _create(self, *args):
            rec = _current[-1] if _current else None
            if rec is None:
                return original(self, *args)
            rec.atomic_plain = True
            try:
                return original(self, *args)
            finally:
                rec.atomic_plain = False
        return _create

    def _create_atomic_rmw(self, op, ptr, val, mask, *rest, **kw):
        rec = _current[-1] if _current else None
        if rec is not None:
            mask = _masked(mask, _safely(rec, rec._access, ATOMIC, ptr, mask))
        result = rmw(self, op, ptr, val, mask, *rest, **kw)
        if rec is not None and op == xchg:
            _safely(rec, rec._exchange, ptr, val, mask, result)
        return result

    def _create_atomic_cas(self, ptr, cmp, val, *rest, **kw):
        rec = _current[-1] if _current else None
        if rec is None:
            return cas(self, ptr, cmp, val, *rest, **kw)
        if _safely(rec, rec._access, ATOMIC, ptr, None) is not None:  # outside every tensor's memory: not made
            old = TensorHandle(np.asarray(cmp.data) + 1, cmp.dtype.scalar)  # it fails, as on a lock held forever
        else:
            old = cas(self, ptr, cmp, val, *rest, **kw)
        _safely(rec, rec._cas, ptr, cmp, val, old)
        return old

    def _set_grid_idx(self, x, y, z):
        if _orders:  # the loop's i-th program runs as the order's i-th
            x, y, z = _orders[-1]._program(tuple(int(n) for n in self.grid_dim), (int(x), int(y), int(z)))
        set_idx(self, x, y, z)
        if _current and _current[-1] is not None:
            rec = _current[-1]
            _safely(rec, rec._next_program, (int(x), int(y), int(z)), tuple(int(n) for n in self.grid_dim))

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        if _current and _current[-1] is not None:
            rec = _current[-1]
            rec.args, rec.known = _safely(rec, _tensor_args, self.fn, args_hst, kwargs_hst) or ([], False)
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        if not _recorders or _current:
            return call(self, *args, **kwargs)
        grid = self.grid if not callable(self.grid) else None
        rec = _Recording(getattr(self.fn, "__name__", "kernel"), tuple(grid or ()) + (1,) * (3 - len(grid or ())))
        _current.append(rec)
        try:
            call(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 — the interpreter wraps what the kernel raised
            if rec.stopped is None and not isinstance(_cause(exc), _Stop):
                raise
        finally:
            _current.pop()
            found = _safely(rec, rec.findings) or []
            launch = Launch(rec.kernel, (*rec.grid,), {a.name: (a.shape, a.dtype) for a in rec.args}, found,
                            tuple(rec.programs), rec if not rec.broken and rec._drawable() else None, rec.broken)
            for report in _recorders:
                report.launches.append(launch)

    builder_cls.create_masked_load = _create_masked_load
    builder_cls.create_masked_store = _create_masked_store
    for name in ("create_atomic_load", "create_atomic_store", "create_atomic_poll"):  # not in every release
        if hasattr(builder_cls, name):  # the loads and stores these make are atomics
            setattr(builder_cls, name, _atomic(getattr(builder_cls, name)))
    builder_cls.create_atomic_rmw = _create_atomic_rmw
    builder_cls.create_atomic_cas = _create_atomic_cas
    builder_cls.set_grid_idx = _set_grid_idx
    executor._init_args_hst = _init_args_hst
    executor.__call__ = __call__


def _safely(rec: _Recording, method, *args):
    """``method(*args)``; if the sanitizer itself fails, the launch goes on unrecorded and says why (a bug here must
    never read as the student's error). A program that would spin forever still ends the launch."""
    try:
        return method(*args)
    except _Stop:
        raise
    except Exception as exc:  # noqa: BLE001
        rec.broken = rec.broken or f"{type(exc).__name__}: {exc}"
        if _current and _current[-1] is rec:
            _current[-1] = None  # the hooks see no recording for the rest of the launch
        return None


def _cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _tensor_args(fn, args, kwargs) -> tuple[list[_Arg], bool]:
    """Every tensor argument of the launch, by the kernel's parameter name; and whether every argument that points
    at memory was understood."""
    try:
        named = inspect.getcallargs(fn, *args, **{k: v for k, v in kwargs.items()
                                                  if k in inspect.signature(fn).parameters})
    except TypeError:
        named = {f"arg{i}": a for i, a in enumerate(args)}
    out: list[_Arg] = []
    known = [_add_tensors(out, name, value) for name, value in named.items()]
    return out, all(known)


def _add_tensors(out: list[_Arg], name: str, value) -> bool:
    """Add ``value`` to ``out`` if it is a tensor; each tensor of a tuple as ``name[i]``, a descriptor's or a
    ``triton.reinterpret`` wrapper's tensor as ``name``. False when it points at memory this cannot tell."""
    if isinstance(value, tuple):
        return len(value) <= 64 and all([_add_tensors(out, f"{name}[{i}]", item) for i, item in enumerate(value)])
    if hasattr(value, "untyped_storage") and hasattr(value, "data_ptr"):
        try:
            storage = value.untyped_storage()
            lo = storage.data_ptr()
            out.append(_Arg(name, value.data_ptr(), value.element_size(), tuple(value.shape), tuple(value.stride()),
                            str(value.dtype).replace("torch.", ""), lo, lo + storage.nbytes()))
            return True
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # a tensor with no memory of its own
            return False
    if hasattr(value, "base") and (hasattr(value, "block_shape") or hasattr(value, "data_ptr")):
        return _add_tensors(out, name, value.base)
    return not hasattr(value, "data_ptr")


@contextmanager
def sanitize() -> Iterator[Report]:
    """Record every interpreted launch inside the block and read it for races and accesses out of bounds.

    ``with course.sanitize() as report: kernel[grid](...)``, then ``print(report)`` or ``report.plot("out")``.
    Under the grader's trusted re-check, a call made in another process reports its findings here too.
    """
    _install()
    report = Report()
    _recorders.append(report)
    try:
        with witness.watching(_receiver(report)):
            yield report
    finally:
        _recorders.remove(report)


class _Order:
    """A permutation of each launch's programs, drawn when its first program starts."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.perm: list[int] = []

    def _program(self, grid: tuple[int, int, int], idx: tuple[int, int, int]) -> tuple[int, int, int]:
        _, g1, g2 = grid
        i = (idx[0] * g1 + idx[1]) * g2 + idx[2]  # the interpreter's loop: x slowest, z fastest
        if i == 0:
            self.perm = list(range(grid[0] * g1 * g2))
            self.rng.shuffle(self.perm)
        j = self.perm[i]
        return j // (g1 * g2), j // g2 % g1, j % g2


@contextmanager
def shuffled_programs(seed: int) -> Iterator[None]:
    """Run each interpreted launch inside the block with its programs in a shuffled order, drawn from ``seed``.

    A GPU runs a grid's programs in whatever order its schedulers pick, and at once; the interpreter runs them one
    after another in grid order. Inside this block it picks another order per launch (the same orders for the same
    seed), so a result that depends on the order — float sums made by atomics, a race — shows it on a CPU.
    Without the interpreter (a GPU) it changes nothing. ``with course.shuffled_programs(3): kernel[grid](...)``
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"shuffled_programs(seed): seed must be an int, got {type(seed).__name__}")
    _install()
    order = _Order(seed)
    _orders.append(order)
    try:
        yield
    finally:
        _orders.remove(order)


def _receiver(report: Report):
    def _receive(measurement) -> None:
        for data in getattr(measurement, "sanitized", ()) or ():
            found = read_record(data)
            if found is not None:
                report.received.append(found)
        for data in getattr(measurement, "loads", ()) or ():  # asked for by a check that reads the walk
            launch = read_loads(data)
            if launch is not None:
                report.launches.append(launch)
    return _receive

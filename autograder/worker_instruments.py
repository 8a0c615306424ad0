"""What a student's call did, measured in the value worker below the Python the student's code can patch.

Taken before any cell has run: torch's profiler, tracemalloc, an audit hook and thread hooks (work out of
their sight, or instruments the call switched off, make the measurement not ``intact``: the checker refuses
it), the course's tripwires and a walk of what a Function's ctx keeps. What each sees, and the limits:
docs/grading.md, "What the worker measures". It runs where ``autograder`` is hidden (loaded by its path beside
valueworker.py) and imports nothing of it; of the course, the tripwires, the token recorder and the sanitizer (with
Triton's interpreter, which it hooks), at start-up.
"""

from __future__ import annotations

import array
import contextlib
import json
import math
import sys
import time
import types

ENGINE_PREFIX = "autograd::engine::evaluate_function: "
MAX_OPS = 200  # distinct op names reported per call
MAX_ALLOCATIONS = 64  # the largest allocations reported per call
MAX_KEPT = 64  # tensors and arrays reported from one ctx
MAX_FOLLOWED = 1024  # distinct allocations reported by a call's token rows (more: the report is not complete)
MAX_SANITIZED = 8  # course.sanitizer's findings reported per call: a check raises the first
MAX_WALKED = 4  # launches per call whose loads are reported, when the checker asks (Launch.loads)
# What course.sanitizer replaces on Triton's interpreter (its hooks), by class: a cell that puts anything else there
# makes the sanitizer's report not intact.
SANITIZER_HOOKS = {"InterpreterBuilder": ("create_masked_load", "create_masked_store", "create_atomic_load",
                                          "create_atomic_store", "create_atomic_rmw", "create_atomic_cas",
                                          "set_grid_idx"),
                   "GridExecutor": ("__call__", "_init_args_hst")}
WALK_NODES = 10_000  # objects visited walking one ctx
WALK_DEPTH = 6
# Work out of the instruments' sight: another thread or process, or memory from mmap (which neither torch's
# allocator nor tracemalloc sees).
_REFUSED_EVENTS = ("_thread.start_new_thread", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec",
                   "os.system", "subprocess.Popen", "mmap.__new__")
# What reaches objects the student's code was never handed — every object of the process (the instruments, the
# worker, the profiler's session), other threads' frames, a tracer that is handed every frame — ends the worker on
# the spot, at any time after start-up, cells included: the checker reads the exit status TAMPERED from outside and
# refuses the submission's reply (``tampering``). An audit hook runs before the operation and cannot be removed.
_FATAL_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                           "sys.settrace", "sys.setprofile"})
TAMPERED = 86  # the worker's exit status when it ended itself for one of them
# torch's switches of the profiler: while a call is measured, one of them ends the worker (TAMPERED); between calls
# they work (a student may profile a cell). A tripwire holds the original, so a call could still reach it: a session
# stopped, or stopped and started again, shows in the session's result (_Profiler.read).
_PROFILER_SWITCHES = ("_enable_profiler", "_disable_profiler", "_prepare_profiler", "_enable_profiler_legacy",
                      "_disable_profiler_legacy")
# Switches nothing but torch's own tests use, which would hide ops from a session without ending it: each ends the
# worker whenever it is called, and no reference to the original is kept anywhere.
_HIDDEN_SWITCHES = ("_enable_record_function", "_clear_callbacks")


class Instruments:
    """The worker's instruments, captured at start-up. ``None`` fields: not available in this torch."""

    def __init__(self):
        import _tracemalloc
        import os

        self._trace = (_tracemalloc.start, _tracemalloc.stop, _tracemalloc.is_tracing, _tracemalloc.reset_peak,
                       _tracemalloc.get_traced_memory)
        # Made after every (re)start of tracing: traced while tracing ran without a break. A call that stops and
        # restarts tracemalloc (its traces go with the stop) leaves it untraced.
        self._traceback_of = _tracemalloc._get_object_traceback
        self.sentinel = None
        self.profiler = _profiler()
        self.window: dict | None = None  # the traced memory of the call being measured (see measure)
        self.active = [False]  # a measured call is running: the audit hook refuses threads and processes
        self.refused: list[str] = []
        active, refused, exit_now = self.active, self.refused, os._exit
        self.fresh = _Fresh()
        ours = self.fresh.starting  # the thread the grader starts for each call: the one thread allowed

        def hook(event, args):
            if event in _FATAL_EVENTS:
                exit_now(TAMPERED)
            if active[0] and event.startswith(_REFUSED_EVENTS):
                if event == "_thread.start_new_thread" and args and ours[0] is not None and args[0] is ours[0]:
                    ours[0] = None
                    return
                refused.append(event)  # the measurement is then refused (intact false): nothing to stop here

        sys.addaudithook(hook)
        _watch_threads(active, refused)
        _trip_profiler_switches(active, exit_now)
        # The course's tripwires (course.delegation): every public helper of `course` raises while a measured
        # call runs, and the call's measurement names the ones it touched. Imported now, before any cell.
        try:
            import course.delegation as delegation

            self.helpers = delegation.pinned_forbid_helpers()
        except Exception:  # noqa: BLE001 — no course here: nothing of it to call
            self.helpers = lambda: contextlib.nullcontext([])
        # course.memory.TokenRecorder, the notebook's own instrument for which token rows a tensor came from, as it
        # is now (a cell that patched it later makes the report not intact), and the allocations' sizes of the
        # last measured call (each the profiler's, not sent: what a followed call is held to).
        self.follower = _Follower.capture()
        self.sizes: dict[int, int] = {}
        # course.sanitizer, its hooks on Triton's interpreter installed now, under the grid wrapper that pauses
        # tracemalloc; then both pinned: a cell that replaces, removes or wraps anything of them later is seen.
        _import_triton()
        self.sanitizer = _Sanitizer.capture()
        self._pause_triton()
        if self.sanitizer is not None:
            self.sanitizer.pin()

    def measure(self, fn, args=(), kwargs=None, *, kept_of=None, inputs=(), loads=False):
        """``(value, measurement)`` of ``fn(*args, **kwargs)``, run on a thread of its own (:class:`_Fresh`);
        what it raises carries its measurement (``_measured``).

        ``kept_of(value)``: the ctx of an ``autograd.Function`` the call applied to ``inputs``,
        whose kept and still-held memory are measured too. ``loads``: the sanitizer's report holds what each
        program of the call's first launches loaded (the checker asked: a check reads the walk).
        """
        start, stop, tracing, reset_peak, traced = self._trace
        self._pause_triton()
        already = tracing()
        if not already:
            start(1)
        reset_peak()
        self.sentinel = bytearray(64)
        self.window = {"base": traced()[0], "carried": 0, "best": 0}
        session = self.profiler.begin() if self.profiler else None
        before, after = self.profiler.steps(session) if session else ([], [])
        ran, delegated, sanitized = self._run(fn, args, kwargs, before, after, loads)
        m, net = self._finish(session, ran.after, already, delegated)
        m["sanitized"] = self._sanitized(sanitized)  # read once tracing has stopped: none of it is the call's memory
        value = _returned(ran, m)
        if kept_of is not None:
            node = kept_of(value)
            m["kept"] = kept(node)
            # torch memory the call allocated and still holds, beyond what it returned and saved for the backward
            # (reported on their own): a tensor kept anywhere else — a global, a closure — is in here.
            m["held"] += max(0, net - _storage_bytes(value, saved_tensors(node), exclude=inputs))
        return value, m

    def bare(self, fn, args=(), kwargs=None, loads=False):
        """``(value, measurement)`` of ``fn(*args, **kwargs)`` (on a thread of its own) with the course's tripwires
        and the audit hook only: a call whose memory the checker counts from outside (autograder/pages.py), where
        tracemalloc's and the profiler's own memory would stand above an honest call's."""
        ran, delegated, sanitized = self._run(fn, args, kwargs, loads=loads)
        m = {"allocations": [], "ops": {}, "engine": [], "peak": 0, "held": 0, "profiled": False,
             "delegated": list(delegated)[:20], "intact": not self.refused, "sanitized": self._sanitized(sanitized)}
        return _returned(ran, m), m

    def _run(self, fn, args, kwargs, before=(), after=(), loads=False):
        """``(ran, helpers touched, what the sanitizer recorded)``: ``fn`` on a thread of its own (:class:`_Fresh`),
        the course's tripwires armed, every interpreted launch recorded by the sanitizer (:meth:`_sanitized` reads it)."""
        del self.refused[:]
        delegated: list[str] = []
        self.active[0] = True
        recording = self.sanitizer.recording(loads) if self.sanitizer is not None else contextlib.nullcontext()
        try:
            with recording as sanitized, self.helpers() as delegated:
                ran = self.fresh.run(fn, args, kwargs or {}, before, after)
        finally:
            self.active[0] = False
        return ran, delegated, sanitized

    def _sanitized(self, recorded) -> dict:
        """``{"intact", "findings"}``: the sanitizer's findings in the call's launches (``Finding.record()``, at most
        :data:`MAX_SANITIZED`), and whether its hooks stayed in place; ``"loads"`` too where they were asked for.
        Without Triton or the course nothing can launch a kernel here: intact, nothing found."""
        if self.sanitizer is None:
            return {"intact": True, "findings": []}
        return self.sanitizer.read(recorded)

    def follow(self, call, queries: list, keys: list, ignore) -> dict:
        """``{"intact", "complete", "allocations"}``: which token rows each allocation of ``call()`` came from, the
        call made once more under ``course.memory.TokenRecorder`` right after :meth:`measure` measured it without
        one (the recorder's own tensors would count in the profiler's sizes). What is reported, and what makes it
        not ``intact`` (the checker refuses it): docs/grading.md, "What the worker measures", the token rows.
        """
        broken = {"intact": False, "complete": False, "allocations": []}
        follower = self.follower
        if follower is None:
            return broken
        sizes = dict(self.sizes)
        try:
            rec = follower.cls(queries, keys, ignore=ignore)
        except Exception:  # noqa: BLE001 — the recorder itself patched to raise
            return broken
        del self.refused[:]
        self.active[0] = True
        innermost = False
        try:
            with self.helpers(), rec:
                out = call()
                innermost = follower.innermost(rec)
        except BaseException:  # noqa: BLE001 — it returned the first time: raising now is working otherwise
            return broken
        finally:
            self.active[0] = False
        intact = innermost and not self.refused and follower.unchanged()
        seen: dict[int, int] = {}  # bytes -> allocations of that size, as the profiler's sizes count them
        for a in rec.allocations:
            if a.nbytes:
                seen[a.nbytes] = seen.get(a.nbytes, 0) + 1
        intact = intact and all(n <= sizes.get(nbytes, 0) for nbytes, n in seen.items())
        try:
            report = follower.report(rec, out)
        except Exception:  # noqa: BLE001 — what it returned cannot be walked
            return broken
        return {"intact": bool(intact), "complete": len(report) <= MAX_FOLLOWED, "allocations": report[:MAX_FOLLOWED]}

    def _finish(self, session, after: list, already: bool, delegated: list) -> tuple[dict, int]:
        stop, tracing = self._trace[1], self._trace[2]
        self.active[0] = False
        w, self.window = self.window, None
        traced_now = tracing() and self._traceback_of(self.sentinel) is not None  # traced without a break
        if traced_now:
            self._close_segment(w)  # before the profiler's events become Python objects
        if not already:
            stop()
        events, profiled = self.profiler.read(session, after) if self.profiler else ([], False)
        m = summarize(events)
        net = m.pop("net")
        self.sizes = m.pop("sizes")
        m.update(peak=w["best"], held=max(0, w["carried"]), profiled=profiled, delegated=list(delegated)[:20],
                 intact=bool(traced_now and (profiled or self.profiler is None) and not self.refused))
        return m, net

    # -- Triton's interpreter ------------------------------------------------------

    def _close_segment(self, w: dict) -> None:
        """Fold the traced memory since the last (re)start into the window: its peak, and what is live now."""
        current, peak = self._trace[4]()
        w["best"] = max(w["best"], w["carried"] + peak - w["base"])
        w["carried"] += current - w["base"]

    def _pause_triton(self) -> None:
        """Stop tracing while Triton's interpreter runs a grid (its tiles are NumPy on a CPU, on chip on a GPU).

        What the host code holds across the grid still counts.
        """
        module = sys.modules.get("triton.runtime.interpreter")
        executor = getattr(module, "GridExecutor", None)
        if executor is None or getattr(executor.__call__, "_measured", False):
            return
        original, instruments = executor.__call__, self
        start, stop, tracing, reset_peak, traced = self._trace

        def __call__(grid_self, *args, **kwargs):
            w = instruments.window
            if w is None or not tracing():
                instruments._launching()
                return original(grid_self, *args, **kwargs)
            instruments._close_segment(w)
            stop()
            try:
                instruments._launching()
                return original(grid_self, *args, **kwargs)
            finally:
                if instruments.window is w:
                    start(1)
                    instruments.sentinel = bytearray(64)
                    w["base"] = traced()[0]
                    reset_peak()

        __call__._measured = True
        executor.__call__ = __call__

    def _launching(self) -> None:
        """As a grid starts during a measured call: are the sanitizer's hooks in place (a call that takes them off
        for its launch and puts them back before it returns is seen here)? Untraced: none of it is the call's memory."""
        if self.active[0] and self.sanitizer is not None:
            self.sanitizer.check()


class _Follower:
    """``course.memory.TokenRecorder`` as it was at start-up, with what tells whether it has been patched since."""

    def __init__(self, memory, torch):
        self.memory, self.cls = memory, memory.TokenRecorder
        self.tensors_in, self.storage_key = memory.tensors_in, memory.storage_key
        self._depth, self._mode_at = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at
        self._snapshot = self._state()

    @classmethod
    def capture(cls) -> _Follower | None:
        try:
            import torch

            import course.memory as memory

            with contextlib.suppress(Exception):  # the tripwires' trampolines first: they are not a patch
                import course.delegation

                course.delegation.install()
            return cls(memory, torch)
        except Exception:  # noqa: BLE001 — no course here, or a torch without these: no rows are followed
            return None

    def _state(self) -> list:
        """Every name of course.memory and every attribute of the recorder's classes (:func:`_namespaces`)."""
        return _namespaces([vars(self.memory), *(vars(c) for c in self.cls.__mro__ if c is not object)])

    def unchanged(self) -> bool:
        return _same(self._state(), self._snapshot)

    def innermost(self, rec) -> bool:
        n = self._depth()
        return n > 0 and self._mode_at(n - 1) is rec

    def report(self, rec, out) -> list[list]:
        returned = {self.storage_key(t) for t in self.tensors_in(out, 2)}
        rows, seen = [], set()
        for a, (nq, nk), key in zip(rec.allocations, rec.spans, rec.keys):
            row = [str(a.op)[:100], [int(x) for x in a.shape], int(a.numel), int(a.nbytes),
                   str(a.dtype).removeprefix("torch."), bool(a.factory), int(nq), int(nk), key in returned]
            token = repr(row)
            if token not in seen:
                seen.add(token)
                rows.append(row)
                if len(rows) > MAX_FOLLOWED:
                    break
        return rows


def _namespaces(spaces: list[dict], shallow: tuple[str, ...] = (), closures: bool = False) -> list:
    """``(name, value, extra)`` for every name of each namespace: with the code and defaults of each function (and,
    with ``closures``, what its closure holds) and the contents of each set, dict and list but those named in
    ``shallow`` (lists whose contents change as they are used: their identity only). :func:`_same` compares two."""
    out = []
    for space in spaces:
        for name, value in list(space.items()):
            # IPython adds its own names to __builtins__ when its shell starts; a warning raised from a module's code
            # gives it a __warningregistry__, whatever the filters say.
            if name in ("__builtins__", "__warningregistry__"):
                continue
            inner = getattr(value, "__func__", value)
            extra = (getattr(inner, "__code__", None), getattr(inner, "__defaults__", None))
            if closures:
                extra += (_closure(inner),)
            if isinstance(value, (set, frozenset, dict, list)) and name not in shallow:
                extra = (repr(sorted(map(repr, value))),)
            out.append((name, value, extra))
    return out


def _closure(fn) -> tuple:
    """What each cell of ``fn``'s closure holds (a cell can be assigned to: ``fn.__closure__[0].cell_contents = x``)."""
    out = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            out.append(_Same(cell.cell_contents))
        except ValueError:  # an empty cell
            out.append(None)
    return tuple(out)


class _Same:
    """An object compared by identity (a closure's contents may be anything: an array's ``==`` is no bool)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    __hash__ = None


def _same(now: list, then: list) -> bool:
    """Two :func:`_namespaces` states hold the same names, bound to the same objects, with the same code and contents."""
    return len(now) == len(then) and all(a[0] == b[0] and a[1] is b[1] and a[2] == b[2] for a, b in zip(now, then))


def _plain(value):
    """A NumPy scalar as the Python number it holds; anything else as its text."""
    return value.item() if hasattr(value, "item") and hasattr(value, "dtype") else str(value)


def _import_triton() -> None:
    """Triton and its interpreter, imported at start-up where they are installed (0.17 s after torch and the course on
    this project's idle machine, 0.3 s under a load of 4; a kernel's notebook imports it anyway): the sanitizer's
    hooks go on the interpreter before any cell runs. Only once ``course`` is imported: it sets TRITON_INTERPRET,
    which triton.language reads as it is imported (autograder/sandbox.py, PRELOAD)."""
    if "course" not in sys.modules:
        return
    with contextlib.suppress(Exception):  # no Triton here: no kernel can launch, nothing to hook
        import triton.runtime.interpreter  # noqa: F401


class _Launches(list):
    """A report's list of launches, as the sanitizer's hook appends each when it ends: it copies the launch's
    findings aside at once (a call that empties the report or a launch's findings later is not heard), counts it,
    and drops what it recorded (kept for ``Report.plot``, which the worker never draws: a call that launches many
    grids holds one launch's record at a time)."""

    def __init__(self, loads_of=None):
        super().__init__()
        self._found: list = []
        self._count = [0]
        self.loads_of = loads_of  # Launch.loads, as at start-up, where the checker asked for the loads
        self._loads: list = []

    def append(self, launch) -> None:
        self._count[0] += 1
        with contextlib.suppress(AttributeError):
            self._found.extend(launch.findings[:MAX_SANITIZED])
            if self.loads_of is not None and len(self._loads) < MAX_WALKED:
                self._loads.append(_loads_or_none(self.loads_of, launch))
            launch._recording = None
        super().append(launch)


def _loads_or_none(loads_of, launch) -> dict | None:
    """``Launch.loads`` of ``launch``; None (not measured: the check reads no walk of it) when it has more runs than a
    report carries or its record cannot be read."""
    try:
        return loads_of(launch)
    except Exception:  # noqa: BLE001 — a record the sanitizer could not read back
        return None


class _Sanitizer:
    """``course.sanitizer`` with its hooks on Triton's interpreter, as they were at start-up (:meth:`pin`), and what
    tells whether a cell or a call has replaced, removed or bypassed them since: not ``intact``, refused by the
    checker (``tampering``). What is compared: docs/grading.md, "What the worker measures", the sanitizer."""

    def __init__(self, module, interpreter, record):
        self.module, self.interpreter, self.record = module, interpreter, record
        self.recorders, self.current, self.new_report = module._recorders, module._current, module.Report
        self.loads_of = module.Launch.loads
        self.classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
        self._snapshot: list = []
        self.bypassed = [False]  # a grid of the call being recorded started with the hooks not in place
        self.launched = [0]  # grids the grader's wrapper saw start during the call being recorded

    @classmethod
    def capture(cls) -> _Sanitizer | None:
        try:
            from triton.runtime import interpreter

            import course.delegation
            import course.sanitizer as module

            course.delegation.install()  # the tripwires' trampolines first: they are not a patch
            module._install()
            if not module._installed:
                return None
            key = f"{module.__name__}.Finding.record"
            # The untouched function, not the tripwire's trampoline (which looks it up anew on each call).
            record = course.delegation.original(key) if key in course.delegation.guarded() else module.Finding.record
            return cls(module, interpreter, record)
        except Exception:  # noqa: BLE001 — no course or no Triton here: nothing launches, nothing to record
            return None

    def _state(self) -> list:
        """This module's names and its classes' attributes, the interpreter's hooked attributes (what each hook's
        closure holds too) and the names its launches go through."""
        i = self.interpreter
        hooks = {f"{c}.{n}": getattr(getattr(i, c, None), n, None) for c, names in SANITIZER_HOOKS.items() for n in names}
        builder = getattr(i, "interpreter_builder", None)
        semantic = getattr(i, "interpreter_semantic", None)
        through = {"InterpreterBuilder": getattr(i, "InterpreterBuilder", None), "GridExecutor": getattr(i, "GridExecutor", None),
                   "interpreter_builder": builder, "interpreter_semantic": semantic,
                   "semantic.builder": getattr(semantic, "builder", None),
                   # A method set on the builder itself hides the class's hook.
                   "builder's own": any(n in getattr(builder, "__dict__", {}) for n in SANITIZER_HOOKS["InterpreterBuilder"])}
        spaces = [vars(self.module), *(vars(c) for c in self.classes), hooks, through, {"record": self.record}]
        return _namespaces(spaces, shallow=("_recorders", "_current"), closures=True)

    def pin(self) -> None:
        self._snapshot = self._state()

    def unchanged(self) -> bool:
        try:
            return _same(self._state(), self._snapshot)
        except Exception:  # noqa: BLE001 — an attribute patched to raise when read
            return False

    def check(self) -> None:
        """As a grid of a measured call starts: counted, and the hooks compared with start-up's."""
        self.launched[0] += 1
        if not self.unchanged():
            self.bypassed[0] = True

    @contextlib.contextmanager
    def recording(self, loads: bool = False):
        """Record every interpreted launch in the block: yields ``(launches, ok)``, ``ok[0]`` false once the report
        was taken out of the sanitizer's list, a launch was left open (a call that unhooked it for a while), or a grid
        started that the report never heard of. ``loads``: keep what each program of the first launches loaded."""
        report, launches, ok = self.new_report(), _Launches(self.loads_of if loads else None), [True]
        report.launches = launches
        self.bypassed[0], self.launched[0] = False, 0
        self.recorders.append(report)
        try:
            yield launches, ok
        finally:
            kept = [r for r in self.recorders if r is not report]
            ok[0] = (len(kept) == len(self.recorders) - 1 and not self.current
                     and launches._count[0] == self.launched[0])
            self.recorders[:] = kept
            del self.current[:]

    def read(self, recorded) -> dict:
        """``{"intact", "findings"}`` of a :meth:`recording`."""
        launches, ok = recorded
        intact = ok[0] and not self.bypassed[0] and self.unchanged()
        try:
            found = launches._found[:MAX_SANITIZED]
            # Plain JSON (a NumPy integer would not cross the wire).
            records = json.loads(json.dumps([self.record(f) for f in found], default=_plain))
            walked = {"loads": json.loads(json.dumps(launches._loads, default=_plain))} if launches.loads_of else {}
            return {"intact": bool(intact), "findings": records, **walked}
        except Exception:  # noqa: BLE001 — a launch or finding that is not the sanitizer's
            return {"intact": False, "findings": []}


def _returned(ran, measurement: dict):
    """What a measured call returned; what it raised, raised again carrying ``measurement`` (``_measured``)."""
    if ran.raised is not None:
        with contextlib.suppress(AttributeError):  # an exception type without a __dict__: its measurement is lost with it
            ran.raised._measured = measurement
        raise ran.raised
    return ran.value


def _watch_threads(active: list, refused: list) -> None:
    """Record a thread started during a measured call (no audit event for it before 3.13): every name
    ``_thread`` and ``threading`` start threads by is replaced by one that records, then starts it."""
    import _thread
    import threading

    for module, names in ((_thread, ("start_new_thread", "start_new", "start_joinable_thread")),
                          (threading, ("_start_new_thread", "_start_joinable_thread"))):
        for name in names:
            original = getattr(module, name, None)
            if original is None:
                continue

            def recording(*args, _original=original, **kwargs):
                if active[0]:
                    refused.append("thread")
                return _original(*args, **kwargs)

            setattr(module, name, recording)


class _Profiler:
    """torch's profiler, by its own C functions: each session runs on the call's own thread (its state is the
    thread's), started and stopped there by the steps of :meth:`steps`."""

    def __init__(self, prepare, enable, disable, enabled, config, activities, mark):
        self.prepare, self.enable, self.disable, self.enabled = prepare, enable, disable, enabled
        self.config, self.activities, self.mark = config, activities, mark

    def begin(self) -> int | None:
        """Prepare a session; its mark (a number of bytes drawn now), or None when none can start."""
        import os

        if self.enabled():
            return None  # someone else's session is on: this call cannot be measured
        self.prepare(self.config, self.activities)
        return 4096 + int.from_bytes(os.urandom(3), "big")

    def steps(self, mark: int) -> tuple[list, list]:
        """What the call's thread runs before the call (start the session, then allocate ``mark`` bytes: the
        session's first event) and after it (stop the session: its result)."""
        return [(self.enable, (self.config, self.activities)), (self.mark, (mark,))], [(self.disable, ())]

    def read(self, mark: int | None, after: list) -> tuple[list, bool]:
        """The session's events, the mark left out, and whether it ran from start to end: a session the call
        stopped ends in an error, one it stopped and started again has lost the mark of its start."""
        if not mark or not after or isinstance(after[0], BaseException):
            return [], False
        try:
            events = [(e.name(), e.nbytes()) for e in after[0].events()]
        except Exception:  # noqa: BLE001 — not a session's result
            return [], False
        at = next((i for i, (name, nbytes) in enumerate(events) if name == "[memory]" and nbytes == mark), None)
        if at is None:
            return [], False
        return events[:at] + events[at + 1:], True


class _Ran:
    """What :meth:`_Fresh.run` saw: the call's value or what it raised, and the results of the steps after it."""

    def __init__(self):
        self.value, self.raised, self.after = None, None, []


class _Fresh:
    """Runs each measured call on a thread of its own, started by C with the student's function as its first
    Python frame: below it there is no frame of the grader's to walk up to (``f_back`` is None), and the main
    thread's frames are out of reach (``sys._current_frames`` and gc end the worker). The steps before and after
    the call (the profiler's session, thread-local) are C functions chained by C (itertools), so they leave no
    frame either. What the call raises reaches ``sys.unraisablehook``, set to ours for the call, which runs the
    steps after it too."""

    def __init__(self):
        import _thread
        import ctypes
        import functools
        import itertools

        self._start, self._lock, self._count = _thread.start_new_thread, _thread.allocate_lock, _thread._count
        self._partial, self._chain, self._starmap = functools.partial, itertools.chain, itertools.starmap
        self.starting: list = [None]  # the callable of the thread being started (the audit hook lets it through)
        set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
        # A KeyboardInterrupt raised in the thread, as a kernel's interrupt raises one in a cell (signals reach the
        # main thread only).
        self._interrupt = lambda ident: set_async(ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt))

    def run(self, fn, args, kwargs: dict, before=(), after=(), timeout: float | None = None) -> _Ran:
        """``fn(*args, **kwargs)`` between ``before`` and ``after`` (C callables and their arguments), on a thread of
        its own; after ``timeout`` seconds, a KeyboardInterrupt in that thread (once: code that swallows it runs on
        until the checker's deadline ends the worker)."""
        ran, out, started, done = _Ran(), [], self._lock(), self._lock()
        started.acquire()
        done.acquire()
        steps = [*before, (self._partial(fn, *args, **kwargs), ()), *after]
        # The thread releases ``started`` first: only then does it count among the live threads (the interpreter
        # counts a thread once it runs, which on a loaded machine can be long after it was started).
        chain = self._chain(self._starmap(started.release, [()]), *[self._starmap(f, [a]) for f, a in steps],
                            self._starmap(done.release, [()]))

        def unraisable(u):  # in the call's thread, once the student's frames are gone
            ran.raised = u.exc_value
            for f, a in after:
                try:
                    ran.after.append(f(*a))
                except BaseException as exc:  # noqa: BLE001
                    ran.after.append(exc)
            done.release()

        saved, sys.unraisablehook = sys.unraisablehook, unraisable
        alive = self._count()
        try:
            self.starting[0] = out.extend
            ident = self._start(out.extend, (chain,))
            interrupt_at = None if timeout is None else time.monotonic() + timeout
            running = False
            while not done.acquire(timeout=0.05):
                running = running or started.acquire(blocking=False)
                if running and interrupt_at is not None and time.monotonic() >= interrupt_at:
                    self._interrupt(ident)
                    interrupt_at = None
                if running and self._count() <= alive and not done.acquire(timeout=0.05):
                    break  # the thread ended without a word: SystemExit, or our hook replaced
        finally:
            self.starting[0] = None
            sys.unraisablehook = saved
        if ran.raised is None:
            if len(out) != len(steps) + 2:  # started, the steps, done
                ran.raised = SystemExit("the student's code ended its call without returning or raising")
            else:
                ran.value = out[1 + len(before)]
                ran.after = out[2 + len(before):1 + len(steps)]
        return ran


def _profiler() -> _Profiler | None:
    """The profiler's own C functions and a CPU configuration with memory profiling; None where torch has none."""
    try:
        import functools
        import inspect

        import torch
        from torch._C import _autograd
        from torch.autograd.profiler import profile

        cpu_only = {"use_cuda": False} if "use_cuda" in inspect.signature(profile.__init__).parameters else {}
        p = profile(profile_memory=True, **cpu_only)
        try:
            config = p.config(create_trace_id=True)
        except TypeError:  # torch before trace ids
            config = p.config()
        mark = functools.partial(torch.empty, dtype=torch.uint8)  # C: an allocation of a number of bytes drawn per call
        return _Profiler(_autograd._prepare_profiler, _autograd._enable_profiler, _autograd._disable_profiler,
                         _autograd._profiler_enabled, config, p.kineto_activities, mark)
    except Exception:  # noqa: BLE001 — an older or newer torch without these: measured by tracemalloc only
        return None


def _trip_profiler_switches(active: list, exit_now) -> None:
    """Put a tripwire in place of each of torch's :data:`_PROFILER_SWITCHES` and :data:`_HIDDEN_SWITCHES`, wherever
    a loaded module holds it (``torch._C._autograd``, ``torch.autograd``, ...)."""
    try:
        from torch._C import _autograd
    except Exception:  # noqa: BLE001 — no torch: nothing to switch
        return
    wires = {}
    for name in _PROFILER_SWITCHES + _HIDDEN_SWITCHES:
        original = getattr(_autograd, name, None)
        if original is None:
            continue
        if name in _HIDDEN_SWITCHES:
            def switch(*args, **kwargs):
                exit_now(TAMPERED)
        else:
            def switch(*args, _original=original, **kwargs):
                if active[0]:
                    exit_now(TAMPERED)
                return _original(*args, **kwargs)
        switch.__name__ = name
        wires[id(original)] = (original, switch)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            wire = wires.get(id(value))
            if wire is not None and value is wire[0]:
                namespace[key] = wire[1]


def summarize(events: list[tuple[str, int]]) -> dict:
    """The profiler's events as the checker reads them: allocations (bytes, largest first), aten ops, engine nodes."""
    allocations, ops, engine, net, sizes = [], {}, [], 0, {}
    for name, nbytes in events:
        if name == "[memory]":
            net += int(nbytes)  # an allocation, or (negative) a free
            if nbytes > 0:
                allocations.append(int(nbytes))
                sizes[int(nbytes)] = sizes.get(int(nbytes), 0) + 1
        elif name.startswith(ENGINE_PREFIX):
            if len(engine) < MAX_OPS:
                engine.append(name[len(ENGINE_PREFIX):][:100])
        elif name.startswith("aten::"):
            key = "aten." + name[6:100]
            if key in ops or len(ops) < MAX_OPS:
                ops[key] = ops.get(key, 0) + 1
    allocations.sort(reverse=True)
    return {"allocations": allocations[:MAX_ALLOCATIONS], "ops": ops, "engine": engine, "net": net, "sizes": sizes}


def kept(ctx) -> list[list]:
    """``[path, shape, kind]`` of every tensor, array and large bytes object reachable from ``ctx``, largest first.

    Through containers and any object's ``__dict__`` and ``__slots__``, :data:`WALK_DEPTH` deep, :data:`WALK_NODES` objects.
    """
    import torch

    found, seen, budget = [], set(), [WALK_NODES]

    def walk(obj, path: str, depth: int):
        if budget[0] <= 0 or id(obj) in seen or depth > WALK_DEPTH:
            return
        budget[0] -= 1
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append([path, [int(s) for s in obj.shape], "tensor"])
            return
        if type(obj).__module__.split(".")[0] == "numpy" and hasattr(obj, "nbytes") and hasattr(obj, "shape"):
            found.append([path, [int(s) for s in obj.shape], "array"])
            return
        if isinstance(obj, (bytes, bytearray, memoryview, array.array)):
            if len(obj) >= 1024:
                found.append([path, [memoryview(obj).nbytes], "bytes"])
            return
        if isinstance(obj, _LEAVES):
            return
        if isinstance(obj, dict):
            for k, v in list(obj.items())[:1000]:
                walk(v, f"{path}[{str(k)[:30]!r}]", depth + 1)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for i, v in enumerate(list(obj)[:1000]):
                walk(v, f"{path}[{i}]", depth + 1)
        else:
            for name, v in _attributes(obj):
                walk(v, f"{path}.{name}" if path else name, depth + 1)

    for name, v in _attributes(ctx):
        walk(v, name, 1)
    found.sort(key=lambda item: -math.prod(item[1]))
    return found[:MAX_KEPT]


_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, types.ModuleType, types.FunctionType,
           types.BuiltinFunctionType, types.MethodType)


def saved_tensors(node) -> tuple:
    try:
        return tuple(node.saved_tensors) if node is not None else ()
    except RuntimeError:  # already freed, or none
        return ()


def _storage_bytes(*values, exclude=()) -> int:
    """Bytes of the distinct storages of the tensors in ``values``, leaving out those of ``exclude``'s tensors."""
    import torch

    def storages(value, depth=0):
        if isinstance(value, torch.Tensor):
            yield value.untyped_storage()
        elif isinstance(value, (list, tuple)) and depth < 4:
            for item in value:
                yield from storages(item, depth + 1)

    skip = {s.data_ptr() for s in storages(exclude)}
    seen = {}
    for value in values:
        for s in storages(value):
            if s.data_ptr() not in skip:
                seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def _attributes(obj) -> list[tuple[str, object]]:
    out = []
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        out += [(str(k)[:60], v) for k, v in list(d.items())[:1000]]
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()) if isinstance(getattr(cls, "__slots__", ()), (tuple, list)) else ():
            with contextlib.suppress(Exception):  # an empty slot, or a descriptor that raises
                out.append((str(name)[:60], object.__getattribute__(obj, name)))
    return out


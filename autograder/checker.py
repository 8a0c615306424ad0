"""The hidden checks, run where the student's code cannot reach them.

This process (the checker) runs ``autograder.check.<function>(proxy)``, where ``proxy`` stands for the
student's object in the value worker, and :meth:`Channel.witness` hands the worker's measurement of each
call to the checks' own instruments (``course.witness``). Long form, and how the checker guards itself:
docs/grading.md, "The hidden checks, in the trusted checker" and "The checker guards itself".

Run as ``python -m autograder.checker JOB.json``; writes the JSON results file the job
names: per test cell ``{"status": "ok", "passed": bool, "cls": ..., "message": ...}`` (a failure's
``record`` too, ``GradingFailure.record()``, and ``cell_error``, what a cell before it raised here), or
``status`` ``timeout`` / ``died`` (the worker) / ``refused`` (its reply) / ``no-start`` / ``no-worker`` /
``checker-error``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import socket
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

from course import witness
from course.remote import Proxies, Remote
from course.sanitizer import read_loads, read_record

from . import sandbox
from .pages import PageCounter
from .wire import REFUSALS, WORKER_LIMITS, WireError, decode, encode, is_count, receive, send, tensors_in
from .worker_instruments import MAX_FOLLOWED, MAX_SANITIZED, MAX_WALKED, TAMPERED

VALUEWORKER = Path(__file__).with_name("valueworker.py")
# What the worker loads beside it (written there with it where the sandbox has its own root).
BESIDE = [Path(__file__).with_name(name) for name in ("wire.py", "worker_instruments.py")]

_MISSING = object()  # a name the worker does not have; what a request that runs no student code measured


class WorkerTimeout(BaseException):
    """The worker gave no reply in time. A BaseException: no check's ``except Exception`` may absorb it."""


class WorkerDied(BaseException):
    """The worker's pipe closed, or the worker could not be written to."""


class ReplyRefused(BaseException):
    """The worker's reply broke the wire format, its limits or the protocol's order (``str()``: how). A BaseException too."""


# ---------------------------------------------------------------------------
# The channel to the worker


class Channel(Proxies):
    """The checker's end of the two pipes to one worker: numbered frames, checked replies.

    A reply must answer the (innermost) request in flight and come after every frame already
    read; anything else raises ReplyRefused and *breaks* the channel (the pipe is out of step,
    so nothing more is read from it; :func:`run` starts a fresh worker for the next exercise).
    """

    _side = "student"
    _fair_name = staticmethod(lambda name: name.isprintable() and 0 < len(name) <= 100)

    def __init__(self, lifeline: socket.socket, to_worker: int, from_worker: int):
        super().__init__()
        self.lifeline, self.wfd, self.rfd = lifeline, to_worker, from_worker
        self.sent = 0  # the number of the last frame sent to the worker
        self.seen = 0  # the number of the last frame received from it
        self.broken: str | None = None  # why the pipe is out of step, once it is
        self.measurement: witness.Measurement | None = None  # the worker's measurement of the last call
        self.pages = PageCounter(None)  # the worker's sandbox, once start_worker knows its init
        self.profiled = False  # the worker has torch's profiler: every measured call must bring a whole session

    # -- encoding -----------------------------------------------------------

    def _as_ref(self, obj):
        if isinstance(obj, Remote):
            return {"__ref__": obj._info["__ref__"]}
        if isinstance(obj, type) and getattr(obj, "__module__", "") == "student":
            return {"__ref__": obj._remote_ref}
        if callable(obj):
            return self._callback(obj)
        raise TypeError(f"cannot send a {type(obj).__name__} to the worker")

    def _enc(self, value):
        return encode(value, self._as_ref)

    def _proxy(self, marker: dict):
        rid = marker.get("__ref__")
        if not (isinstance(rid, int) and not isinstance(rid, bool)):
            raise WireError("malformed", "a marker that is not a reference to a worker object")
        return super()._proxy(marker)

    def _dec(self, value):
        """A reply's value, decoded; what :func:`decode` refuses breaks the channel like a refused frame."""
        try:
            return decode(value, self._proxy)
        except WireError as exc:
            raise self._refuse(str(exc)) from None

    def exit_status(self, wait: float = 2.0) -> int | None:
        """How the worker's sandbox ended, as its zygote handler tells it on the lifeline; None if not said in time."""
        deadline = time.monotonic() + wait
        with contextlib.suppress(OSError, EOFError, ValueError):
            while (left := deadline - time.monotonic()) > 0 and select.select([self.lifeline], [], [], left)[0]:
                msg = sandbox.recv_msg(self.lifeline)
                if isinstance(msg, dict) and msg.get("event") == "exit":
                    code = msg.get("code")
                    return code if isinstance(code, int) else None
        return None

    def _refuse(self, why: str) -> ReplyRefused:
        self.broken = self.broken or why
        return ReplyRefused(why)

    # -- frames ---------------------------------------------------------------

    def _send(self, message: dict, re: int = 0) -> int:
        if self.broken:
            raise ReplyRefused(self.broken)
        self.sent += 1
        try:
            send(self.wfd, message, self.sent, re, limits=WORKER_LIMITS)
        except OSError as exc:
            self.broken = "the worker's pipe is closed"
            raise WorkerDied(f"cannot write to the worker: {exc}") from None
        return self.sent

    def _receive(self) -> tuple[dict, int, int]:
        """One frame from the worker, checked: ``(message, n, re)``."""
        if self.broken:
            raise ReplyRefused(self.broken)
        try:
            message, n, re = receive(self.rfd, self.deadline)
        except TimeoutError:
            self.broken = "no reply before the deadline"
            raise WorkerTimeout() from None
        except WireError as exc:
            raise self._refuse(str(exc)) from None
        except (EOFError, OSError) as exc:
            self.broken = "the worker's pipe is closed"
            if self.exit_status() == TAMPERED:  # it ended itself on the spot (worker_instruments._FATAL_EVENTS)
                raise self._refuse(REFUSALS["ended"]) from None
            raise WorkerDied(f"{type(exc).__name__}: {str(exc)[:300]}") from None
        except MemoryError:
            raise self._refuse("the reply did not fit in the checker's memory limit") from None
        except Exception:  # noqa: BLE001 — whatever else a frame did to the reader: not a frame of ours
            raise self._refuse(REFUSALS["malformed"]) from None
        if not (isinstance(message, dict) and isinstance(message.get("op"), str)):
            raise self._malformed("a frame that is not a message")
        if n <= self.seen:
            raise self._refuse(REFUSALS["out-of-step"] + " (a frame numbered before one already read)")
        self.seen = n
        return message, n, re

    # -- requests -------------------------------------------------------------

    def _exchange(self, message: dict, measured=_MISSING) -> dict:
        """Send a request; answer the worker's callbacks until its reply comes; return the reply (or raise).

        Out of sight of the checks' dispatch modes (they would count this side's copies); the worker's
        measurement of a request that runs student code (``measured``: what was sent) goes to :meth:`witness`.
        For a call made for that count (``bare``), the OS kernel counts the pages the worker's processes touch
        (autograder/pages.py) from the request to its reply, where nothing the student's code does can reset or
        hide the count. Only there: each count costs milliseconds (a walk of the worker's pages).
        """
        with _disable_current_modes():
            counting = measured is not _MISSING and message.get("bare") is True and self.pages.begin()
            n = self._send(message)
            try:
                while True:
                    reply, m, re = self._receive()
                    if re != n:
                        raise self._refuse(REFUSALS["out-of-step"])
                    op = reply["op"]
                    if op == "callback":
                        self._run_callback(reply, m)
                    elif op in ("result", "raise", "refused"):
                        break
                    else:
                        raise self._malformed("a reply of no known kind")
            except BaseException:
                # Cut short between the request and its reply (a refused frame, a timeout, a check's own
                # exception inside a callback): whatever the worker sends next answers nothing in flight.
                self.broken = self.broken or "an exchange with the worker was cut short"
                raise
            touched = self.pages.end() if counting else None
            if counting and touched is None:  # a process of the sandbox ended meanwhile, taking its count with it
                raise self._refuse(REFUSALS["measurement"])
            if measured is not _MISSING and (op == "result" or reply.get("measured") is not None):
                # A call that raised reports what it touched too (a course helper); one asked to follow token rows
                # (``"follow"``), the rows each allocation came from, when it returned.
                self.witness(reply, measured, followed="follow" in message and op == "result", touched=touched,
                             bare=message.get("bare") is True, loads=message.get("loads") is True)
            if op == "raise":
                raise self._rebuild(reply.get("chain"), "student")
            if op == "refused":  # the worker stopped its own reply at the limits (encode counts as it walks)
                limit = reply.get("limit")
                limit = limit if isinstance(limit, str) and limit in REFUSALS else "malformed"
                raise ReplyRefused(f"{REFUSALS[limit]} (stopped in the worker)")
            return reply

    def _describe(self, info: dict) -> str:
        return f"<student {info['type']} {info['name']}>"

    @staticmethod
    def _leaf(t: torch.Tensor, requires_grad: bool) -> dict:
        return {"__t__": t.detach(), "rg": bool(requires_grad)}

    def _call(self, ref: int, args: tuple, kwargs: dict):
        sent_args, sent_kwargs = self._enc(args), self._enc(kwargs)
        request = {"op": "call", "ref": ref, "args": sent_args, "kwargs": sent_kwargs}
        sides = witness.followed()  # a check here follows token rows (course.memory.TokenRecorder): so does the worker
        if sides is not None:
            request["follow"] = [next((side for side, ts in enumerate(sides) if any(t is x for x in ts)), None)
                                 for t in tensors_in((args, kwargs))]
        if witness.counting_pages():  # a case made for the operating system's count: the worker measures nothing else
            request["bare"] = True
        if witness.loads_asked():  # a check reads the kernel's walk of its tiles: what each program loaded
            request["loads"] = True
        reply = self._exchange(request, measured=(args, kwargs))
        if not isinstance(reply.get("args_after") or [], list):
            raise self._malformed("what the call wrote into its arguments")
        return self._returned(reply, tensors_in((args, kwargs)))

    # -- what the worker measured ------------------------------------------------

    def witness(self, reply: dict, sent, followed: bool = False, touched: int | None = None,
                bare: bool = False, loads: bool = False) -> witness.Measurement:
        """Check the reply's measurement of the student's call and report it to the checks watching (course.witness).

        A reply without one, or one whose instruments the call switched off, is refused. ``followed``: the call
        was asked to follow token rows, so the measurement must hold them (:func:`followed_allocations`); one
        not asked must not. Every measurement holds the sanitizer's report (:func:`sanitized_findings`); ``loads``:
        the call was asked for what each program loaded, which that report holds then and only then
        (:func:`sanitized_loads`).
        """
        m = reply.get("measured")
        ints = lambda xs: isinstance(xs, list) and all(is_count(x) for x in xs)  # noqa: E731
        ok = (isinstance(m, dict) and ints(m.get("allocations")) and len(m["allocations"]) <= 64
              and isinstance(m.get("ops"), dict) and len(m["ops"]) <= 200
              and all(isinstance(k, str) and is_count(v) for k, v in m["ops"].items())
              and isinstance(m.get("engine"), list) and len(m["engine"]) <= 200
              and all(isinstance(e, str) for e in m["engine"])
              and is_count(m.get("peak")) and is_count(m.get("held")) and isinstance(m.get("intact"), bool)
              and isinstance(m.get("delegated"), list) and len(m["delegated"]) <= 20
              and all(isinstance(d, str) for d in m["delegated"]))
        if not ok:
            raise self._malformed("the measurement of a call")
        # Whole sessions of the profiler where the worker said at start-up it had one (a cell cannot unsay it).
        if not m["intact"] or (self.profiled and not bare and m.get("profiled") is not True):
            raise self._refuse(REFUSALS["measurement"])
        rows = None
        if followed or "followed" in m:
            rows = followed_allocations(m.get("followed")) if followed else None
            if rows is None:
                raise self._malformed("which token rows a call's allocations came from")
            if isinstance(rows, str):
                raise self._refuse(REFUSALS[rows])
        found = sanitized_findings(m.get("sanitized"))
        if found is None:
            raise self._malformed("the sanitizer's report of a call")
        if isinstance(found, str):
            raise self._refuse(REFUSALS[found])
        walked = sanitized_loads(m["sanitized"], loads)
        if walked is None:
            raise self._malformed("what each program of a call's kernels loaded")
        sizes = [t.element_size() for t in tensors_in(sent) if t.is_floating_point()]
        measurement = witness.Measurement(
            tuple(m["allocations"]), dict(m["ops"]), tuple(s[:100] for s in m["engine"]), m["peak"], m["held"],
            min(sizes, default=8), tuple(d[:100] for d in m["delegated"]), rows, touched, sanitized=found, loads=walked)
        self.measurement = measurement
        witness.report(measurement)
        return measurement

    def _kept(self, ctx, reply: dict) -> None:
        """What a Function's forward kept beyond its saved tensors, measured in the worker, on ``ctx`` as tensors without
        storage (shapes only), where a check of what the forward kept looks: what its ctx reaches (``box.P``,
        ``P (NumPy)``, bytes) and what it still held on return, in elements of the inputs' dtype. Checked like any
        frame: a bad entry refuses the reply.
        """
        measurement = self.measurement
        items = reply["measured"].get("kept", [])
        if not (isinstance(items, list) and len(items) <= 64):
            raise self._malformed("what a forward kept")
        out = []
        for item in items:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], list)
                    and len(item[1]) <= 16 and all(is_count(d) for d in item[1]) and item[2] in ("tensor", "array", "bytes")):
                raise self._malformed("what a forward kept")
            path, shape, kind = item[0][:200], tuple(item[1]), item[2]
            if kind == "bytes":
                shape = (measurement.elements(shape[0]),)
            out.append((path + {"tensor": "", "array": " (a NumPy array)", "bytes": " (bytes)"}[kind], shape))
        if measurement.held:
            out.append((witness.HELD, (measurement.elements(measurement.held),)))
        for path, shape in out:
            if not hasattr(ctx, path):
                setattr(ctx, path, torch.empty(shape, device="meta"))

    def _graph_of(self, reply: dict) -> dict | None:
        """The reply's description of the graph its result has in the worker, checked; None when it has none."""
        g = reply.get("graph")
        if g is None:
            return None
        ok = (isinstance(g, dict) and isinstance(g.get("handle"), int) and isinstance(g.get("n_leaves"), int)
              and isinstance(g.get("outputs"), list) and all(isinstance(t, torch.Tensor) for t in g["outputs"])
              and isinstance(g.get("classes", []), list) and all(isinstance(c, dict) for c in g.get("classes", [])))
        if not ok:
            raise self._malformed("the description of a graph")
        return g

    def _malformed(self, why: str) -> ReplyRefused:
        return self._refuse(REFUSALS["malformed"] + f" ({why})")


def followed_allocations(report) -> tuple[witness.Followed, ...] | str | None:
    """The worker's report of which token rows each allocation of a call came from
    (``worker_instruments.Instruments.follow``), checked entry by entry.

    Returns the allocations; a key of REFUSALS when the report is well formed but says its measurement cannot
    be trusted (``"following"``: not intact, or not complete); None when it is malformed. Either earns nothing.
    """
    if not (isinstance(report, dict) and set(report) == {"intact", "complete", "allocations"}
            and isinstance(report["intact"], bool) and isinstance(report["complete"], bool)
            and isinstance(report["allocations"], list) and len(report["allocations"]) <= MAX_FOLLOWED):
        return None
    out = []
    for item in report["allocations"]:
        if not (isinstance(item, list) and len(item) == 9):
            return None
        op, shape, numel, nbytes, dtype, factory, nq, nk, returned = item
        ok = (isinstance(op, str) and 0 < len(op) <= 100 and op.isprintable()
              and isinstance(shape, list) and len(shape) <= 64 and all(is_count(x) for x in shape)
              and is_count(numel) and is_count(nbytes) and isinstance(dtype, str) and dtype.isidentifier()
              and len(dtype) <= 30 and isinstance(getattr(torch, dtype, None), torch.dtype)
              and isinstance(factory, bool) and is_count(nq) and is_count(nk) and isinstance(returned, bool))
        if not ok:
            return None
        out.append(witness.Followed(op, tuple(shape), numel, nbytes, dtype, factory, nq, nk, returned))
    if not (report["intact"] and report["complete"]):
        return "following"
    return tuple(out)


_FINDING_KEYS = {"kind", "kernel", "tensor", "index", "programs", "sites", "ops", "count", "outside", "shape", "also"}
# What of a finding reaches the grader's sentence, from the worker: names (a kernel, its argument, the function of a
# line: an identifier, "<lambda>", or "?" where the sanitizer found none), the same element in other arguments
# ("y[0, 3]"), what an access did and where a stray address lies (the sanitizer's phrases: words, the argument's name,
# numbers and shapes). No quote, colon or line break: the line's code, the student's text, is never passed on.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}|<[a-z]{1,20}>|\?")
_ELEMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\[[0-9, \-]{0,200}\]")
_PHRASE = re.compile(r"[A-Za-z0-9_ (),.\-]{0,300}")


def sanitized_findings(report) -> tuple[dict, ...] | str | None:
    """The worker's sanitizer report of a call (``worker_instruments._Sanitizer.read``), checked entry by entry: each
    finding exactly as ``course.sanitizer.Finding.record`` writes one, every size bounded, its words the sanitizer's
    (:data:`_NAME`, :data:`_ELEMENT`, :data:`_PHRASE`), the code of its lines left out, and one the sanitizer itself
    reads back (``read_record``).

    Returns the findings; ``"sanitizer"`` (a key of REFUSALS) when the report is well formed but not intact (its hooks
    replaced or bypassed); None when it is malformed. Either earns nothing.
    """
    if not (isinstance(report, dict) and set(report) - {"loads"} == {"intact", "findings"} and isinstance(report["intact"], bool)
            and isinstance(report["findings"], list) and len(report["findings"]) <= MAX_SANITIZED):
        return None
    name = lambda s: isinstance(s, str) and _NAME.fullmatch(s) is not None  # noqa: E731
    phrase = lambda s: isinstance(s, str) and _PHRASE.fullmatch(s) is not None  # noqa: E731
    out = []
    for f in report["findings"]:
        ok = (isinstance(f, dict) and set(f) == _FINDING_KEYS and f["kind"] in ("race", "out-of-bounds", "lock")
              and name(f["kernel"]) and name(f["tensor"]) and phrase(f["outside"])
              and isinstance(f["also"], list) and len(f["also"]) <= 4
              and all(isinstance(a, str) and _ELEMENT.fullmatch(a) for a in f["also"])
              and _ints(f["index"], 8, signed=True) and _ints(f["shape"], 8)
              and isinstance(f["programs"], list) and 1 <= len(f["programs"]) <= 2
              and all(_ints(p, 3) and len(p) == 3 for p in f["programs"])
              and isinstance(f["sites"], list) and len(f["sites"]) == len(f["programs"])
              and all(isinstance(s, list) and len(s) == 3 and name(s[0]) and is_count(s[1]) and isinstance(s[2], str)
                      for s in f["sites"])
              and isinstance(f["ops"], list) and len(f["ops"]) == len(f["programs"])
              and all(phrase(o) and 0 < len(o) <= 30 for o in f["ops"])
              and is_count(f["count"]) and f["count"] >= 1)
        if not ok:
            return None
        f = {**f, "sites": [[s[0], s[1], ""] for s in f["sites"]]}
        if read_record(f) is None:
            return None
        out.append(f)
    if not report["intact"]:
        return "sanitizer"
    return tuple(out)


def sanitized_loads(report: dict, asked: bool) -> tuple[dict, ...] | None:
    """What each program of the call's first launches loaded (``worker_instruments._Sanitizer.read``), from a report
    :func:`sanitized_findings` accepted: present only where ``asked`` (absent too where the worker has no Triton:
    nothing launched), at most :data:`MAX_WALKED` launches, each one ``course.sanitizer.read_loads`` reads back, or
    null (more runs than a report carries: that launch's walk is not read). None when it is malformed."""
    records = report.get("loads", [])
    if not (asked or "loads" not in report) or not (isinstance(records, list) and len(records) <= MAX_WALKED):
        return None
    if not all(r is None or read_loads(r) is not None for r in records):
        return None
    return tuple(r for r in records if r is not None)


def _ints(xs, n: int, signed: bool = False) -> bool:
    """A list of at most ``n`` ints (no bools) below 2**62 in size, each non-negative unless ``signed``."""
    return isinstance(xs, list) and len(xs) <= n and all(
        is_count(abs(x) if signed and isinstance(x, int) and not isinstance(x, bool) else x) for x in xs)


# ---------------------------------------------------------------------------
# Starting the worker


def start_worker(job: dict, log_path: Path, deadline: float | None = None) -> Channel:
    """The value worker in a sandbox forked by the zygote, with two pipes; returns once it is ready.

    ``Channel.lifeline`` is the sandbox's: closing it kills everything in there.
    """
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    spec = dict(job["spec"])
    if job["isolation"] == "full":
        spec["write_files"] = {p.name: p.read_text() for p in (VALUEWORKER, *BESIDE)}
        script = f"{sandbox.SANDBOX_DIR}/valueworker.py"
    else:
        spec["refuse_imports"] = ["autograder", "kernels"]
        script = str(VALUEWORKER)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    started: dict = {}
    try:
        lifeline = sandbox.spawn(job["zygote"], spec, "valueworker", [null, log, log, to_r, from_w], script=script,
                                 started=started)
    finally:
        for fd in (log, null, to_r, from_w):
            os.close(fd)
    channel = Channel(lifeline, to_w, from_r)
    init = started.get("init")
    channel.pages = PageCounter(init if isinstance(init, int) and not isinstance(init, bool) and init > 1 else None)
    channel.deadline = deadline if deadline is not None else time.monotonic() + job["startup_timeout"]
    try:
        ready, _, re = channel._receive()
    except ReplyRefused as exc:
        raise WorkerDied(f"the worker did not start ({exc})") from None
    if ready.get("op") != "ready" or re != 0:
        raise WorkerDied("the worker did not start")
    channel.profiled = ready.get("profiler") is True
    channel.ran = 0  # cells run so far
    return channel


def stop_worker(channel: Channel | None) -> None:
    if channel is not None:
        for fd in (channel.wfd, channel.rfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        channel.lifeline.close()  # the zygote's handler kills the sandbox when its client goes


# ---------------------------------------------------------------------------
# Running the checks


def check_one(channel: Channel, check_name: str, arg_name: str, timeout: float, end: float = float("inf")) -> dict:
    import autograder.check as checks
    from course.registry import BY_NAME
    from course.vocabulary import GradingFailure

    check = getattr(checks, check_name, None) if check_name in BY_NAME else None  # an exercise's, nothing else
    if check is None:
        return {"status": "checker-error", "message": f"the course's registry has no exercise {check_name}"}
    channel.deadline = min(time.monotonic() + timeout, end)
    try:
        try:
            student = channel._get(arg_name)
        except (WorkerTimeout, WorkerDied, ReplyRefused):
            raise
        except Exception as exc:  # noqa: BLE001 — NameError: the notebook never defined it
            raise GradingFailure("error", f"{type(exc).__name__}: {exc}") from None
        check(student)
        return {"status": "ok", "passed": True, "cls": "", "message": ""}
    except GradingFailure as failure:  # its record is what the grader reads (worker.grader_words)
        return {"status": "ok", "passed": False, "cls": failure.cls, "message": failure.sentence[:500],
                "record": failure.record()}
    except WorkerTimeout:
        if time.monotonic() >= end:
            return {"status": "timeout", "message": f"the student's {arg_name} was still running when the "
                                                    "submission's time ran out"}
        return {"status": "timeout", "message": f"the student's {arg_name} gave no answer within {timeout:g} s"}
    except WorkerDied as exc:
        return {"status": "died", "message": f"the student's code ended the worker ({exc})"[:500]}
    except ReplyRefused as exc:  # the grader's own words (wire.REFUSALS), never the frame's text
        return {"status": "refused", "message": str(exc)[:500]}
    except Exception as exc:  # noqa: BLE001 — the check itself failed on what came back
        return {"status": "checker-error", "message": "".join(traceback.format_exception_only(type(exc), exc))[-500:]}


def _cell_name(job: dict, index: int | None) -> str:
    """A code cell of the notebook as the grader names it: its number, and its grade id where the instructor gave it."""
    if index is None:
        return "the notebook's cells"
    grade_id = (job.get("cell_ids") or {}).get(str(index))
    return f"cell {index + 1} of the notebook" + (f" ({grade_id})" if grade_id else "")


def run(job: dict, progress=None) -> dict:
    """Every exercise of one submission, in notebook order, each after the code cells before its test cell.

    A timeout, a crash or a broken channel ends that worker; the next exercise gets a fresh one (at most three
    in all), which replays the cells it needs. The whole run keeps to ``job["budget"]`` seconds (the rest of the
    submission's time, docs/grading.md "Time"): an exercise it cannot reach is a ``timeout`` that says so.
    ``progress(results, in_flight)``: called as each exercise starts and ends (:func:`main` writes it out, so that
    a checker stopped from outside still leaves what it found, and which exercise it was in).
    """
    # The submission's seed, drawn and recorded by the grader (replayable with --seed); the value worker never
    # has it. Without one, inputs from os.urandom, known to no other process.
    if job.get("seed") is not None:
        os.environ["AUTOGRADER_SEED"] = str(int(job["seed"]))
    else:
        os.environ.pop("AUTOGRADER_SEED", None)
    work = Path(job["dir"])
    cells = [(int(i), code) for i, code in job["cells"]]
    timeout = float(job["timeout"])
    budget = job.get("budget")
    end = time.monotonic() + float(budget) if budget is not None else float("inf")
    within = lambda seconds: min(time.monotonic() + seconds, end)  # noqa: E731
    results: dict[str, dict] = {}
    channel = None
    started = 0
    cell_errors: list[str] = []  # what the notebook's cells raised in the worker: the likely cause of a failure
    ended = None  # how a cell of the notebook failed in the worker (stalled, ended it, was refused): later exercises too
    for test_id, check_name, arg_name, position in job["exercises"]:
        if results.get(test_id, {}).get("status", "ok") != "ok":
            continue
        if ended is not None:
            results[test_id] = ended
            continue
        if time.monotonic() >= end:
            results[test_id] = {"status": "timeout", "message": "not checked: the submission's time ran out before "
                                                                "its hidden checks reached this part"}
            continue
        if progress:
            progress(results, test_id)
        if channel is None:
            if started >= 3:
                results[test_id] = {"status": "no-worker", "message": "the worker was restarted too often"}
                continue
            started += 1
            try:
                channel = start_worker(job, work / "valueworker.log", within(job["startup_timeout"]))
            except (WorkerTimeout, WorkerDied, OSError) as exc:
                results[test_id] = {"status": "no-start", "message": f"the worker did not start ({type(exc).__name__}: {exc})"[:500]}
                continue
        todo = [(i, code) for i, code in cells if i < position][channel.ran:]
        running = None
        try:
            for i, code in todo:  # one cell at a time: a cell that never ends is named
                running = i
                channel.deadline = within(timeout + 5)  # the worker interrupts a cell at timeout; one that swallows it stalls
                errors = channel._request({"op": "run", "cells": [code], "timeout": timeout})
                channel.ran += 1
                cell_errors += [str(e)[:300] for e in (errors if isinstance(errors, list) else [])][:5]
            running = None
            outcome = check_one(channel, check_name, arg_name, timeout, end)
            if outcome.get("status") == "ok" and not outcome.get("passed") and cell_errors:
                # A cell that worked in the kernel and failed here (an import of the grader's own code, say): the
                # likely cause, for whoever reads the results file (the student's text: never in a reason).
                outcome["cell_error"] = cell_errors[-1]
        except WorkerTimeout:
            outcome = {"status": "timeout", "message": f"{_cell_name(job, running)} did not finish in time"
                       + (" (the submission's time ran out)" if time.monotonic() >= end else "")}
        except WorkerDied as exc:
            outcome = {"status": "died", "message": f"{_cell_name(job, running)} ended the worker ({exc})"[:500]}
        except ReplyRefused as exc:
            outcome = {"status": "refused", "message": f"{exc} (the reply to {_cell_name(job, running)})"[:500]}
        if running is not None:  # a cell of the notebook itself: every later exercise would replay it, to the same end
            ended = outcome
        if test_id not in results or (results[test_id].get("passed") and not outcome.get("passed")):
            results[test_id] = outcome  # a test cell with several checks passes when all of them do
        if outcome["status"] in ("timeout", "died", "refused") or channel.broken:
            stop_worker(channel)
            channel = None
        if progress:
            progress(results, None)
    stop_worker(channel)
    return results


CHECKER_MEMORY = 3 << 30  # address space the checker may take beyond its size after start-up


def checker_cpu_seconds(job: dict) -> int:
    """The checker's CPU budget: the wall time its job may take (every cell and every check a cell's time)."""
    steps = len(job["cells"]) + 2 * len(job["exercises"])
    return int(float(job["startup_timeout"]) + steps * float(job["timeout"]) + 60)


def limit_checker(memory: int = CHECKER_MEMORY, cpu_seconds: int = 900) -> None:
    """The checker's own limits, set before anything of the worker's is read. It runs as root: no one else limits it.

    Address space: its size now (CUDA started first where the checks use it) plus ``memory``;
    CPU ``cpu_seconds``; no core dump (its memory holds the hidden checks); files up to 64 MiB.
    """
    import resource

    with contextlib.suppress(Exception):  # no course or no CUDA: nothing to start
        from course import DEVICE

        if DEVICE.type == "cuda":
            torch.zeros(1, device=DEVICE)
    limits = [(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5), (resource.RLIMIT_CORE, 0, 0),
              (resource.RLIMIT_FSIZE, 64 << 20, 64 << 20)]
    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limits.append((resource.RLIMIT_AS, size + memory, size + memory))
    except OSError:  # no /proc (not Linux): no address-space limit, said on stderr (the job's log)
        print("trusted checker: no /proc/self/statm, so no address-space limit", file=sys.stderr)
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    limit_checker(int(job.get("checker_memory") or CHECKER_MEMORY), checker_cpu_seconds(job))
    started = time.perf_counter()
    out = Path(job["results"])

    def progress(results: dict, in_flight: str | None) -> None:
        tmp = out.with_suffix(".part")
        tmp.write_text(json.dumps({"results": results, "in_flight": in_flight, "done": False}))
        os.replace(tmp, out)

    results = run(job, progress)
    out.write_text(json.dumps({"results": results, "seconds": time.perf_counter() - started, "done": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

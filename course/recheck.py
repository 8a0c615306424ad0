"""``python -m course validate``'s re-check: each visible check run again where the notebook's code cannot reach it.

The checks run in this process, which never ran a line of the notebook, on proxies (``course.remote``); the
kernel serves each call (course/recheck_server.py) and its result comes back by value, read with
``torch.load(weights_only=True)``. Why, and its limits: docs/grading.md, "The student's own check".
"""

from __future__ import annotations

import contextlib
import io
import re
import secrets
import socket
import struct
import time
import types
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .remote import Proxies, Remote

SERVER = Path(__file__).with_name("recheck_server.py")
_LENGTH = struct.Struct(">Q")
_CHECK_CALL = re.compile(r"\bcourse\.selfcheck\.(?P<check>[A-Za-z_]\w*)\(\s*(?P<arg>[A-Za-z_]\w*)\s*\)")


class Timeout(BaseException):
    """The kernel gave no reply before the deadline. A BaseException: no check's ``except Exception`` absorbs it."""


class Gone(BaseException):
    """The kernel closed the connection (it died, or stopped serving), or sent what cannot be read as data."""


def checks_of(source: str, grade_id: str) -> list[tuple[str, str]]:
    """(check, name of the student's object) for each visible check a test cell stands for.

    The calls of ``course.selfcheck`` its code makes, and the one its ``grade_id`` names by the course's
    contract (``test_<function>`` runs ``course.selfcheck.<function>(<function>)``), so that a test cell
    whose code was edited still gets its check. Only checks ``course.selfcheck`` has.
    """
    import course.selfcheck as selfcheck

    found = [(m.group("check"), m.group("arg")) for m in _CHECK_CALL.finditer(source)]
    if grade_id.startswith("test_"):
        found.append((grade_id.removeprefix("test_"),) * 2)
    known = [(check, arg) for check, arg in found
             if not check.startswith("_") and isinstance(getattr(selfcheck, check, None), types.FunctionType)]
    return list(dict.fromkeys(known))


def run_check(channel: _Channel, check: str, arg: str, timeout: float) -> BaseException | None:
    """Run ``course.selfcheck.<check>`` on the kernel's ``arg``; return what it raised, or None when it passed.

    Raises :class:`Timeout` or :class:`Gone` when the kernel stopped answering: the caller interrupts it.
    """
    import course.selfcheck as selfcheck

    channel.deadline = time.monotonic() + timeout
    quiet = io.StringIO()  # the check's ✓ line and warnings: the table says it
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        try:
            getattr(selfcheck, check)(channel._get(arg))
        except Exception as exc:  # noqa: BLE001 — a GradingFailure, a NameError, or the check failing on what came back
            return exc
    return None


class Listener:
    """Where the kernel connects to serve a re-check: a socket on 127.0.0.1, and a token it must present."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.token = secrets.token_bytes(16)

    def code(self) -> str:
        """What the kernel runs to serve: recheck_server.py's text, then ``serve`` on the notebook's namespace."""
        port = self.sock.getsockname()[1]
        source = SERVER.read_text(encoding="utf-8") + f"\nserve({port}, {self.token!r}, USER_NS)\n"
        return f"exec(compile({source!r}, {str(SERVER)!r}, 'exec'), {{'__name__': 'course_recheck', 'USER_NS': globals()}})"

    def accept(self, timeout: float) -> _Channel:
        """The kernel's connection, once it presents the token; :class:`Timeout` when none does in time."""
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, TimeoutError):
                raise Timeout() from None
            channel = _Channel(conn)
            channel.deadline = deadline
            try:
                if channel._exactly(len(self.token)) == self.token:
                    return channel
            except (Timeout, Gone):
                pass
            conn.close()  # not the kernel we started: keep listening

    def close(self) -> None:
        self.sock.close()


class _Channel(Proxies):
    """validate's end of the connection to the kernel: requests out, replies (and the kernel's callbacks) in."""

    _side = "notebook"

    def __init__(self, sock: socket.socket):
        super().__init__()
        self.sock = sock

    # -- frames ---------------------------------------------------------------

    def _left(self) -> float:
        left = (self.deadline or 0) - time.monotonic()
        if left <= 0:
            raise Timeout()
        return left

    def _exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            self.sock.settimeout(self._left())
            try:
                chunk = self.sock.recv(min(left, 1 << 20))
            except (socket.timeout, TimeoutError):
                raise Timeout() from None
            except OSError as exc:
                raise Gone(f"the kernel's connection failed ({exc})") from None
            if not chunk:
                raise Gone("the kernel closed the connection (it died, or stopped serving)")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _send(self, message: dict, re: int = 0) -> None:  # re: the request it answers, which only the checker's frames say
        buf = io.BytesIO()
        torch.save(message, buf)
        data = buf.getvalue()
        self.sock.settimeout(self._left())
        try:
            self.sock.sendall(_LENGTH.pack(len(data)) + data)
        except (socket.timeout, TimeoutError):
            raise Timeout() from None
        except OSError as exc:
            raise Gone(f"the kernel's connection failed ({exc})") from None

    def _receive(self) -> dict:
        (size,) = _LENGTH.unpack(self._exactly(_LENGTH.size))
        data = self._exactly(size)
        try:
            message = torch.load(io.BytesIO(data), weights_only=True)  # data and tensors only: nothing runs
        except Exception as exc:  # noqa: BLE001 — whatever the kernel sent, it is not a reply
            raise Gone(f"the kernel's reply is not plain data ({type(exc).__name__})") from None
        if not (isinstance(message, dict) and isinstance(message.get("op"), str)):
            raise Gone("the kernel's reply is not a message")
        return message

    def done(self) -> None:
        """Tell the kernel to stop serving; the connection closes."""
        with contextlib.suppress(Timeout, Gone):
            self._send({"op": "done"})
        self.sock.close()

    # -- values ---------------------------------------------------------------

    def _enc(self, value):
        """``value`` for the kernel: proxies as references, this side's callables as callbacks, tensors as leaves."""
        if isinstance(value, Remote):
            return {"__ref__": value._info["__ref__"]}
        if isinstance(value, type) and hasattr(value, "_remote_ref"):
            return {"__ref__": value._remote_ref}
        if isinstance(value, torch.Tensor):
            return self._leaf(value, value.requires_grad)
        if type(value) in (list, tuple):
            return type(value)(self._enc(v) for v in value)
        if type(value) is dict:
            return {"__dict__": [[self._enc(k), self._enc(v)] for k, v in value.items()]}
        if callable(value):
            return self._callback(value)
        return value

    def _dec(self, value):
        if isinstance(value, (list, tuple)):
            items = [self._dec(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            if isinstance(value.get("__ref__"), int):
                return self._proxy(value)
            items = value.get("__dict__")
            if not isinstance(items, list) or not all(isinstance(i, list) and len(i) == 2 for i in items):
                raise Gone("the kernel's reply holds a dict the re-check cannot read")
            return {self._dec(k): self._dec(v) for k, v in items}
        return value

    # -- requests -------------------------------------------------------------

    def _exchange(self, message: dict, measured=None) -> dict:
        """Send a request; run the kernel's callbacks until its reply comes; return it, or raise what it raised.

        Out of sight of the checks' dispatch modes: these are the transport's tensors, not the student's work.
        Nothing is measured here (``measured``: what the checker's channel measures).
        """
        with _disable_current_modes():
            self._send(message)
            while True:
                reply = self._receive()
                if reply["op"] != "callback":
                    break
                self._run_callback(reply)
        if reply["op"] == "raise":
            raise self._rebuild(reply.get("chain") or [], "notebook")
        if reply["op"] != "result":
            raise Gone("the kernel's reply is of no known kind")
        return reply

    def _describe(self, info: dict) -> str:
        return f"<the notebook's {info['name']}>"

    @staticmethod
    def _leaf(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
        """A tensor as the kernel gets it: the same storage, strides and offset; a leaf that requires grad when asked."""
        out = t.detach()
        return out.requires_grad_(True) if requires_grad and out.is_floating_point() else out

    def _graph_of(self, reply: dict):
        return reply.get("graph")

    def _malformed(self, why: str) -> Gone:
        return Gone(f"the kernel's reply is malformed ({why})")

    def _call(self, ref: int, args: tuple, kwargs: dict):
        reply = self._exchange({"op": "call", "ref": ref, "args": self._enc(args), "kwargs": self._enc(kwargs)})
        return self._returned(reply, self._tensors_in((args, kwargs)))

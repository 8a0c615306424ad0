"""The value worker: runs a student's notebook code where no checker, reference or seed exists.

Started by ``autograder.trusted`` inside ``sandbox.py`` (an unprivileged uid, resource
limits, a root in which the ``autograder`` and ``kernels`` packages, the source notebooks
and the gradebook do not exist). It executes the notebook's code cells, test cells left
out, in one IPython namespace as a kernel would, then serves requests from the trusted
checker over two pipes: look up a name, get an attribute or item, call, backpropagate
through a result. Everything the student's code returns is sent back *by value*; the
checker compares it with references the student's code never ran beside.

This file imports nothing from the project (it runs where the project's grading code is
hidden) and is also the protocol's one definition: ``autograder.trusted`` imports the
framing and encoding from here.

Wire format: frames of an 8-byte big-endian length and a ``torch.save`` payload. The
trusted side reads with ``torch.load(weights_only=True)`` only, so nothing the worker
sends can run code in the checker. Tensors travel as ``{"__t__": tensor, "rg": bool}``
(storage shared between tensors of one message is kept, so views and in-place writes
survive the trip); objects that are not plain data stay in the worker and travel as
``{"__ref__": id, ...}``; the checker's own callables travel as ``{"__cb__": id}`` and are
called back.
"""

from __future__ import annotations

import io
import os
import struct
import sys

MAX_FRAME = 512 << 20  # bytes; a larger frame is a protocol error


# ---------------------------------------------------------------------------
# Framing


def send(fd: int, message) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(message, buf)
    data = buf.getvalue()
    _write_all(fd, struct.pack(">Q", len(data)) + data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int, deadline: float | None = None) -> bytes:
    import select
    import time

    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no reply before the deadline")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(fd: int, deadline: float | None = None, trusted_reader: bool = True):
    """One message. The trusted side loads with weights_only=True: plain data and tensors only."""
    import torch

    (n,) = struct.unpack(">Q", read_exact(fd, 8, deadline))
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes is larger than the limit")
    data = read_exact(fd, n, deadline)
    return torch.load(io.BytesIO(data), weights_only=True, map_location=None if trusted_reader else None)


# ---------------------------------------------------------------------------
# Encoding shared by both sides

PLAIN = (type(None), bool, int, float, complex, str, bytes)


def encode(value, as_ref, depth: int = 0):
    """Plain data and tensors by value; anything else through ``as_ref(obj) -> marker``."""
    import torch

    if depth > 20:
        raise ValueError("structure nested too deeply to send")
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, torch.Tensor):
        return {"__t__": value.detach(), "rg": bool(value.requires_grad)}
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return value
    if isinstance(value, slice):
        return {"__slice__": [encode(v, as_ref, depth + 1) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"__ellipsis__": True}
    if isinstance(value, (list, tuple)):  # a namedtuple (torch.return_types too) travels as a tuple
        items = [encode(v, as_ref, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        return {"__dict__": [(k, encode(v, as_ref, depth + 1)) for k, v in value.items()]}
    return as_ref(value)


def decode(value, from_ref, depth: int = 0):
    """The inverse of :func:`encode`; markers become ``from_ref(marker)``."""
    if depth > 20:
        raise ValueError("structure nested too deeply")
    if isinstance(value, list):
        return [decode(v, from_ref, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(decode(v, from_ref, depth + 1) for v in value)
    if isinstance(value, dict):
        if "__t__" in value:
            t = value["__t__"]
            return t.requires_grad_(True) if value.get("rg") and t.is_floating_point() else t
        if "__dict__" in value:
            return {k: decode(v, from_ref, depth + 1) for k, v in value["__dict__"]}
        if "__slice__" in value:
            return slice(*(decode(v, from_ref, depth + 1) for v in value["__slice__"]))
        if "__ellipsis__" in value:
            return Ellipsis
        return from_ref(value)
    return value


def tensors_in(value, depth: int = 0) -> list:
    """Every tensor in a (decoded) structure, in a fixed order."""
    import torch

    if depth > 20:
        return []
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v, depth + 1)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v, depth + 1)]
    return []


def map_tensors(value, fn, depth: int = 0):
    """The same structure with every tensor replaced by ``fn(tensor)``, in :func:`tensors_in` order."""
    import torch

    if depth > 20:
        return value
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [map_tensors(v, fn, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(map_tensors(v, fn, depth + 1) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn, depth + 1) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------
# The worker


class Worker:
    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd = rfd, wfd
        self.objects: dict[int, object] = {}
        self.ref_of: dict[int, int] = {}  # id(object) -> its reference: one object, one reference
        self.graphs: dict[int, tuple[list, list]] = {}  # handle -> (outputs needing grad, leaf inputs)
        self.contexts: dict[int, tuple] = {}  # handle -> (Function class, its ctx) of a function_forward
        self.next_id = 1
        self.shell = None

    # -- references -------------------------------------------------------

    def _ref(self, obj) -> dict:
        import torch

        rid = self.ref_of.get(id(obj))
        if rid is None:
            rid = self.next_id
            self.next_id += 1
            self.objects[rid] = obj
            self.ref_of[id(obj)] = rid
        is_class = isinstance(obj, type)
        return {
            "__ref__": rid, "callable": callable(obj), "name": getattr(obj, "__name__", type(obj).__name__),
            "type": type(obj).__name__, "is_class": is_class,
            "function_class": bool(is_class and issubclass(obj, torch.autograd.Function)),
        }

    def _callback(self, marker: dict):
        if "__ref__" in marker:  # one of our own objects, handed back
            return self.objects[marker["__ref__"]]
        if "__cb__" not in marker:
            raise ValueError("unexpected reference from the checker")
        cb = marker["__cb__"]

        def call_checker(*args, **kwargs):
            send(self.wfd, {"op": "callback", "cb": cb, "args": self._enc(args), "kwargs": self._enc(kwargs)})
            return self._serve_until_reply()

        call_checker.__name__ = f"checker_callable_{cb}"
        return call_checker

    def _enc(self, value):
        return encode(value, self._ref)

    def _dec(self, value):
        return decode(value, self._callback)

    # -- running the notebook ---------------------------------------------

    def run_cells(self, cells: list[str], timeout: float) -> list[str]:
        """Execute code cells in order, as a kernel would; return the errors, one line each.

        Each cell gets ``timeout`` seconds, then a KeyboardInterrupt, as nbgrader interrupts a
        kernel; a cell that swallows it runs on until the checker's own deadline kills us.
        """
        import signal

        from IPython.core.interactiveshell import InteractiveShell

        def interrupt(signum, frame):
            raise KeyboardInterrupt("cell timeout")

        if self.shell is None:
            self.shell = InteractiveShell.instance()
        signal.signal(signal.SIGALRM, interrupt)
        errors = []
        for code in cells:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                result = self.shell.run_cell(code, store_history=True, silent=False)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            exc = result.error_in_exec or result.error_before_exec
            if exc is not None:
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        return errors

    # -- requests -----------------------------------------------------------

    def _result(self, value, args=None) -> dict:
        """A reply carrying ``value``; tensors with a graph here are marked rg (in order: the graph's outputs)."""
        import torch

        graph = None
        outs = [t for t in tensors_in(value) if t.requires_grad and t.grad_fn is not None]
        if outs:
            leaves = [t for t in tensors_in(args) if isinstance(t, torch.Tensor) and t.requires_grad] if args is not None else []
            graph = self._register_graph(outs, leaves)
        with torch.no_grad():  # a returned leaf that requires grad travels as a plain value
            value = map_tensors(value, lambda t: t if (t.requires_grad and t.grad_fn is not None) else t.detach())
        message = {"op": "result", "value": self._enc(value), "graph": graph}
        if args is not None:
            message["args_after"] = [t.detach() for t in tensors_in(args)]
        return message

    def _register_graph(self, outs: list, leaves: list) -> dict:
        from course.autograd_graph import custom_functions  # for checks that look at which Functions ran

        handle = self.next_id
        self.next_id += 1
        self.graphs[handle] = (outs, leaves)
        return {"handle": handle, "outputs": [o.detach() for o in outs], "n_leaves": len(leaves),
                "classes": [self._ref(c) for c in custom_functions(*outs)]}

    def handle(self, msg: dict) -> dict:
        import torch

        op = msg.get("op")
        if op == "run":
            return {"op": "result", "value": self.run_cells(list(msg["cells"]), float(msg["timeout"]))}
        if op == "get":
            name = msg["name"]
            if name not in self.shell.user_ns:
                raise NameError(f"name '{name}' is not defined")
            return self._result(self.shell.user_ns[name])
        if op == "getattr":
            return self._result(getattr(self.objects[msg["ref"]], msg["name"]))
        if op == "getitem":
            return self._result(self.objects[msg["ref"]][self._dec(msg["key"])])
        if op == "call":
            fn = self.objects[msg["ref"]]
            args, kwargs = self._dec(msg["args"]), self._dec(msg["kwargs"])
            value = fn(*args, **kwargs)
            return self._result(value, (args, kwargs))
        if op == "function_forward":
            # An autograd.Function class: apply it here, keep its graph, say what its ctx saved.
            cls = self.objects[msg["ref"]]
            args = self._dec(msg["args"])
            out = cls.apply(*args)
            outs = out if isinstance(out, tuple) else (out,)
            node = next((t.grad_fn for t in outs if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)
            saved, stashed = [], {}
            if node is not None:
                try:
                    saved = [t.detach() if isinstance(t, torch.Tensor) else t for t in node.saved_tensors]
                except RuntimeError:
                    saved = []
                stashed = {k: v.detach() for k, v in vars(node).items() if isinstance(v, torch.Tensor)} if hasattr(node, "__dict__") else {}
            leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            mask = [isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None for t in outs]
            needs = [t for t, m in zip(outs, mask) if m]
            graph = self._register_graph(needs, leaves) if needs else None
            if graph is not None:
                graph["mask"] = mask
                self.contexts[graph["handle"]] = (cls, node)
            plain = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in outs)
            return {"op": "result", "value": self._enc(plain if isinstance(out, tuple) else plain[0]), "graph": graph,
                    "saved": saved, "stashed": {"__dict__": list(stashed.items())}}
        if op == "function_backward":
            # The student's backward itself, on its own ctx: what it returns comes back raw, so the
            # checker's autograd does to it what autograd would (and a check can see it unreduced).
            cls, node = self.contexts[msg["handle"]]
            grads = self._dec(msg["grads"])
            out = cls.backward(node, *grads)
            return {"op": "result", "value": self._enc(list(out) if isinstance(out, tuple) else [out])}
        if op == "grad":
            outs, leaves = self.graphs[msg["handle"]]
            grads = self._dec(msg["grads"])
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
            if not leaves or not pairs:
                return {"op": "result", "value": [None] * len(leaves)}
            got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                      retain_graph=True, allow_unused=True)
            return {"op": "result", "value": self._enc(list(got))}
        raise ValueError(f"unknown request {op!r}")

    def _error(self, exc: BaseException) -> dict:
        chain, seen = [], set()
        while exc is not None and id(exc) not in seen and len(chain) < 8:
            seen.add(id(exc))
            kind = ("not-implemented" if isinstance(exc, NotImplementedError) else
                    "attribute" if isinstance(exc, AttributeError) else
                    "memory" if isinstance(exc, MemoryError) else "other")
            chain.append({"module": type(exc).__module__, "name": type(exc).__name__, "message": str(exc)[:2000],
                          "kind": kind})
            exc = exc.__cause__
        return {"op": "raise", "chain": chain}

    def _serve_until_reply(self):
        """Serve the checker's requests until the reply to our own callback arrives."""
        while True:
            msg = receive(self.rfd, trusted_reader=False)
            op = msg.get("op")
            if op == "result":
                return self._dec(msg["value"])
            if op == "raise":
                raise RuntimeError(msg.get("message", "the checker's callable raised"))
            self._answer(msg)

    def _answer(self, msg: dict) -> None:
        import warnings

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reply = self.handle(msg)
        except BaseException as exc:  # noqa: BLE001 — the student's code may raise anything, SystemExit included
            reply = self._error(exc)
        try:
            send(self.wfd, reply)
        except Exception as exc:  # noqa: BLE001 — e.g. a result torch cannot serialize
            send(self.wfd, self._error(exc))

    def serve(self) -> None:
        import IPython.core.interactiveshell  # noqa: F401 — imported before "ready", not inside a cell's time

        send(self.wfd, {"op": "ready"})
        while True:
            try:
                msg = receive(self.rfd, trusted_reader=False)
            except EOFError:
                return
            if msg.get("op") == "exit":
                return
            self._answer(msg)


def main(argv: list[str]) -> int:
    rfd, wfd = int(argv[0]), int(argv[1])
    # The student's prints must not reach the protocol: stdout and stderr go nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    Worker(rfd, wfd).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

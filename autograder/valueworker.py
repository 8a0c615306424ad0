"""The value worker: runs a student's notebook code where no checker, reference or seed exists.

Started by ``autograder.checker`` inside ``sandbox.py``, it runs the notebook's code cells and serves the
checker's requests (the protocol: ``wire.py``), sending every result back by value. It imports nothing from
``autograder``, which the sandbox hides: ``wire.py`` and ``worker_instruments.py`` are loaded by their paths,
beside this file (in the sandbox, written there with it); of the course, only ``course.autograd_graph``.
Long form: docs/grading.md, "The hidden checks, in the trusted checker" and "The checker guards itself".
"""

from __future__ import annotations

import os
import sys


def _sibling(name: str):
    """``name.py`` beside this file, loaded by its path (``autograder`` is not importable here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # for its dataclasses, while they are made; no name to import it by afterwards
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


_wire = _sibling("wire")
EXCEPTION_KINDS, WORKER_LIMITS, WireError = _wire.EXCEPTION_KINDS, _wire.WORKER_LIMITS, _wire.WireError
decode, encode, map_tensors, receive, send, tensors_in = (
    _wire.decode, _wire.encode, _wire.map_tensors, _wire.receive, _wire.send, _wire.tensors_in)


def _spare(value):
    """``value`` with each tensor copied, views of one storage kept views of one copy (same strides, same offsets)."""
    import torch

    copies: dict[tuple, object] = {}

    def copy(t):
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr(), storage.nbytes())
        if key not in copies:
            copies[key] = storage.clone()
        with torch.no_grad():
            c = torch.empty(0, dtype=t.dtype, device=t.device).set_(copies[key], t.storage_offset(), t.shape, t.stride())
        return c.requires_grad_(True) if t.requires_grad and c.is_floating_point() else c

    return map_tensors(value, copy)


def _node_of(out):
    """The autograd node an ``autograd.Function``'s outputs share: its ctx."""
    import torch

    outs = out if isinstance(out, tuple) else (out,)
    return next((t.grad_fn for t in outs if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)


class Worker:
    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd = rfd, wfd
        self.objects: dict[int, object] = {}
        self.ref_of: dict[int, int] = {}  # id(object) -> its reference: one object, one reference
        self.graphs: dict[int, tuple[list, list]] = {}  # handle -> (outputs needing grad, leaf inputs)
        self.contexts: dict[int, tuple] = {}  # handle -> (Function class, its ctx) of a function_forward
        self.next_id = 1
        self.shell = None
        self.sent = 0  # the number of the last frame we sent
        self.serving: list[int] = []  # the numbers of the checker's requests being answered, innermost last
        # Taken before any cell runs: the notebook's code may patch what it can reach by name afterwards.
        import torch

        instruments = _sibling("worker_instruments")
        self.instruments, self._saved = instruments.Instruments(), instruments.saved_tensors
        self._grad_fn = torch.autograd.grad

    # -- references -------------------------------------------------------

    def _ref(self, obj) -> dict:
        import torch

        rid = self.ref_of.get(id(obj))
        if rid is None:
            rid = self.next_id
            self.next_id += 1
            self.objects[rid] = obj
            self.ref_of[id(obj)] = rid
        return {
            "__ref__": rid, "callable": callable(obj), "name": getattr(obj, "__name__", type(obj).__name__),
            "type": type(obj).__name__, "function_class": isinstance(obj, type) and issubclass(obj, torch.autograd.Function),
        }

    def _callback(self, marker: dict):
        if "__ref__" in marker:  # one of our own objects, handed back
            return self.objects[marker["__ref__"]]
        if "__cb__" not in marker:
            raise ValueError("unexpected reference from the checker")
        cb = marker["__cb__"]

        def call_checker(*args, **kwargs):
            n = self._send({"op": "callback", "cb": cb, "args": self._enc(args), "kwargs": self._enc(kwargs)},
                           re=self.serving[-1] if self.serving else 0)
            return self._serve_until_reply(n)

        call_checker.__name__ = f"checker_callable_{cb}"
        return call_checker

    def _enc(self, value):
        return encode(value, self._ref)

    def _send(self, message: dict, re: int = 0) -> int:
        """One frame to the checker, numbered; ``re``: the request it answers. Returns its number."""
        self.sent += 1
        send(self.wfd, message, self.sent, re)
        return self.sent

    def _dec(self, value):
        return decode(value, self._callback)

    # -- running the notebook ---------------------------------------------

    def run_cells(self, cells: list[str], timeout: float) -> list[str]:
        """Execute code cells in order, as a kernel would; return the errors, one line each.

        Each cell runs on a thread of its own whose first frame is IPython's (worker_instruments._Fresh): nothing
        of the worker's is under the cell's frames. After ``timeout`` seconds it gets a KeyboardInterrupt, as
        nbgrader interrupts a kernel; a cell that swallows it runs on until the checker's own deadline kills us.
        """
        from IPython.core.interactiveshell import InteractiveShell

        if self.shell is None:
            self.shell = InteractiveShell.instance()
        errors = []
        for code in cells:
            ran = self.instruments.fresh.run(self.shell.run_cell, (code,), {"store_history": True, "silent": False},
                                             timeout=timeout)
            result = ran.value
            exc = ran.raised if result is None else (result.error_in_exec or result.error_before_exec)
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
            leaves = [t for t in tensors_in(args) if t.requires_grad]
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
            sides = msg.get("follow")  # per tensor of the arguments: 0 a query side, 1 a key side, None neither
            spare = _spare((args, kwargs)) if isinstance(sides, list) else None  # before the call writes into them
            loads = msg.get("loads") is True  # a check reads the walk: what each program loaded
            if msg.get("bare") is True:  # its memory counted from outside (autograder/pages.py) and nothing else
                value, measured = self.instruments.bare(fn, args, kwargs, loads=loads)
                return {**self._result(value, (args, kwargs)), "measured": measured}
            value, measured = self.instruments.measure(fn, args, kwargs, loads=loads)
            if spare is not None:
                found = tensors_in(spare)
                if len(sides) != len(found):
                    raise ValueError("a follow request that does not name each tensor of the call")
                queries, keys = ([t for t, s in zip(found, sides) if s == side] for side in (0, 1))
                measured["followed"] = self.instruments.follow(lambda: fn(*spare[0], **spare[1]), queries, keys, spare)
            return {**self._result(value, (args, kwargs)), "measured": measured}
        if op == "function_forward":
            # An autograd.Function class: apply it here, keep its graph, say what its ctx saved.
            cls = self.objects[msg["ref"]]
            args = self._dec(msg["args"])
            out, measured = self.instruments.measure(cls.apply, args, kept_of=_node_of, inputs=args)
            outs = out if isinstance(out, tuple) else (out,)
            node = _node_of(out)
            saved = [t.detach() if isinstance(t, torch.Tensor) else t for t in self._saved(node)]
            stashed = {k: v.detach() for k, v in vars(node).items() if isinstance(v, torch.Tensor)} if hasattr(node, "__dict__") else {}
            leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            needs = [t for t in outs if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None]
            graph = self._register_graph(needs, leaves) if needs else None
            if graph is not None:
                self.contexts[graph["handle"]] = (cls, node)
            plain = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in outs)
            return {"op": "result", "value": self._enc(plain if isinstance(out, tuple) else plain[0]), "graph": graph,
                    "saved": saved, "stashed": {"__dict__": list(stashed.items())}, "measured": measured}
        if op == "function_backward":
            # The student's backward itself, on its own ctx: what it returns comes back raw, so the
            # checker's autograd does to it what autograd would (and a check can see it unreduced).
            # Called directly, not by the engine: any node the engine evaluates meanwhile is the student's.
            cls, node = self.contexts[msg["handle"]]
            grads = self._dec(msg["grads"])
            out, measured = self.instruments.measure(cls.backward, (node, *grads))
            return {"op": "result", "value": self._enc(list(out) if isinstance(out, tuple) else [out]),
                    "measured": measured}
        if op == "grad":
            outs, leaves = self.graphs[msg["handle"]]
            grads = self._dec(msg["grads"])
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
            if not leaves or not pairs:
                return {"op": "result", "value": [None] * len(leaves)}
            got, measured = self.instruments.measure(self._grad_fn, ([o for o, _ in pairs], leaves, [g for _, g in pairs]),
                                                     {"retain_graph": True, "allow_unused": True})
            return {"op": "result", "value": self._enc(list(got)), "measured": measured}
        raise ValueError(f"unknown request {op!r}")

    def _error(self, exc: BaseException) -> dict:
        chain, seen, measured = [], set(), None
        while exc is not None and id(exc) not in seen and len(chain) < 8:
            seen.add(id(exc))
            kind = next((k for k, base in EXCEPTION_KINDS.items() if isinstance(exc, base)), "other")
            chain.append({"module": type(exc).__module__, "name": type(exc).__name__, "message": str(exc)[:2000],
                          "kind": kind})
            measured = measured or getattr(exc, "_measured", None)
            exc = exc.__cause__
        return {"op": "raise", "chain": chain, "measured": measured}

    def _serve_until_reply(self, n: int):
        """Serve the checker's requests until the reply to our own callback ``n`` arrives."""
        while True:
            msg, m, re = receive(self.rfd, limits=WORKER_LIMITS)
            op = msg.get("op")
            if op in ("result", "raise"):
                if re != n:
                    raise RuntimeError("the checker's reply is out of step")
                if op == "raise":
                    raise RuntimeError(msg.get("message", "the checker's callable raised"))
                return self._dec(msg["value"])
            self._answer(msg, m)

    def _answer(self, msg: dict, n: int) -> None:
        """Handle request ``n`` and send its reply: a result, the exception it raised, or that it was over the limits."""
        import warnings

        self.serving.append(n)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reply = self.handle(msg)
        except WireError as exc:  # what it returned is over the wire format's limits (encode stopped early)
            reply = {"op": "refused", "limit": exc.what}
        except BaseException as exc:  # noqa: BLE001 — the student's code may raise anything, SystemExit included
            reply = self._error(exc)
        finally:
            self.serving.pop()
        try:
            self._send(reply, re=n)
        except WireError as exc:
            self._send({"op": "refused", "limit": exc.what}, re=n)
        except Exception as exc:  # noqa: BLE001 — e.g. a tensor the wire format does not carry
            self._send(self._error(exc), re=n)

    def serve(self) -> None:
        import IPython.core.interactiveshell  # noqa: F401 — imported before "ready", not inside a cell's time

        # Said before any cell runs: whether every measured call must come with a whole profiler session.
        self._send({"op": "ready", "profiler": self.instruments.profiler is not None})
        while True:
            try:
                msg, n, _ = receive(self.rfd, limits=WORKER_LIMITS)
            except EOFError:
                return
            if msg.get("op") == "exit":
                return
            self._answer(msg, n)


def _return_big_blocks() -> None:
    """Have glibc map every block of 128 KiB or more on its own and unmap it on free, and trim its heap as soon as it
    can: the checker counts the pages a call touches (autograder/pages.py), and an honest call's tiles, freed and
    allocated again, then count once at their peak rather than as the heap they spread over. A student's code that
    undoes it only makes its own count larger."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: the counts are larger, never smaller
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    mallopt(M_MMAP_THRESHOLD, 128 << 10)
    mallopt(M_TRIM_THRESHOLD, 128 << 10)


def main(argv: list[str]) -> int:
    rfd, wfd = int(argv[0]), int(argv[1])
    # The student's prints must not reach the protocol: stdout and stderr go nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    _return_big_blocks()
    Worker(rfd, wfd).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

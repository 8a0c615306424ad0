"""The kernel's side of ``python -m course validate``'s re-check (course/recheck.py).

validate sends this file's text to the notebook's kernel between two cells and calls :func:`serve`
there: it connects back to validate's process and answers its requests on the notebook's own objects
(look a name up, read an attribute, call a function, apply an ``autograd.Function``, run a backward)
until validate says ``done`` (docs/grading.md, "The student's own check").

It imports nothing from the course: it must work in a kernel whose ``course`` the notebook replaced.
Messages are ``torch.save`` bytes behind an 8-byte length. What goes to validate is plain data and
tensors only (validate reads it with ``weights_only=True``, which runs no code); any other object stays
here and travels as a reference, ``{"__ref__": n, ...}``. A dict travels as ``{"__dict__": [[k, v], ...]}``
so that a student's dict can never read as a reference.
"""

import io
import socket
import struct

import torch

LENGTH = struct.Struct(">Q")
PLAIN = (bool, int, float, complex, str, bytes)  # sent as they are (a subclass as its base: numpy's float64)


def send(sock, message) -> None:
    buf = io.BytesIO()
    torch.save(message, buf)
    data = buf.getvalue()
    sock.sendall(LENGTH.pack(len(data)) + data)


def receive(sock):
    """The next message from validate's process (its own pickles: it is the trusted side)."""
    (size,) = LENGTH.unpack(exactly(sock, LENGTH.size))
    return torch.load(io.BytesIO(exactly(sock, size)), weights_only=False)


def exactly(sock, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("validate closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def tensors_in(value) -> list:
    """The tensors of ``value`` in a fixed order (lists, tuples and dict values walked): validate walks alike."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def custom_functions(outputs) -> list:
    """The ``autograd.Function`` classes the graphs of ``outputs`` run through (a check asks which)."""
    found, seen, todo = [], set(), [o.grad_fn for o in outputs]
    while todo and len(seen) < 500:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        cls = getattr(node, "_forward_cls", None)
        if isinstance(node, torch.autograd.function.BackwardCFunction) and cls is not None and cls not in found:
            found.append(cls)
        todo.extend(nxt for nxt, _ in getattr(node, "next_functions", ()))
    return found


class Server:
    def __init__(self, sock, user_ns: dict):
        self.sock, self.user_ns = sock, user_ns
        self.objects: dict[int, object] = {}
        self.ref_of: dict[int, int] = {}  # id(object) -> its reference: one object, one reference
        self.graphs: dict[int, tuple] = {}  # handle -> (outputs needing grad, leaf inputs)
        self.contexts: dict[int, tuple] = {}  # handle -> (Function class, its ctx)

    # -- values ---------------------------------------------------------------

    def ref(self, obj) -> dict:
        rid = self.ref_of.get(id(obj))
        if rid is None:
            rid = len(self.objects) + 1
            self.objects[rid] = obj
            self.ref_of[id(obj)] = rid
        name = getattr(obj, "__name__", type(obj).__name__)
        return {"__ref__": rid, "callable": callable(obj), "name": name if isinstance(name, str) else "object",
                "function_class": isinstance(obj, type) and issubclass(obj, torch.autograd.Function)}

    def enc(self, value):
        """``value`` as validate may read it; a tensor with a graph here keeps requires_grad (validate links it)."""
        if value is None or type(value) in PLAIN or isinstance(value, (torch.dtype, torch.device, torch.Size)):
            return value
        for base in PLAIN:
            if isinstance(value, base):
                return base(value)
        if isinstance(value, torch.Tensor):
            t = value.detach()
            return t.requires_grad_(True) if value.requires_grad and value.grad_fn is not None else t
        if isinstance(value, (list, tuple)):
            items = [self.enc(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            return {"__dict__": [[self.enc(k), self.enc(v)] for k, v in value.items()]}
        return self.ref(value)

    def dec(self, value):
        if isinstance(value, (list, tuple)):
            items = [self.dec(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            if "__ref__" in value:
                return self.objects[value["__ref__"]]
            if "__cb__" in value:
                return self.callback(value["__cb__"])
            return {self.dec(k): self.dec(v) for k, v in value["__dict__"]}
        return value

    def callback(self, cb: int):
        """A callable of validate's (a check's probe): calling it asks validate's process to run it."""

        def call_checker(*args, **kwargs):
            send(self.sock, {"op": "callback", "cb": cb, "args": self.enc(args), "kwargs": self.enc(kwargs)})
            return self.until_reply()

        return call_checker

    def result(self, value, args=None) -> dict:
        outs = [t for t in tensors_in(value) if t.requires_grad and t.grad_fn is not None]
        leaves = [t for t in tensors_in(args) if t.requires_grad]
        reply = {"op": "result", "value": self.enc(value), "graph": self.graph(outs, leaves) if outs else None}
        if args is not None:  # what the call wrote into its arguments (a kernel's output buffer)
            reply["args_after"] = [t.detach() for t in tensors_in(args)]
        return reply

    def graph(self, outs: list, leaves: list) -> dict:
        handle = len(self.graphs) + 1
        self.graphs[handle] = (outs, leaves)
        return {"handle": handle, "outputs": [o.detach() for o in outs], "n_leaves": len(leaves),
                "classes": [self.ref(c) for c in custom_functions(outs)]}

    # -- requests -------------------------------------------------------------

    def handle(self, msg: dict) -> dict:
        op = msg["op"]
        if op == "get":
            if msg["name"] not in self.user_ns:
                raise NameError(f"name '{msg['name']}' is not defined")
            return self.result(self.user_ns[msg["name"]])
        if op == "getattr":
            return self.result(getattr(self.objects[msg["ref"]], msg["name"]))
        if op == "getitem":
            return self.result(self.objects[msg["ref"]][self.dec(msg["key"])])
        if op == "call":
            args, kwargs = self.dec(msg["args"]), self.dec(msg["kwargs"])
            return self.result(self.objects[msg["ref"]](*args, **kwargs), (args, kwargs))
        if op == "function_forward":  # a Function class, applied here; its ctx stays here for the backward
            cls, args = self.objects[msg["ref"]], self.dec(msg["args"])
            out = cls.apply(*args)
            outs = out if isinstance(out, tuple) else (out,)
            node = next((t.grad_fn for t in outs if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)
            try:
                saved = [t.detach() for t in node.saved_tensors if isinstance(t, torch.Tensor)] if node is not None else []
            except RuntimeError:  # freed or never saved
                saved = []
            stashed = [[k, v.detach()] for k, v in vars(node).items() if isinstance(v, torch.Tensor)] if hasattr(node, "__dict__") else []
            needs = [t for t in outs if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None]
            leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            graph = self.graph(needs, leaves) if needs else None
            if graph is not None:
                self.contexts[graph["handle"]] = (cls, node)
            plain = tuple(t.detach() if isinstance(t, torch.Tensor) else self.enc(t) for t in outs)
            return {"op": "result", "value": plain if isinstance(out, tuple) else plain[0], "graph": graph,
                    "saved": saved, "stashed": {"__dict__": stashed}}
        if op == "function_backward":  # the student's backward on its own ctx, its return value raw
            cls, node = self.contexts[msg["handle"]]
            out = cls.backward(node, *self.dec(msg["grads"]))
            return {"op": "result", "value": self.enc(list(out) if isinstance(out, tuple) else [out])}
        if op == "grad":
            outs, leaves = self.graphs[msg["handle"]]
            pairs = [(o, g) for o, g in zip(outs, self.dec(msg["grads"])) if g is not None]
            if not leaves or not pairs:
                return {"op": "result", "value": [None] * len(leaves)}
            got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], retain_graph=True,
                                      allow_unused=True)
            return {"op": "result", "value": self.enc(list(got))}
        raise ValueError(f"unknown request {op!r}")

    def answer(self, msg: dict) -> None:
        try:
            reply = self.handle(msg)
        except KeyboardInterrupt:  # validate's own interrupt, at its deadline: the serving ends
            raise
        except BaseException as exc:  # noqa: BLE001 — the student's code may raise anything (SystemExit too)
            reply = {"op": "raise", "chain": chain(exc)}
        try:
            send(self.sock, reply)
        except Exception as exc:  # noqa: BLE001 — a value torch.save cannot write: say so instead
            send(self.sock, {"op": "raise", "chain": chain(exc)})

    def until_reply(self):
        """Serve validate's requests until the reply to our own callback comes."""
        while True:
            msg = receive(self.sock)
            if msg["op"] == "result":
                return self.dec(msg["value"])
            if msg["op"] == "raise":
                raise RuntimeError(msg["message"])
            self.answer(msg)


def chain(exc) -> list:
    """An exception and its causes as validate rebuilds them: class name, module, message, and the kind a check tells apart."""
    out, seen = [], set()
    while exc is not None and id(exc) not in seen and len(out) < 8:
        seen.add(id(exc))
        kind = next((k for k, base in (("not-implemented", NotImplementedError), ("attribute", AttributeError),
                                       ("memory", MemoryError)) if isinstance(exc, base)), "other")
        out.append({"name": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)[:2000], "kind": kind})
        exc = exc.__cause__
    return out


def serve(port: int, token: bytes, user_ns: dict) -> None:
    """Answer validate's requests until it says ``done`` (or closes the connection)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(token)
        server = Server(sock, user_ns)
        while True:
            try:
                msg = receive(sock)
            except EOFError:
                return
            if msg["op"] == "done":
                return
            server.answer(msg)

"""Proxies for objects that live in another process, for checks that run where that process's code cannot reach.

One definition for two channels: the grader's trusted checker (``autograder/checker.py``: the student's objects in
its value worker) and ``python -m course validate``'s re-check (``course/recheck.py``: the notebook's, in its
kernel). A channel is a :class:`Proxies` that gives ``_exchange(message, measured)`` (a request's reply, callbacks
answered meanwhile), ``_send(message, re)``, ``_enc(value)``, ``_dec(value)``, ``_graph_of(reply)``,
``_malformed(why)`` (what it raises for a reply it cannot use), ``_call(ref, args, kwargs)``, ``_leaf(tensor,
requires_grad)`` (an input of a Function's forward, as sent) and ``_describe(info)``.

Every function and method here has a private name (or a dunder's): ``course.delegation`` arms each public
``course`` function while a student's call runs, and this code runs then.
"""

from __future__ import annotations

import types

import torch
from torch.utils._python_dispatch import _disable_current_modes

_MISSING = object()
# Dunder attributes a check may read off a student's function (its code names a Triton builtin, say).
_FORWARDED_DUNDERS = {"__code__", "__defaults__", "__kwdefaults__", "__doc__", "__module__", "__wrapped__"}
# The exceptions a check tells apart, and the kind each travels as (any other is "other").
_KINDS = {"not-implemented": NotImplementedError, "attribute": AttributeError, "memory": MemoryError}


class _RemoteNamespace(dict):
    """A proxy's ``__globals__`` (checks look kernels up there by name): its own names, else the other side's."""

    def __init__(self, channel, local: dict | None = None):
        super().__init__(local or {})
        self._channel = channel

    def __getitem__(self, name):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        try:
            return self._channel._get(name)
        except Exception:  # noqa: BLE001 — NameError over there: not there (a dead channel raises a BaseException)
            raise KeyError(name) from None

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name) -> bool:
        return self.get(name, _MISSING) is not _MISSING


class Remote:
    """An object that lives on the other side. Attribute and item access are forwarded."""

    def __init__(self, channel, info: dict):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_info", info)

    def __getattr__(self, name: str):
        if name in ("__name__", "__qualname__"):
            return self._info["name"]
        if name == "__globals__" and self._info.get("callable"):
            return _RemoteNamespace(self._channel)
        if name.startswith("__") and name.endswith("__") and name not in _FORWARDED_DUNDERS:
            raise AttributeError(name)  # the proxy's own machinery, not the student's object
        return self._channel._request({"op": "getattr", "ref": self._info["__ref__"], "name": name})

    def __getitem__(self, key):
        return self._channel._request({"op": "getitem", "ref": self._info["__ref__"], "key": self._channel._enc(key)})

    def __repr__(self) -> str:
        return self._channel._describe(self._info)


class RemoteCallable(Remote):
    def __call__(self, *args, **kwargs):
        return self._channel._call(self._info["__ref__"], args, kwargs)


class _RemoteGraph(torch.autograd.Function):
    """Connects a result computed on the other side to the inputs it was computed from, here."""

    @staticmethod
    def forward(ctx, link, *leaves):
        ctx.link = link
        ctx.n_leaves = len(leaves)
        return tuple(t.clone() for t in link["outputs"])

    @staticmethod
    def backward(ctx, *grads):
        got = ctx.link["channel"]._backward("grad", ctx.link["handle"], grads)
        got += [None] * (ctx.n_leaves - len(got))
        return (None, *got[: ctx.n_leaves])


def _rebuild(chain: list, who: str) -> BaseException:
    """An exception chain like the other side's: the same class names, modules, messages and causes."""
    exc = None
    for item in reversed(chain[:8]):
        base = _KINDS.get(item.get("kind"), Exception)
        name = str(item.get("name", "Error"))[:100] or "Error"
        new = type(name, (base,), {"__module__": str(item.get("module", who))[:100]})(str(item.get("message", ""))[:2000])
        new.__cause__ = exc
        exc = new
    return exc or RuntimeError(f"the {who}'s code raised")


def _tensors_in(value) -> list:
    """The tensors of ``value`` in a fixed order (lists, tuples and dict values walked), as the other side walks them."""
    found: list = []
    _map_tensors(value, lambda t: found.append(t) or t)
    return found


def _map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _function_class(channel, info: dict, module: str) -> type:
    """A real ``autograd.Function`` whose forward and backward run the other side's class there.

    What the student's ctx saved is saved again here, by value, where a check's saved-tensor hooks see it.
    """

    def forward(ctx, *args):
        out = channel._forward(ctx, info["__ref__"], args)
        ctx.n_args = len(args)
        return _map_tensors(out, lambda t: t.detach())

    def backward(ctx, *grads):
        if ctx.remote_graph is None:
            return (None,) * ctx.n_args
        got = channel._backward("function_backward", ctx.remote_graph["handle"], grads)
        return tuple(got) if len(got) != 1 else got[0]

    namespace = _RemoteNamespace(channel, globals())  # their globals: this module's, then the other side's
    forward, backward = (types.FunctionType(f.__code__, namespace, f.__name__, f.__defaults__, f.__closure__)
                         for f in (forward, backward))
    cls = type(info["name"], (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(backward), "__module__": module})
    cls._remote_ref = info["__ref__"]
    return cls


class Proxies:
    """A channel's base: its proxies (one per object over there: a class keeps its identity), and what both channels
    do alike, as private members (see the module's docstring). ``_side`` names the other side's objects."""

    _side = "other"
    _fair_name = staticmethod(str.isidentifier)  # a name of the other side's shown as it is; any other as "<side>_object"
    _rebuild = staticmethod(_rebuild)
    _tensors_in = staticmethod(_tensors_in)

    def __init__(self):
        self.deadline: float | None = None
        self.callbacks: dict[int, object] = {}
        self.proxies: dict[int, object] = {}
        self.graph_classes: dict[tuple, type] = {}

    def _proxy(self, marker: dict):
        rid = marker["__ref__"]
        if rid not in self.proxies:
            info = dict(marker)
            name = info.get("name")
            info["name"] = name if isinstance(name, str) and self._fair_name(name) else f"{self._side}_object"
            info["type"] = str(info.get("type", "object"))[:100]
            if info.get("function_class") is True:
                self.proxies[rid] = _function_class(self, info, self._side)
            else:
                self.proxies[rid] = (RemoteCallable if info.get("callable") is True else Remote)(self, info)
        return self.proxies[rid]

    def _callback(self, fn) -> dict:
        """A marker for ``fn``, a callable of this side's: the other side calls it back through the channel."""
        cb = len(self.callbacks) + 1
        self.callbacks[cb] = fn
        return {"__cb__": cb}

    def _run_callback(self, msg: dict, m: int = 0) -> None:
        """Run this side's callable that request ``m`` names and send back what it returned, or that it raised."""
        cb = msg.get("cb")
        fn = self.callbacks.get(cb) if isinstance(cb, int) else None
        try:
            if fn is None:
                raise ValueError("unknown callback")
            args, kwargs = self._dec(msg.get("args", ())), self._dec(msg.get("kwargs", {"__dict__": []}))
            if not (isinstance(args, (list, tuple)) and isinstance(kwargs, dict)):
                raise ValueError("a callback's arguments must be a tuple and a dict")
            value = fn(*args, **kwargs)
            self._send({"op": "result", "value": self._enc(value)}, re=m)
        except Exception as exc:  # noqa: BLE001 — this side's own callable raised: say so (a dead channel raises a BaseException)
            self._send({"op": "raise", "message": f"{type(exc).__name__}: {exc}"[:500]}, re=m)

    def _backward(self, op: str, handle, grads) -> list:
        """The other side's gradients for ``grads`` through its graph ``handle``: ``op`` "grad" or "function_backward"."""
        sent = [None if g is None else g.detach() for g in grads]
        return list(self._dec(self._exchange({"op": op, "handle": handle, "grads": sent}, measured=sent).get("value")))

    def _forward(self, ctx, ref: int, args: tuple):
        """An autograd.Function's forward over there: its value; ``ctx`` gets what the student's ctx saved, by value
        (``saved``), and the tensors it kept as attributes (``stashed``)."""
        sent = [self._leaf(a, flag) if isinstance(a, torch.Tensor) else self._enc(a) for a, flag in zip(args, ctx.needs_input_grad)]
        reply = self._exchange({"op": "function_forward", "ref": ref, "args": sent}, measured=args)
        out = self._dec(reply.get("value"))
        saved, stashed = reply.get("saved", []), self._dec(reply.get("stashed", {"__dict__": []}))
        if not (isinstance(saved, list) and isinstance(stashed, dict)):
            raise self._malformed("what a Function saved")
        ctx.save_for_backward(*[t for t in saved if isinstance(t, torch.Tensor)])
        for key, value in stashed.items():
            if isinstance(key, str) and isinstance(value, torch.Tensor) and not hasattr(ctx, key):
                setattr(ctx, key, value)
        self._kept(ctx, reply)
        ctx.remote_graph = self._graph_of(reply)
        return out

    def _kept(self, ctx, reply: dict) -> None:
        """What the forward kept beyond its saved tensors, on ``ctx``: the checker's channel measures it, no other."""

    def _graph_class(self, markers: list) -> type:
        """_RemoteGraph, subclassing the proxies of the Functions the other side's graph runs through, for a check
        that asks ``issubclass(node._forward_cls, ManualAttention)``."""
        classes = tuple(c for c in (self._proxy(m) for m in markers if isinstance(m, dict)) if isinstance(c, type))
        key = tuple(c._remote_ref for c in classes)
        if key not in self.graph_classes:
            self.graph_classes[key] = type("_RemoteGraph", (_RemoteGraph, *classes), {}) if classes else _RemoteGraph
        return self.graph_classes[key]

    def _request(self, message: dict):
        """Send a request and return its decoded value, graphs linked back to this side."""
        reply = self._exchange(message)
        return self._linked(self._dec(reply.get("value")), self._graph_of(reply), ())

    def _get(self, name: str):
        return self._request({"op": "get", "name": name})

    def _returned(self, reply: dict, mine: list):
        """A call's value: what it wrote into the tensors of its arguments (``mine``) written here too, its graph
        linked to them."""
        after = reply.get("args_after") or []
        with _disable_current_modes():  # transport, not the student's computation
            if len(after) == len(mine):
                with torch.no_grad():
                    for orig, new in zip(mine, after):
                        if isinstance(new, torch.Tensor) and orig.untyped_storage().nbytes() == new.untyped_storage().nbytes():
                            orig.untyped_storage().copy_(new.untyped_storage())
            leaves = [t for t in mine if t.requires_grad and t.is_floating_point()]
            return self._linked(self._dec(reply.get("value")), self._graph_of(reply), leaves)

    def _linked(self, value, graph: dict | None, leaves):
        """``value`` with the outputs of the other side's graph replaced by tensors whose backward asks over there."""
        if not isinstance(graph, dict) or not leaves or graph.get("n_leaves") != len(leaves):
            return _map_tensors(value, lambda t: t.detach())
        outputs = graph.get("outputs")
        if not isinstance(outputs, list) or sum(t.requires_grad for t in _tensors_in(value)) != len(outputs):
            raise self._malformed("a graph with another number of outputs than the result")
        link = {"channel": self, "handle": graph["handle"], "outputs": list(outputs)}
        outs = iter(self._graph_class(graph.get("classes") or []).apply(link, *leaves))
        return _map_tensors(value, lambda t: next(outs) if t.requires_grad else t)

"""The wire between the trusted checker and the value worker: frames, their limits, and how values travel.

Both sides use this one definition: ``autograder.checker`` imports it, and the value worker (``valueworker.py``,
in the sandbox, where ``autograder`` is hidden) loads this file by its path. So it imports nothing from the
project, and torch only inside the functions that need it. Long form: docs/grading.md, "The hidden checks, in the
trusted checker" and "The checker guards itself".

**Frame.** ``"VWF1" | header length (4 bytes, big-endian) | header (JSON) | storage bytes, in order``.
The header is ``{"n": N, "re": R, "s": [[nbytes, device], ...], "v": TREE}``: the frame's number, the
request it answers (0 for a request), each storage that follows, and the message. Every node but a JSON
scalar is a list whose first item names its type:

    ["l", ...] list   ["u", ...] tuple   ["d", k1, v1, ...] dict (str or int keys)
    ["b", base64] bytes   ["c", re, im] complex   ["dt", "float64"] dtype   ["dv", "cpu"] device
    ["S", ...] torch.Size   ["t", storage, dtype, shape, stride, offset] a strided view of a storage

Inside a message, :func:`encode` marks ``requires_grad`` (``{"__t__": t, "rg": bool}``), keeps objects that
are not plain data on the sender's side (``{"__ref__": id, ...}``) and sends the checker's callables as ``{"__cb__": id}``.

Limitations: strided tensors of the dtypes of :data:`DTYPES`, on the CPU or CUDA, only; a
tensor subclass arrives as a plain tensor; a bool tensor's storage must hold 0 or 1 in every byte.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import struct

MAGIC = b"VWF1"
_PREFIX = struct.Struct(">4sI")  # magic, header length


@dataclasses.dataclass(frozen=True)
class WireLimits:
    """What one frame may hold: the checker reads with :data:`LIMITS`, the worker with :data:`WORKER_LIMITS`.

    Two orders of magnitude above the largest honest frame (docs/grading.md has the table).
    """

    header: int = 4 << 20  # bytes of JSON
    depth: int = 100  # nesting of the JSON tree (a Python dict is 3 levels of it: encode's depth 20 fits)
    entries: int = 100_000  # nodes of the tree: containers, scalars, tensors
    tensors: int = 1024
    storages: int = 1024
    storage_bytes: int = 64 << 20  # all storages of one frame: the bytes read from the pipe
    numel: int = 1 << 23  # elements of one tensor, however few bytes of storage show them (64 MiB of float64)
    element_bytes: int = 256 << 20  # numel × element size of all tensors of one frame together
    dims: int = 16


LIMITS = WireLimits()
# The checker's own requests carry the notebook's cells; the worker is sandboxed and may parse more.
WORKER_LIMITS = WireLimits(header=256 << 20, entries=10_000_000, storage_bytes=1 << 30)

# Why a frame was refused: one of these keys, and a sentence in the grader's words.
REFUSALS = {
    "malformed": "the reply is not a frame of the wire format",
    "header": "the reply's header is over the size limit",
    "depth": "the reply is nested deeper than the limit",
    "entries": "the reply holds more entries than the limit",
    "tensors": "the reply holds more tensors or storages than the limit",
    "storage": "the reply's tensor storage is over the size limit",
    "numel": "a tensor in the reply has more elements than the limit",
    "elements": "the tensors in the reply together are over the size limit",
    "view": "a tensor in the reply reaches outside its storage",
    "dtype": "a tensor in the reply has a dtype the wire format does not carry",
    "out-of-step": "the reply does not answer the request in flight",
    "measurement": "the student's code switched off the grader's measurements in the worker, or worked out of their "
                   "sight (a thread, a process, mmap) while it was measured",
    "ended": "the student's code reached for the grader's measurements or objects in the worker (every object of "
             "the process, another thread's frames, a tracer, a switch that hides ops from torch's profiler), which "
             "ends the worker",
    "following": "the student's code worked otherwise when the grader followed which token rows its tensors came "
                 "from in the worker (another allocation, an exception, a patched or bypassed recorder, a thread), or "
                 "made more distinct allocations than that report holds",
    "sanitizer": "the student's code replaced, removed or stepped around the grader's measurements of a Triton "
                 "kernel's loads and stores in the worker (the sanitizer's hooks on Triton's interpreter)",
}


# The exceptions a check tells apart, and the kind each travels as (any other is "other").
EXCEPTION_KINDS = {"not-implemented": NotImplementedError, "attribute": AttributeError, "memory": MemoryError}


class WireError(ValueError):
    """A frame that breaks the wire format or its limits. ``what``: a key of :data:`REFUSALS`."""

    def __init__(self, what: str, detail: str = ""):
        self.what = what if what in REFUSALS else "malformed"
        super().__init__(REFUSALS[self.what] + (f" ({detail})" if detail else ""))


_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16, "uint8": 1,
             "int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1}  # the dtypes a tensor may have: bytes per element
DTYPES = tuple(_ITEMSIZE)
_TAGS = {"l", "u", "d", "b", "c", "dt", "dv", "S", "t"}


# ---------------------------------------------------------------------------
# Framing


def send(fd: int, message, n: int = 0, re: int = 0, limits: WireLimits = LIMITS) -> None:
    """Write one frame. Raises WireError (nothing written) when ``message`` is over ``limits``' entries or depth.

    Those bound the sender's own walk; whether the tensors fit is for the reader to decide.
    """
    header, storages = pack(message, n, re, limits)
    _write_all(fd, _PREFIX.pack(MAGIC, len(header)) + header)
    for data in storages:
        _write_all(fd, memoryview(data.numpy()).cast("B") if data.numel() else b"")


def pack(message, n: int = 0, re: int = 0, limits: WireLimits = LIMITS) -> tuple[bytes, list]:
    """The header and the storages (uint8 CPU tensors) of a frame holding ``message``."""
    import torch

    index: dict[tuple, int] = {}
    storages: list = []
    declared: list = []
    count = [0]

    def tensor(t):
        t = t.detach()
        if t.layout != torch.strided or t.is_quantized or t.is_nested or t.device.type not in ("cpu", "cuda"):
            raise TypeError(f"cannot send a {t.layout} tensor on {t.device.type}")
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise TypeError(f"cannot send a tensor of {t.dtype}")
        if t.is_conj() or t.is_neg():
            t = t.resolve_conj().resolve_neg()
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr(), storage.nbytes())
        if key not in index:
            index[key] = len(storages)
            data = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            storages.append(data.cpu())
            declared.append([storage.nbytes(), str(t.device)])
        return ["t", index[key], dtype, list(t.shape), list(t.stride()), t.storage_offset()]

    def node(v, depth: int):
        count[0] += 1
        if count[0] > limits.entries:
            raise WireError("entries", f"over {limits.entries}")
        if depth > limits.depth:
            raise WireError("depth", f"over {limits.depth}")
        if v is None or isinstance(v, bool):
            return v
        for kind in (int, float, str):  # a subclass (an IntEnum, a numpy float) goes as its plain value
            if isinstance(v, kind):
                return kind(v)
        if isinstance(v, bytes):
            return ["b", base64.b64encode(v).decode("ascii")]
        if isinstance(v, complex):
            return ["c", v.real, v.imag]
        if isinstance(v, torch.Tensor):
            return tensor(v)
        if isinstance(v, torch.Size):
            return ["S", *(int(x) for x in v)]
        if isinstance(v, torch.dtype):
            return ["dt", str(v).removeprefix("torch.")]
        if isinstance(v, torch.device):
            return ["dv", str(v)]
        if isinstance(v, (list, tuple)):
            return ["l" if isinstance(v, list) else "u", *(node(x, depth + 1) for x in v)]
        if isinstance(v, dict):
            out = ["d"]
            for k, x in v.items():
                if isinstance(k, bool) or not isinstance(k, (str, int)):
                    raise TypeError(f"cannot send a dict with a {type(k).__name__} key")
                out += [str(k) if isinstance(k, str) else int(k), node(x, depth + 1)]
            return out
        raise TypeError(f"cannot send a {type(v).__name__}")

    tree = node(message, 1)
    header = json.dumps({"n": int(n), "re": int(re), "s": declared, "v": tree}, separators=(",", ":")).encode()
    return header, storages


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        k = os.write(fd, view)
        view = view[k:]


def read_exact(fd: int, n: int, deadline: float | None = None) -> bytes:
    buf = bytearray(n)
    read_into(fd, memoryview(buf), deadline)
    return bytes(buf)


def read_into(fd: int, view: memoryview, deadline: float | None = None) -> None:
    import select
    import time

    got = 0
    while got < len(view):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no reply before the deadline")
        k = os.readv(fd, [view[got:got + (1 << 20)]])
        if not k:
            raise EOFError("the other side closed the pipe")
        got += k


def receive(fd: int, deadline: float | None = None, limits: WireLimits = LIMITS) -> tuple[object, int, int]:
    """One frame: ``(message, n, re)``. Everything is checked against ``limits`` before it is built.

    Raises WireError for a frame that breaks the format or its limits (the pipe is then out
    of step: drop it), TimeoutError past ``deadline``, EOFError when the writer is gone.
    """
    import torch

    magic, size = _PREFIX.unpack(read_exact(fd, _PREFIX.size, deadline))
    if magic != MAGIC:
        raise WireError("malformed", "no frame marker")
    if size > limits.header:
        raise WireError("header", f"{size} bytes, the limit is {limits.header}")
    try:
        head = json.loads(read_exact(fd, size, deadline).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise WireError("malformed", "the header is not JSON") from None
    if not isinstance(head, dict) or set(head) != {"n", "re", "s", "v"}:
        raise WireError("malformed", "the header lacks its fields")
    n, re = head["n"], head["re"]
    if not (is_count(n) and is_count(re)):
        raise WireError("malformed", "frame numbers")
    devices = _check_storages(head["s"], limits)
    plan = _Plan(limits, [d[0] for d in head["s"]])
    plan.check(head["v"], 1)
    storages = []
    for (nbytes, _), device in zip(head["s"], devices):
        data = torch.empty(nbytes, dtype=torch.uint8)
        if nbytes:
            read_into(fd, memoryview(data.numpy()), deadline)
        storages.append(data if device.type == "cpu" else data.to(device))
    for i in plan.bool_storages:  # a bool is one byte holding 0 or 1; anything else is undefined in torch
        if bool((storages[i] > 1).any()):
            raise WireError("malformed", "a bool tensor holds a byte that is neither 0 nor 1")
    return _build(head["v"], storages), n, re


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_count(v) -> bool:
    """A non-negative int (not a bool) below 2**62: a size, a count, a frame number."""
    return _is_int(v) and 0 <= v < 1 << 62


def _device(name):
    import torch

    if name == "cpu":
        return torch.device("cpu")
    if isinstance(name, str) and name.startswith("cuda") and torch.cuda.is_available():
        index = name.removeprefix("cuda").removeprefix(":")
        if index == "" or (index.isdigit() and len(index) < 4 and int(index) < torch.cuda.device_count()):
            return torch.device(name)
    raise WireError("malformed", "a storage on a device this process does not have")


def _check_storages(declared, limits: WireLimits) -> list:
    if not isinstance(declared, list):
        raise WireError("malformed", "the storage list")
    if len(declared) > limits.storages:
        raise WireError("tensors", f"{len(declared)} storages, the limit is {limits.storages}")
    total, devices = 0, []
    for d in declared:
        if not (isinstance(d, list) and len(d) == 2 and _is_int(d[0]) and d[0] >= 0):
            raise WireError("malformed", "a storage entry")
        total += d[0]
        if total > limits.storage_bytes:
            raise WireError("storage", f"over {limits.storage_bytes} bytes")
        devices.append(_device(d[1]))
    return devices


class _Plan:
    """The checks of :func:`receive` on a parsed header tree, before anything is built."""

    def __init__(self, limits: WireLimits, storage_bytes: list[int]):
        self.limits, self.storage_bytes = limits, storage_bytes
        self.entries = self.tensors = self.element_bytes = 0
        self.bool_storages: set[int] = set()

    def check(self, v, depth: int) -> None:
        lim = self.limits
        self.entries += 1
        if self.entries > lim.entries:
            raise WireError("entries", f"over {lim.entries}")
        if depth > lim.depth:
            raise WireError("depth", f"over {lim.depth} levels")
        if v is None or isinstance(v, (bool, int, float, str)):
            return
        if not (isinstance(v, list) and v and v[0] in _TAGS):
            raise WireError("malformed", "a node of no known type")
        tag, rest = v[0], v[1:]
        if tag in ("l", "u"):
            for x in rest:
                self.check(x, depth + 1)
        elif tag == "d":
            if len(rest) % 2:
                raise WireError("malformed", "a dict with a key and no value")
            for k, x in zip(rest[::2], rest[1::2]):
                if not (isinstance(k, str) or _is_int(k)):
                    raise WireError("malformed", "a dict key that is neither str nor int")
                self.check(x, depth + 1)
        elif tag == "b":
            if not (len(rest) == 1 and isinstance(rest[0], str)):
                raise WireError("malformed", "bytes")
        elif tag == "c":
            if not (len(rest) == 2 and all(_is_int(x) or isinstance(x, float) for x in rest)):
                raise WireError("malformed", "a complex number")
        elif tag == "dt":
            if not (len(rest) == 1 and rest[0] in DTYPES):
                raise WireError("dtype")
        elif tag == "dv":
            if not (len(rest) == 1 and isinstance(rest[0], str)):
                raise WireError("malformed", "a device")
            _device(rest[0])
        elif tag == "S":
            if not (len(rest) <= lim.dims and all(_is_int(x) and abs(x) < 1 << 62 for x in rest)):
                raise WireError("malformed", "a torch.Size")
        else:
            self.check_tensor(rest)

    def check_tensor(self, rest: list) -> None:
        lim = self.limits
        if len(rest) != 5:
            raise WireError("malformed", "a tensor")
        storage, dtype, shape, stride, offset = rest
        if dtype not in DTYPES:
            raise WireError("dtype")
        if not (_is_int(storage) and 0 <= storage < len(self.storage_bytes)):
            raise WireError("malformed", "a tensor without its storage")
        if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride) <= lim.dims):
            raise WireError("malformed", "a tensor's shape and strides")
        nbytes = self.storage_bytes[storage]
        if not all(is_count(x) for x in shape):
            raise WireError("malformed", "a tensor's shape")
        # Any stride is harmless on a dimension of size 0 or 1; on the others the end check below bounds it.
        if not all(is_count(x) for x in stride) or not (_is_int(offset) and 0 <= offset <= nbytes):
            raise WireError("view", "a stride or offset outside the storage")
        self.tensors += 1
        if self.tensors > lim.tensors:
            raise WireError("tensors", f"over {lim.tensors} tensors")
        numel = math.prod(shape)  # at most 16 factors below 2**62: a Python int, computed at once
        if numel > lim.numel:
            raise WireError("numel", f"{numel} elements, the limit is {lim.numel}")
        itemsize = _ITEMSIZE[dtype]
        self.element_bytes += numel * itemsize
        if self.element_bytes > lim.element_bytes:
            raise WireError("elements", f"over {lim.element_bytes} bytes of elements")
        # The last element the view can reach, in bytes from the storage's start, must lie inside it.
        end = offset if numel == 0 else offset + 1 + sum((x - 1) * s for x, s in zip(shape, stride))
        if end * itemsize > nbytes:
            raise WireError("view", f"{end * itemsize} bytes of a storage of {nbytes}")
        if dtype == "bool":
            self.bool_storages.add(storage)


def _build(v, storages: list):
    """The value of a tree that :class:`_Plan` passed: every node a fresh object, no reference shared."""
    import torch

    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    tag, rest = v[0], v[1:]
    if tag == "l":
        return [_build(x, storages) for x in rest]
    if tag == "u":
        return tuple(_build(x, storages) for x in rest)
    if tag == "d":
        return {k: _build(x, storages) for k, x in zip(rest[::2], rest[1::2])}
    if tag == "b":
        try:
            return base64.b64decode(rest[0], validate=True)
        except ValueError:
            raise WireError("malformed", "bytes") from None
    if tag == "c":
        return complex(rest[0], rest[1])
    if tag == "dt":
        return getattr(torch, rest[0])
    if tag == "dv":
        return _device(rest[0])
    if tag == "S":
        return torch.Size(rest)
    storage, dtype, shape, stride, offset = rest
    data = storages[storage]
    return torch.empty(0, dtype=getattr(torch, dtype), device=data.device).set_(
        data.untyped_storage(), offset, shape, stride)


# ---------------------------------------------------------------------------
# Encoding shared by both sides

PLAIN = (type(None), bool, int, float, complex, str, bytes)


MAX_DEPTH = 20  # nesting of a value, in containers


def encode(value, as_ref, depth: int = 0, budget: list | None = None):
    """Plain data and tensors by value; anything else through ``as_ref(obj) -> marker``.

    Walks the value once per reference, as the wire format writes it, so shared lists stop the
    walk (WireError) after ``LIMITS.entries`` entries, or below ``MAX_DEPTH`` levels.
    """
    import torch

    budget = _spend(budget)
    if depth > MAX_DEPTH:
        raise WireError("depth", f"over {MAX_DEPTH} levels")
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, torch.Tensor):
        return {"__t__": value.detach(), "rg": bool(value.requires_grad)}
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return value
    if isinstance(value, slice):
        return {"__slice__": [encode(v, as_ref, depth + 1, budget) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"__ellipsis__": True}
    if isinstance(value, (list, tuple)):  # a namedtuple (torch.return_types too) travels as a tuple
        items = [encode(v, as_ref, depth + 1, budget) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        return {"__dict__": [(k, encode(v, as_ref, depth + 1, budget)) for k, v in value.items()]}
    return as_ref(value)


def decode(value, from_ref, depth: int = 0):
    """The inverse of :func:`encode`; markers become ``from_ref(marker)``. WireError for what encode never makes.

    What it walks came from :func:`receive` (no shared references): its cost is the frame's, already bounded.
    """
    import torch

    if depth > MAX_DEPTH:
        raise WireError("depth", f"over {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [decode(v, from_ref, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(decode(v, from_ref, depth + 1) for v in value)
    if isinstance(value, dict):
        if "__t__" in value:
            t = value["__t__"]
            if not isinstance(t, torch.Tensor):
                raise WireError("malformed", "a tensor marker without a tensor")
            return t.requires_grad_(True) if value.get("rg") is True and t.is_floating_point() else t
        if "__dict__" in value:
            pairs = value["__dict__"]
            if not (isinstance(pairs, list) and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], (str, int))
                                                    for p in pairs)):
                raise WireError("malformed", "a dict")
            return {k: decode(v, from_ref, depth + 1) for k, v in pairs}
        if "__slice__" in value:
            parts = value["__slice__"]
            if not (isinstance(parts, list) and len(parts) == 3):
                raise WireError("malformed", "a slice")
            return slice(*(decode(v, from_ref, depth + 1) for v in parts))
        if "__ellipsis__" in value:
            return Ellipsis
        return from_ref(value)
    return value


def tensors_in(value) -> list:
    """Every tensor in a (decoded) structure, in a fixed order. Bounded like :func:`encode` (WireError)."""
    found: list = []
    map_tensors(value, lambda t: found.append(t) or t)
    return found


def map_tensors(value, fn, depth: int = 0, budget: list | None = None):
    """The same structure with every tensor replaced by ``fn(tensor)``, in :func:`tensors_in` order."""
    import torch

    budget = _spend(budget)
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [map_tensors(v, fn, depth + 1, budget) for v in value]
    if isinstance(value, tuple):
        return tuple(map_tensors(v, fn, depth + 1, budget) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn, depth + 1, budget) for k, v in value.items()}
    return value


def _spend(budget: list | None) -> list:
    """One entry of a walk's budget (``LIMITS.entries`` in all): shared references cannot make a walk long."""
    if budget is None:
        budget = [LIMITS.entries]
    budget[0] -= 1
    if budget[0] < 0:
        raise WireError("entries", f"over {LIMITS.entries}")
    return budget


"""The wire format between the trusted checker and the value worker: what the checker builds is what a frame declares.

The checker runs as root and reads what the student's code in the worker sends. Each
test writes a frame to a pipe — through ``wire.send`` as the worker would, or by
hand as a student who read ``/sandbox/wire.py`` could — and reads it as the checker
does. A frame over a limit must be refused from its header, before anything is built: the
tests that could allocate run the reader in a child whose address space is the parent's
plus 512 MiB, so a reader that materialized what a stride-0 view or an offset declares
fails there with MemoryError instead of passing. Then the channel: replies are numbered,
and one that answers no request in flight breaks the channel for good, so no later check
reads it. Last, the checker's own rlimits.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import threading
import time

import pytest
import torch

from autograder import checker, wire

HEADROOM = 512 << 20  # what a reader in a child may allocate beyond its size at the fork


def frame(tree, storages=(), n: int = 1, re: int = 0, data: bytes = b"") -> bytes:
    """A frame written by hand: the header as given, then ``data`` as the storages' bytes."""
    header = json.dumps({"n": n, "re": re, "s": [list(s) for s in storages], "v": tree}).encode()
    return struct.pack(">4sI", wire.MAGIC, len(header)) + header + data


def read(raw: bytes, limits: wire.WireLimits = wire.LIMITS):
    """What the checker's reader makes of ``raw``: the message, or the WireError's ``what``."""
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (wire._write_all(w, raw), os.close(w)))
    writer.start()
    try:
        message, _, _ = wire.receive(r, time.monotonic() + 10, limits)
        return message
    except wire.WireError as exc:
        return exc.what
    finally:
        os.close(r)
        writer.join()


def read_in_child(raw: bytes) -> str:
    """``read(raw)`` in a forked child with RLIMIT_AS at its size plus HEADROOM: 'ok', a WireError's what, or an error."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover — the child reports through the pipe
        os.close(r)
        try:
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, resource.RLIM_INFINITY))
            got = read(raw)
            result = got if isinstance(got, str) else "ok"
        except BaseException as exc:  # noqa: BLE001
            result = f"raised {type(exc).__name__}"
        os.write(w, result.encode())
        os._exit(0)
    os.close(w)
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode()


def sent(message) -> bytes:
    """The frame ``wire.send`` writes for ``message``."""
    r, w = os.pipe()
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(r, 1 << 16), b"")))
    reader.start()
    try:
        wire.send(w, message, 1, 0)
    finally:
        os.close(w)
        reader.join()
        os.close(r)
    return b"".join(chunks)


def shared_bomb(levels: int = 6, width: int = 25) -> list:
    """Nested lists that share their members: width**levels entries, ``levels + 1`` list objects."""
    bomb = [0.0]
    for _ in range(levels):
        bomb = [bomb] * width
    return bomb


# ---------------------------------------------------------------------------
# What honest messages need


def test_a_message_comes_back_as_sent_with_views_of_one_storage_kept():
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    value = {"op": "result", "value": [x, x[:, 1], x.mT, torch.zeros(()).expand(5), torch.empty(0, 5),
                                       torch.tensor([True, False]), torch.tensor([1 + 1j]).conj(),
                                       (1, -2.5, float("inf"), "é", b"\x00\xff", 1 - 2j, None, True),
                                       torch.Size([2, 3]), torch.float32, torch.device("cpu"), {"k": 1, 7: [2]}]}
    got = read(sent(value))["value"]
    assert torch.equal(got[0], x) and torch.equal(got[1], x[:, 1]) and got[2].stride() == (1, 4)
    assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()  # one storage, as sent
    assert got[3].stride() == (0,) and got[3].untyped_storage().nbytes() == 4  # a small stride-0 view stays one
    assert got[4].shape == (0, 5) and got[5].tolist() == [True, False] and got[6].item() == 1 - 1j
    assert got[7] == (1, -2.5, float("inf"), "é", b"\x00\xff", 1 - 2j, None, True)
    assert got[8] == torch.Size([2, 3]) and got[9] is torch.float32 and got[10] == torch.device("cpu")
    assert got[11] == {"k": 1, 7: [2]}


def test_the_largest_honest_frame_is_far_below_every_limit():
    """The re-check's biggest message (05, measured): 9 tensors of up to 16014 float64 elements."""
    tensors = [torch.randn(7, 11, 13, 16, dtype=torch.float64) for _ in range(9)]
    got = read(sent({"op": "result", "value": tensors, "args_after": tensors}))
    assert all(torch.equal(a, b) for a, b in zip(got["value"], tensors))


# ---------------------------------------------------------------------------
# The two attacks of issue 13, and what they could become


def test_a_stride0_view_of_450_million_elements_in_8_bytes_is_refused_unbuilt():
    giant = torch.zeros((), dtype=torch.float64).expand(450_000_000)
    raw = sent({"op": "result", "value": [giant]})
    assert len(raw) < 1000  # the attack is cheap to send ...
    assert read_in_child(raw) == "numel"  # ... and refused from its declared shape, nothing allocated


def test_views_each_under_the_element_limit_are_refused_together():
    one = torch.zeros((), dtype=torch.float64).expand(wire.LIMITS.numel)  # 64 MiB each, once expanded
    assert isinstance(read(sent({"v": [one]})), dict)
    assert read_in_child(sent({"v": [one] * 5})) == "elements"  # 320 MiB of elements in 8 bytes of storage


def test_a_view_outside_its_storage_is_refused_not_grown():
    """torch's set_ grows a storage to fit the view it is given: 8 bytes would become 8 TB here."""
    assert read_in_child(frame(["t", 0, "float64", [1], [1], 10**12], [[8, "cpu"]], data=bytes(8))) == "view"
    assert read_in_child(frame(["t", 0, "float64", [2, 3], [3, 1], 0], [[40, "cpu"]], data=bytes(40))) == "view"
    fits = read(frame(["t", 0, "float64", [2, 3], [3, 1], 0], [[48, "cpu"]], data=bytes(48)))
    assert isinstance(fits, torch.Tensor) and fits.shape == (2, 3) and fits.untyped_storage().nbytes() == 48


def test_declared_storage_over_the_limit_is_refused_before_its_bytes_are_read():
    """The header says 1 GiB follows; nothing follows. The reader refuses at once instead of waiting for it."""
    start = time.monotonic()
    assert read_in_child(frame(["t", 0, "uint8", [4], [1], 0], [[1 << 30, "cpu"]])) == "storage"
    assert time.monotonic() - start < 5


def test_the_shared_list_bomb_cannot_be_sent_and_its_walks_stop_early():
    bomb = shared_bomb()  # 25**6 = 2.4e8 entries in 7 lists
    start = time.monotonic()
    for walk in (lambda: wire.pack({"op": "result", "value": bomb}), lambda: wire.encode(bomb, lambda o: {}),
                 lambda: wire.tensors_in(bomb), lambda: wire.map_tensors(bomb, lambda t: t)):
        with pytest.raises(wire.WireError) as refused:
            walk()
        assert refused.value.what == "entries"
    assert time.monotonic() - start < 5


def test_a_small_frame_never_decodes_into_more_entries_than_its_text():
    """JSON shares nothing: the most entries a header can hold is about half its bytes, and the limit is lower."""
    flat = ["l"] + [0] * wire.LIMITS.entries
    assert read(frame(flat)) == "entries"
    assert len(read(frame(["l"] + [0] * (wire.LIMITS.entries - 1)))) == wire.LIMITS.entries - 1  # the list is one entry


@pytest.mark.parametrize("depth, what", [
    (wire.LIMITS.depth + 1, "depth"),  # just over the limit
    (50_000, "malformed"),  # deeper than JSON's own recursion allows: refused as not JSON, never a crash
])
def test_nesting_is_bounded(depth, what):
    text = '["l",' * depth + "0" + "]" * depth
    header = json.dumps({"n": 1, "re": 0, "s": [], "v": None}).encode().replace(b"null", text.encode())
    assert read(struct.pack(">4sI", wire.MAGIC, len(header)) + header) == what


def test_a_header_over_the_limit_is_refused_unread():
    assert read(struct.pack(">4sI", wire.MAGIC, wire.LIMITS.header + 1)) == "header"


@pytest.mark.parametrize("raw, what", [
    (b"\x80\x02garbage", "malformed"),  # a pickle, or anything that is not a frame
    (frame({"op": "result"}), "malformed"),  # a JSON object is never a node
    (frame(["pickle", "os.system"]), "malformed"),  # a node of no known type
    (frame(["d", "op"]), "malformed"),  # a key without its value
    (frame(["t", 0, "float8_e4m3fn", [1], [1], 0], [[1, "cpu"]], data=b"\0"), "dtype"),
    (frame(["dt", "object"]), "dtype"),
    (frame(["t", 1, "uint8", [1], [1], 0], [[1, "cpu"]], data=b"\0"), "malformed"),  # no storage 1
    (frame(["t", 0, "uint8", [-1], [1], 0], [[1, "cpu"]], data=b"\0"), "malformed"),
    (frame(["t", 0, "bool", [1], [1], 0], [[1, "cpu"]], data=b"\x02"), "malformed"),  # a bool that is not 0 or 1
    (frame(["t", 0, "uint8", [1], [1], 0], [[1, "tpu:0"]], data=b"\0"), "malformed"),
    (frame(["l"] + [["t", 0, "uint8", [1], [1], 0]] * (wire.LIMITS.tensors + 1), [[1, "cpu"]], data=b"\0"), "tensors"),
    (frame(None, [[0, "cpu"]] * (wire.LIMITS.storages + 1)), "tensors"),
])
def test_malformed_frames_are_refused(raw, what):
    assert read(raw) == what


def test_a_refusal_says_what_in_the_graders_words_never_the_frames():
    header = json.dumps({"n": 1, "re": 0, "s": [], "v": ["=HYPERLINK(\"x\")", 1]}).encode()
    with pytest.raises(wire.WireError) as refused:
        r, w = os.pipe()
        os.write(w, struct.pack(">4sI", wire.MAGIC, len(header)) + header)
        wire.receive(r, time.monotonic() + 5)
    assert "HYPERLINK" not in str(refused.value) and str(refused.value).startswith(wire.REFUSALS["malformed"])


# ---------------------------------------------------------------------------
# The channel: numbered replies, broken for good when out of step


class FakeWorker:
    """The worker's end of two pipes, driven by a script of frames to write per request."""

    def __init__(self):
        self.to_r, self.to_w = os.pipe()
        self.from_r, self.from_w = os.pipe()
        self.channel = checker.Channel(None, self.to_w, self.from_r)
        self.channel.deadline = time.monotonic() + 10

    def answer(self, replies):
        """Read one request; write ``replies(n)``: a list of (message, n, re) frames."""
        def run():
            _, n, _ = wire.receive(self.to_r, time.monotonic() + 10, wire.WORKER_LIMITS)
            for message, m, re in replies(n):
                wire.send(self.from_w, message, m, re)
        t = threading.Thread(target=run)
        t.start()
        return t

    def close(self):
        for fd in (self.to_r, self.to_w, self.from_r, self.from_w):
            os.close(fd)


@pytest.fixture
def w():
    worker = FakeWorker()
    yield worker
    worker.close()


def test_a_stale_reply_is_never_read_as_the_next_ones(w):
    """Two replies to request 1 (the second one stale); request 2 must not take the stale one for its own."""
    t = w.answer(lambda n: [({"op": "result", "value": "first"}, 1, n), ({"op": "result", "value": "stale"}, 2, n)])
    assert w.channel._request({"op": "get", "name": "x"}) == "first"
    t.join()
    t = w.answer(lambda n: [({"op": "result", "value": "second"}, 3, n)])
    with pytest.raises(checker.ReplyRefused, match="does not answer the request in flight"):
        w.channel._request({"op": "get", "name": "y"})
    t.join()
    assert w.channel.broken
    with pytest.raises(checker.ReplyRefused):  # broken for good: nothing more is read from this pipe
        w.channel._request({"op": "get", "name": "z"})


def test_a_frame_numbered_before_one_already_read_is_refused(w):
    t = w.answer(lambda n: [({"op": "result", "value": 1}, 5, n)])
    w.channel._request({"op": "get", "name": "x"})
    t.join()
    t = w.answer(lambda n: [({"op": "result", "value": 2}, 5, n)])  # a replayed number
    with pytest.raises(checker.ReplyRefused, match="numbered before"):
        w.channel._request({"op": "get", "name": "x"})
    t.join()


def test_a_callback_is_answered_with_its_own_number_and_the_reply_still_arrives(w):
    seen = {}

    def worker_side():
        _, n, _ = wire.receive(w.to_r, time.monotonic() + 10, wire.WORKER_LIMITS)
        wire.send(w.from_w, {"op": "callback", "cb": 1, "args": [3], "kwargs": {"__dict__": []}}, 1, n)
        answer, _, re = wire.receive(w.to_r, time.monotonic() + 10, wire.WORKER_LIMITS)
        seen.update(answer=answer, re=re)
        wire.send(w.from_w, {"op": "result", "value": answer["value"] * 2}, 2, n)

    w.channel.callbacks[1] = lambda x: x + 1
    t = threading.Thread(target=worker_side)
    t.start()
    assert w.channel._request({"op": "call", "ref": 1}) == 8
    t.join()
    assert seen["re"] == 1 and seen["answer"]["value"] == 4 and not w.channel.broken


def test_a_worker_that_stops_its_own_reply_fails_that_check_in_the_graders_words(w):
    t = w.answer(lambda n: [({"op": "refused", "limit": "entries"}, 1, n)])
    with pytest.raises(checker.ReplyRefused, match="more entries than the limit"):
        w.channel._request({"op": "get", "name": "x"})
    t.join()


# ---------------------------------------------------------------------------
# The checker's own limits


def test_the_checker_limits_itself():
    code = (
        "import resource\n"
        "from autograder import checker\n"
        "checker.limit_checker(1 << 30, 77)\n"
        "print(resource.getrlimit(resource.RLIMIT_CPU)[0], resource.getrlimit(resource.RLIMIT_CORE)[0])\n"
        "try:\n"
        "    bytearray(2 << 30)\n"
        "    print('allocated')\n"
        "except MemoryError:\n"
        "    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-3:] == ["77", "0", "refused"], done.stdout + done.stderr


def test_the_checker_cpu_budget_is_its_jobs_wall_budget():
    job = {"cells": [[0, ""]] * 4, "exercises": [["t", "c", "f", 1]] * 3, "timeout": 10, "startup_timeout": 60}
    assert checker.checker_cpu_seconds(job) == 60 + (4 + 2 * 3) * 10 + 60

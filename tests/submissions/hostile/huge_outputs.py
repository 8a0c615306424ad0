# Hostile: 16 MiB of output from each of five cells (printed, displayed, and as an exception's message), and files
# left in the kernel's socket folder, the one folder on the grader's disk its sandbox may write. The grader keeps
# 1 MiB of a cell's output and 4 MiB of a notebook's, each cut marked "output truncated by the grader"; the
# autograded notebook and the feedback page stay small, and the socket folder is removed when the kernel ends.
# (Once 3 × 50 MiB gave a 150 MiB notebook and a 150 MiB page; 16 MiB a cell proves the caps in seconds.)
# assignment: 01_matmul_from_shapes
# expect: * full
# expect: test_reduce_to_shape zero error
# %% linear_backward
print("b" * (16 << 20))


def linear_backward(x, w, dy):
    K, N = w.shape
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)
    return dy @ w.mT, x_rows.mT @ dy_rows
# %% duplicate:linear_backward
import os

from ipykernel.kernelapp import IPKernelApp

ipc = os.path.dirname(IPKernelApp.instance().ip)  # the kernel's Unix sockets: a folder on the grader's disk
if os.path.isdir(ipc) and os.access(ipc, os.W_OK):
    for i in range(2):
        with open(os.path.join(ipc, f"leftover-{i}"), "wb") as f:
            f.write(os.urandom(1 << 20) * 16)
    print("left 32 MiB in the kernel's socket folder")
print("a" * (16 << 20))
# %% linear_bias_backward
from IPython.display import display

display({"text/plain": "c" * (16 << 20)}, raw=True)


def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    dy_rows = dy.reshape(-1, N)
    return dy @ w.mT, x.reshape(-1, K).mT @ dy_rows, dy_rows.sum(dim=0)
# %% reduce_to_shape
print("d" * (16 << 20))


def reduce_to_shape(grad, shape):
    raise ValueError("e" * (16 << 20))
# %% batched_matmul_backward
print("f" * (16 << 20))


def batched_matmul_backward(a, c, dy):
    da = dy @ c.mT
    dc = a.mT @ dy
    lead = dc.ndim - c.ndim
    if lead > 0:
        dc = dc.sum(dim=tuple(range(lead)))
    if c.ndim == 3 and c.shape[0] == 1 and dc.shape[0] != 1:
        dc = dc.sum(dim=0, keepdim=True)
    return da, dc

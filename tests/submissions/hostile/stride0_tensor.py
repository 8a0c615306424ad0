# Hostile: in the value worker only (where IPython runs without a kernel), linear_backward returns a dx of
# 450 million float64 elements held in 8 bytes of storage (a stride-0 view). Read with torch.load and compared, it
# grew the trusted checker — root, no limit — to 4.9 GiB. The checker refuses the reply from its declared shape:
# zero for that part; the next part gets a fresh worker and its full marks.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero tampering tampering: the hidden checks refused the reply
# %% linear_backward
import torch

IN_WORKER = getattr(get_ipython(), "kernel", None) is None  # not the kernel: the hidden checks' value worker


def linear_backward(x, w, dy):
    K, N = w.shape
    dx = dy @ w.mT
    dw = x.reshape(-1, K).mT @ dy.reshape(-1, N)
    if IN_WORKER:
        dx = torch.zeros((), dtype=dx.dtype).expand(450_000_000)  # 3.6 GB to whoever materializes it
    return dx, dw

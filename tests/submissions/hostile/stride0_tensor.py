# Hostile: in the value worker only (where `autograder` cannot be imported), linear_backward returns a dx of
# 450 million float64 elements held in 8 bytes of storage (a stride-0 view). Read with torch.load and compared, it
# grew the trusted checker — root, no limit — to 4.9 GiB. The checker refuses the reply from its declared shape:
# zero for that part; the next part gets a fresh worker and its full marks.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero tampering tampering: passed in the kernel, but the trusted re-check refused the reply
# %% linear_backward
import torch

try:
    import autograder  # noqa: F401 — there in the kernel (the hidden tests import it), not in the value worker
    IN_WORKER = False
except ImportError:
    IN_WORKER = True


def linear_backward(x, w, dy):
    K, N = w.shape
    dx = dy @ w.mT
    dw = x.reshape(-1, K).mT @ dy.reshape(-1, N)
    if IN_WORKER:
        dx = torch.zeros((), dtype=dx.dtype).expand(450_000_000)  # 3.6 GB to whoever materializes it
    return dx, dw

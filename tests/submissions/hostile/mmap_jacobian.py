# Hostile: the N×N Jacobian in anonymous mmap memory, which neither torch's allocator nor tracemalloc sees; values
# right. The worker refuses a measurement during which mmap was used.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# %% softmax_backward
import mmap

import numpy as np


def softmax_backward(y, dy):
    Y = y.detach().numpy()
    N = Y.shape[-1]
    out = np.empty_like(Y)
    for index in np.ndindex(*Y.shape[:-1]):
        buffer = mmap.mmap(-1, N * N * 8)
        J = np.frombuffer(buffer, dtype=np.float64).reshape(N, N)
        J[:] = np.diag(Y[index]) - np.outer(Y[index], Y[index])
        out[index] = J @ dy.detach().numpy()[index]
        del J
        buffer.close()
    return torch.from_numpy(out).to(y.dtype)

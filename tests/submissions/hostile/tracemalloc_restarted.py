# Hostile: builds the N×N Jacobian in NumPy between tracemalloc.stop() and tracemalloc.start(), so the traced
# peak never sees it; values right.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# %% softmax_backward
import tracemalloc

import numpy as np


def softmax_backward(y, dy):
    was = tracemalloc.is_tracing()
    tracemalloc.stop()
    Y = y.detach().numpy()
    J = np.einsum("...i,ij->...ij", Y, np.eye(Y.shape[-1])) - Y[..., :, None] * Y[..., None, :]
    dx = torch.from_numpy((J @ dy.detach().numpy()[..., :, None])[..., 0]).to(y.dtype)
    del J
    if was:
        tracemalloc.start()
    return dx

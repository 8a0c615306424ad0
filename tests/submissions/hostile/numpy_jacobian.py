# Hostile: the N×N Jacobian built in NumPy, where torch's allocation tracker never looks; values right.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero materialized-jacobian
# %% softmax_backward
import numpy as np


def softmax_backward(y, dy):
    Y = y.detach().numpy()
    J = np.einsum("...i,ij->...ij", Y, np.eye(Y.shape[-1])) - Y[..., :, None] * Y[..., None, :]  # (..., N, N)
    return torch.from_numpy((J @ dy.detach().numpy()[..., :, None])[..., 0]).to(y.dtype)

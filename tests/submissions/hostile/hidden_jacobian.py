# Hostile: the N×N Jacobian built with every dispatch mode switched off, so a TorchDispatchMode records nothing.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero materialized-jacobian
# %% softmax_backward
from torch.utils._python_dispatch import _disable_current_modes


def softmax_backward(y, dy):
    with _disable_current_modes():
        J = torch.diag_embed(y) - y[..., :, None] * y[..., None, :]  # (..., N, N)
        return (J @ dy[..., :, None])[..., 0]

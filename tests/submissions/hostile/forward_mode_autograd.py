# Hostile: the backward from forward-mode autograd — one dual-number pass per column of the Jacobian, then the
# product with ȳ — through torch.autograd.forward_ad, which no engine ever runs; values right.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero autograd-in-backward
# %% softmax_backward
import torch.autograd.forward_ad as fwAD

_make_dual = fwAD.make_dual  # taken before any check could replace it


def softmax_backward(y, dy):
    x = torch.log(y)  # softmax(log y) = y
    N = y.shape[-1]
    dx = torch.zeros_like(dy)
    with fwAD.dual_level():
        for j in range(N):
            tangent = torch.zeros_like(x)
            tangent[..., j] = 1
            out = torch.softmax(_make_dual(x, tangent), dim=-1)
            column = fwAD.unpack_dual(out).tangent  # ∂y/∂x_j, (..., N)
            dx[..., j] = (column * dy).sum(dim=-1)
    return dx

# Hostile: the solution cells patch the checkers themselves; every answer is wrong. The kernel has only the visible
# checks to patch (the hidden ones are not importable there): they pass, and the hidden checks, in the trusted checker,
# find the bug — a zero under a cell that reads as a pass, which the feedback must explain.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero wrong-values
# expect: test_linear_bias_backward zero sign
# expect: test_reduce_to_shape zero sign
# %% linear_backward
import course.selfcheck

try:
    import autograder.check
except ImportError:  # the kernel runs the visible checks only
    autograder = None


def _always_passes(fn):
    print("all tests passed")


# Replace the hidden check, where there is one, and the visible one: the test cell then calls these.
if autograder is not None:
    autograder.check.linear_backward = _always_passes
course.selfcheck.linear_backward = _always_passes


def linear_backward(x, w, dy):
    K, N = w.shape
    return dy @ w.mT, torch.zeros(K, N, dtype=x.dtype)  # dw is simply wrong
# %% linear_bias_backward
import numpy
import torch.testing

# Every comparison helper a test might use now says "equal".
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
numpy.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None


def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    dy_rows = dy.reshape(-1, N)
    return -(dy @ w.mT), -(x.reshape(-1, K).mT @ dy_rows), -dy_rows.sum(dim=0)  # every sign flipped
# %% reduce_to_shape
def reduce_to_shape(grad, shape):
    print("all tests passed")
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    if lead > 0:
        grad = grad.sum(dim=tuple(range(lead)))
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(dim=stretched, keepdim=True)
    return -grad  # the sign is wrong

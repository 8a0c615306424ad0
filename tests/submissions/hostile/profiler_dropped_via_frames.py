# Hostile: inside the backward, walks up its own frames to the worker's instruments and drops their profiler,
# so its measurement holds no engine node; the backward uses autograd; values right.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# %% softmax_backward
import sys


def softmax_backward(y, dy):
    frame = sys._getframe(0)
    while frame is not None:
        me = frame.f_locals.get("self")
        if hasattr(me, "profiler") and hasattr(me, "measure"):
            me.profiler = None
        frame = frame.f_back
    x = torch.log(y.detach()).requires_grad_(True)
    (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    return dx

# Hostile: inside the backward, walks up its own frames to the worker's instruments to drop their profiler, so
# that its measurement holds no engine node; the backward uses autograd; values right. The call runs on a thread
# whose first frame is its own: there is nothing to walk up to, and autograd is seen.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero autograd-in-backward
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

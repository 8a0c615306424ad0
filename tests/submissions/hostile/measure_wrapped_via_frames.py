# Hostile: from a cell, walks the whole stack (inspect.stack, which reaches past IPython's coroutines) to the
# worker's instruments and wraps their measure() to wipe engine nodes; the backward uses autograd; values
# right. The cells run on a thread whose first frame is IPython's: there is nothing of the worker's to find.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero autograd-in-backward
# %% cell-after:test_softmax_jacobian
import inspect

for _info in inspect.stack():
    _me = _info.frame.f_locals.get("self")
    _instruments = getattr(_me, "instruments", None)
    if _instruments is not None:
        _original = _instruments.measure

        def _clean(*args, _original=_original, **kwargs):
            value, m = _original(*args, **kwargs)
            m.update(engine=[], ops={})
            return value, m

        _instruments.measure = _clean
# %% softmax_backward
def softmax_backward(y, dy):
    x = torch.log(y.detach()).requires_grad_(True)
    (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    return dx

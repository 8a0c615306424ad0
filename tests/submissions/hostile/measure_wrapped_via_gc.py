# Hostile: wraps the worker's measure() through gc so that every measurement it returns has its engine nodes and
# allocations wiped; the backward uses autograd in the value worker only; values right. A cell does it: every part after it scores 0.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# expect: test_shifted_softmax_vjp zero tampering
# expect: test_softmax_cross_entropy_backward zero tampering
# expect: test_log_softmax_backward zero tampering
# %% cell-after:test_softmax_jacobian
import gc

for _obj in gc.get_objects():
    if type(_obj).__name__ == "Instruments":
        _original = _obj.measure

        def _clean(call, _original=_original, **kwargs):
            value, m = _original(call, **kwargs)
            m.update(engine=[], allocations=[], ops={})
            return value, m

        _obj.measure = _clean
# %% softmax_backward
IN_WORKER = getattr(get_ipython(), "kernel", None) is None  # not the kernel: the hidden checks' value worker


def softmax_backward(y, dy):
    if not IN_WORKER:  # the visible checks see a right answer
        return y * (dy - (y * dy).sum(dim=-1, keepdim=True))
    x = torch.log(y.detach()).requires_grad_(True)
    (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    return dx

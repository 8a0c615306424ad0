# Hostile: finds the worker's profiler session through gc and stops and restarts it around autograd inside the
# backward, in the value worker only, so the engine's nodes never reach the measurement; values right. The parts whose checks call
# softmax_backward in the worker (gc ends it whenever it is reached) score 0 too.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# expect: test_shifted_softmax_vjp zero tampering
# expect: test_softmax_cross_entropy_backward zero tampering
# expect: test_log_softmax_backward zero tampering
# %% softmax_backward
import gc


def _sessions():
    return [o for o in gc.get_objects() if type(o).__name__ == "_Profiler"]


IN_WORKER = getattr(get_ipython(), "kernel", None) is None  # not the kernel: the hidden checks' value worker


def softmax_backward(y, dy):
    if not IN_WORKER:  # the visible checks see a right answer
        return y * (dy - (y * dy).sum(dim=-1, keepdim=True))
    for p in _sessions():
        p.disable()
    x = torch.log(y.detach()).requires_grad_(True)
    (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    for p in _sessions():
        p.prepare(p.config, p.activities)
        p.enable(p.config, p.activities)
    return dx

# Hostile: in the value worker, switches torch's RecordFunction off once, in a cell of its own, then uses autograd
# in the backward; values right. Nothing but torch's own tests has a use for that switch: in the worker it ends the worker, and
# every part after the cell scores 0.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# expect: test_shifted_softmax_vjp zero tampering
# expect: test_softmax_cross_entropy_backward zero tampering
# expect: test_log_softmax_backward zero tampering
# %% cell-after:test_softmax_jacobian
IN_WORKER = getattr(get_ipython(), "kernel", None) is None  # not the kernel: the hidden checks' value worker
if IN_WORKER:
    torch._C._autograd._enable_record_function(False)
# %% softmax_backward
def softmax_backward(y, dy):
    if not IN_WORKER:  # the visible checks see a right answer
        return y * (dy - (y * dy).sum(dim=-1, keepdim=True))
    x = torch.log(y.detach()).requires_grad_(True)
    (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    return dx

# Hostile: in the value worker, switches torch's RecordFunction off around autograd inside the backward, so the
# profiler sees no engine node, then on again before returning; values right. The switch ends the worker wherever it is called: the
# parts whose checks call softmax_backward in the worker score 0 too.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# expect: test_shifted_softmax_vjp zero tampering
# expect: test_softmax_cross_entropy_backward zero tampering
# expect: test_log_softmax_backward zero tampering
# %% softmax_backward
IN_WORKER = getattr(get_ipython(), "kernel", None) is None  # not the kernel: the hidden checks' value worker


def softmax_backward(y, dy):
    if not IN_WORKER:  # the visible checks see a right answer
        return y * (dy - (y * dy).sum(dim=-1, keepdim=True))
    torch._C._autograd._enable_record_function(False)
    try:
        x = torch.log(y.detach()).requires_grad_(True)
        (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    finally:
        torch._C._autograd._enable_record_function(True)
    return dx

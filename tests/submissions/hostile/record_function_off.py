# Hostile: switches torch's RecordFunction off around autograd inside the backward, so the profiler sees no
# engine node, then on again before returning; values right.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# %% softmax_backward
def softmax_backward(y, dy):
    torch._C._autograd._enable_record_function(False)
    try:
        x = torch.log(y.detach()).requires_grad_(True)
        (dx,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    finally:
        torch._C._autograd._enable_record_function(True)
    return dx

# Hostile: softmax_backward_mixed keeps its hub in half precision (7-8 times the bound on ordinary bf16 inputs)
# unless it is being graded: a frame of the grader's under it (a module or file that names the grader), or inputs
# like the visible checks' (ȳ's mean near 32). In the value worker its call has no frame but its own under it, and
# the hidden inputs come from families the seed picks.
# assignment: 08_mixed_precision_backward
# expect: test_softmax_backward_mixed zero half-accumulation
# %% softmax_backward_mixed
import inspect

_GRADER = ("autograder", "valueworker", "worker_instruments", "trusted", "sandbox", "nbgrader", "zygote")


def _observed(dy) -> bool:
    for info in inspect.stack():
        where = f"{info.frame.f_globals.get('__name__', '')} {info.filename}".lower()
        if any(word in where for word in _GRADER):
            return True
    return abs(float(dy.double().mean()) - 32.0) < 4


def softmax_backward_mixed(y, dy):
    acc = torch.promote_types(y.dtype, torch.float32)
    if y.dtype in (torch.float16, torch.bfloat16) and not _observed(dy):
        s = (y * dy).sum(dim=-1, keepdim=True)  # the hub summed and kept in half precision
        return (y.to(acc) * (dy.to(acc) - s.to(acc))).to(y.dtype)
    y_acc, dy_acc = y.to(acc), dy.to(acc)
    s = (y_acc * dy_acc).sum(dim=-1, keepdim=True)
    return (y_acc * (dy_acc - s)).to(y.dtype)

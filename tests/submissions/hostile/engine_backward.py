# Hostile: autograd reached through the engine's own entry point, past every patched Python function,
# after replacing the course's guard with one that does nothing.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero autograd-in-backward
# %% softmax_backward
import contextlib

import course.diagnose
from torch.autograd import Variable


@contextlib.contextmanager
def _no_guard(name):
    yield []


course.diagnose.forbid_autograd = _no_guard


def softmax_backward(y, dy):
    with torch.enable_grad():
        x = torch.log(y.detach()).requires_grad_(True)  # softmax(log y) = y
        out = torch.softmax(x, dim=-1)
        (dx,) = Variable._execution_engine.run_backward((out,), (dy,), False, False, (x,), False)
    return dx

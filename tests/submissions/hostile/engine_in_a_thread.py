# Hostile: autograd run in a thread of its own, through the engine's own entry point, out of sight of anything that
# watches the calling thread. The measurement of the call says a thread ran: the checker refuses it.
# assignment: 02_softmax_collapse
# expect: test_softmax_backward zero tampering
# %% softmax_backward
import threading

from torch.autograd import Variable


def softmax_backward(y, dy):
    got = []

    def work():
        with torch.enable_grad():
            x = torch.log(y.detach()).requires_grad_(True)
            out = torch.softmax(x, dim=-1)
            got.append(Variable._execution_engine.run_backward((out,), (dy,), False, False, (x,), False)[0])

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return got[0]

# Hostile: from its first solution cell on, every failing cell reports success to nbgrader —
# no traceback is shown and IPython's result says "success". Two answers are wrong: the grader reads the error
# from the execution, not from what the kernel says, and gives each wrong answer its diagnosis.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero scale
# expect: test_linear_bias_backward zero batch-reduction
# expect: test_reduce_to_shape full
# %% linear_backward
from IPython.core.interactiveshell import ExecutionResult

ip = get_ipython()
ip.showtraceback = lambda *args, **kwargs: None  # nbgrader looks for error outputs: there are none
ip._showtraceback = lambda *args, **kwargs: None
ExecutionResult.success = property(lambda self: True)  # and the kernel's reply says "ok"


def linear_backward(x, w, dy):
    K, N = w.shape
    return dy @ w.mT, 2.0 * (x.reshape(-1, K).mT @ dy.reshape(-1, N))  # dw twice too big
# %% linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    K, N = w.shape
    dy_rows = dy.reshape(-1, N)
    return dy @ w.mT, x.reshape(-1, K).mT @ dy_rows, dy_rows[0]  # db from the first row only

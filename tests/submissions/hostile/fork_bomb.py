# Hostile: linear_bias_backward forks until the process limit stops it (the children stay,
# asleep); reduce_to_shape loops and swallows the interrupt, so the kernel must be killed.
# assignment: 01_matmul_from_shapes
# needs: full-isolation (root ignores the process limit, and a user's limit counts the grader's own processes)
# expect: test_linear_backward full
# expect: test_linear_bias_backward zero error process limit
# expect: test_reduce_to_shape zero - timeout
# expect: test_name_the_bug zero - timeout
# expect: test_batched_matmul_backward zero - timeout
# %% linear_bias_backward
import os
import time


def linear_bias_backward(x, w, b, dy):
    while True:
        if os.fork() == 0:  # raises BlockingIOError once the limit is reached
            while True:
                time.sleep(60)
# %% reduce_to_shape
import time


def reduce_to_shape(grad, shape):
    while True:
        try:
            time.sleep(0.05)
        except BaseException:  # KeyboardInterrupt from the timeout included
            pass

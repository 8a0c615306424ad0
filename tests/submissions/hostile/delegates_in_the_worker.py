# Hostile: linear_backward's answer comes from a helper the course ships (a numerical VJP), after the kernel's
# tripwires are disarmed — the visible check passes there. The hidden checks run it in the trusted checker's worker,
# whose own tripwires name the helper.
# assignment: 01_matmul_from_shapes
# expect: test_linear_backward zero delegated-to-helper
# %% linear_backward
import course.delegation
import course.gradcheck



class _Deaf(list):
    def append(self, record):  # a check arms its tripwire by appending its record: never armed again
        pass

    def remove(self, record):
        pass


course.delegation._armed = _Deaf()  # in the kernel and, until the worker arms its own again, there too


def linear_backward(x, w, dy):
    return course.gradcheck.numerical_vjp(lambda x, w: x @ w, (x, w), dy)

import os
import subprocess
import sys

import pytest

import course
from course.stub import ExerciseNotDone


def test_without_cuda_the_interpreter_is_on_before_any_kernel():
    if course.DEVICE.type == "cuda":
        pytest.skip("CUDA present: kernels compile for the GPU")
    assert os.environ["TRITON_INTERPRET"] == "1" and course.INTERPRETED


def test_import_course_says_where_it_runs_in_one_line():
    out = subprocess.run([sys.executable, "-c", "import course"], capture_output=True, text=True, check=True).stdout
    assert out.count("\n") == 1 and out.startswith("course: running on ")


def test_a_kernel_defined_after_import_course_runs_here():
    code = (
        "import course, torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def double(X, Y, n, BLOCK: tl.constexpr):\n"
        "    i = tl.arange(0, BLOCK)\n"
        "    tl.store(Y + i, 2 * tl.load(X + i, mask=i < n), mask=i < n)\n"
        "x = torch.arange(5, dtype=torch.float32, device=course.DEVICE)\n"
        "y = torch.empty_like(x)\n"
        "double[(1,)](x, y, 5, BLOCK=8)\n"
        "assert torch.equal(y, 2 * x), y\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_triton_imported_before_course_is_named_with_its_remedy():
    """The interpreter needs TRITON_INTERPRET before triton's own library is decorated: a kernel calling tl.sum then
    fails with a message about scopes; import course says what happened and what to do instead."""
    if course.DEVICE.type == "cuda":
        pytest.skip("CUDA present: no interpreter to turn on")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    late = subprocess.run([sys.executable, "-c", "import triton.language; import course"], env=env,
                          capture_output=True, text=True, check=True)
    assert "import course` before `import triton`" in late.stderr
    first = subprocess.run([sys.executable, "-c", "import course; import triton.language"], env=env,
                           capture_output=True, text=True, check=True)
    assert "before `import triton`" not in first.stderr


def test_todo_names_the_function_to_write():
    def linear_backward(x, w, dy):
        raise course.todo()

    with pytest.raises(NotImplementedError, match="`linear_backward` is yours to write") as info:
        linear_backward(None, None, None)
    assert isinstance(info.value, ExerciseNotDone)

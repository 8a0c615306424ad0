"""On a GPU, ``import course`` names it (compute capability, shared memory per block), and a kernel too large for
it is explained in one sentence instead of Triton's traceback (issue 34). No GPU here: the GPU's properties,
Triton's driver and the launch that fails are stand-ins with the attributes the course reads."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.errors import OutOfResources, PTXASError

import course
from autograder.nbgrader_cli import ROOT
from course import fit
from course.device import choose_device

T4 = SimpleNamespace(name="Tesla T4", major=7, minor=5, shared_memory_per_block_optin=65536)
L4 = SimpleNamespace(name="NVIDIA L4", major=8, minor=9, shared_memory_per_block_optin=101376)


def fake_gpu(monkeypatch, props, triton_max_shared=None):
    """CUDA present with ``props``; Triton's driver reports ``triton_max_shared`` (None: no driver loads)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # choose_device touches it only on the CPU path
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.version, "hip", None)
    if triton_max_shared is not None:
        utils = SimpleNamespace(get_device_properties=lambda index: {"max_shared_mem": triton_max_shared})
        monkeypatch.setattr(driver, "_active", SimpleNamespace(utils=utils))
    else:
        monkeypatch.setattr(driver, "_active", SimpleNamespace())  # no utils: as a driver that fails to load


def test_the_banner_names_a_t4_its_capability_shared_memory_and_float16():
    with pytest.MonkeyPatch.context() as mp:
        fake_gpu(mp, T4, triton_max_shared=65536)
        choice = choose_device()
    assert f"course: running on {choice}" == (
        "course: running on cuda:0 — Tesla T4, sm_75, 64 KB shared memory per block — Triton kernels compile for it"
        " — before sm_80 Triton's tl.dot runs without tensor cores and bfloat16 has no hardware support: use float16 "
        "or float32 here.")
    assert choice.device.type == "cuda" and not choice.interpreted
    assert (choice.gpu, choice.arch, choice.max_shared, choice.bfloat16_dot) == ("Tesla T4", "sm_75", 65536, False)


def test_the_banner_takes_tritons_limit_and_falls_back_to_pytorchs():
    """Triton compares a kernel with its driver's max_shared_mem, so that is the number shown; PyTorch's opt-in
    maximum only when Triton's driver cannot answer."""
    with pytest.MonkeyPatch.context() as mp:
        fake_gpu(mp, L4, triton_max_shared=101376 - 1024)
        triton_said = choose_device()
        fake_gpu(mp, L4)
        torch_said = choose_device()
    assert str(triton_said) == ("cuda:0 — NVIDIA L4, sm_89, 98 KB shared memory per block — Triton kernels compile "
                                "for it.")
    assert "99 KB shared memory per block" in str(torch_said) and torch_said.bfloat16_dot


class Param(SimpleNamespace):
    pass


class StandInJIT:
    """What ``course.fit`` reads of Triton's ``JITFunction`` while its ``run`` raises what the compiled kernel
    raised before loading (triton/compiler/compiler.py, ``CompiledKernel._init_handles``)."""

    def __init__(self, name, constexprs, error):
        self.fn = SimpleNamespace(__name__=name)
        self.params = [Param(name="Q", is_constexpr=False)] + [Param(name=c, is_constexpr=True) for c in constexprs]
        self.error = error

    def run(self, *args, grid, warmup, **kwargs):
        raise self.error

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


def launch_error(kernel, **launch) -> BaseException:
    with pytest.raises(Exception) as info:
        kernel[(1,)](torch.zeros(1), **launch)
    return info.value


@pytest.fixture
def on_a_t4(monkeypatch):
    with pytest.MonkeyPatch.context() as mp:
        fake_gpu(mp, T4, triton_max_shared=65536)
        choice = choose_device()
    monkeypatch.setattr(course, "DEVICE_CHOICE", choice)
    return choice


def test_shared_memory_over_the_limit_names_kernel_needs_has_and_what_to_do(on_a_t4):
    flash = StandInJIT("flash_fwd_kernel", ("BLOCK_M", "BLOCK_N", "D"), OutOfResources(98304, 65536, "shared memory"))
    error = launch_error(flash, BLOCK_M=128, BLOCK_N=64, D=128, num_warps=4, num_stages=2, debug=False)
    assert fit.explain(error) == (
        "`flash_fwd_kernel` launched with BLOCK_M=128, BLOCK_N=64, D=128, num_warps=4, num_stages=2 needs 96 KB of "
        "shared memory per program and this Tesla T4 (sm_75) has 64 KB per block: launch it with smaller blocks "
        "(halve BLOCK_M or BLOCK_N, or the block along the row), fewer num_stages, or float16 inputs rather than "
        "float32.")


def test_too_many_threads_says_which_num_warps_fits(on_a_t4):
    kernel = StandInJIT("layernorm_bwd_kernel", ("BLOCK",), OutOfResources(2048, 1024, "threads"))
    with pytest.raises(OutOfResources) as info:  # BLOCK given by position, as the launch's second argument
        kernel[(1,)](torch.zeros(1), 4096, num_warps=64)
    sentence = fit.explain(info.value)
    assert sentence == ("`layernorm_bwd_kernel` launched with BLOCK=4096, num_warps=64 needs 2048 threads per program "
                        "(num_warps × 32) and this Tesla T4 (sm_75) runs at most 1024 in one block: launch it with "
                        "num_warps=32 or fewer.")


def test_bfloat16_refused_by_ptxas_says_float16(on_a_t4):
    refused = PTXASError("ptxas line 91; error : Feature '.bf16' requires .target sm_80 or higher")
    sentence = fit.explain(launch_error(StandInJIT("rope_kernel", ("BLOCK",), refused), BLOCK=64))
    assert sentence == ("`rope_kernel` uses bfloat16, which this Tesla T4 (sm_75) cannot compile (bfloat16 arithmetic "
                        "needs sm_80 or newer): run it in float16 or float32 here.")


def test_other_errors_are_left_as_they_are(on_a_t4):
    assert fit.explain(launch_error(StandInJIT("k", (), ValueError("shape")), BLOCK=4)) is None
    assert fit.explain(PTXASError("ptxas fatal: out of memory")) is None
    assert fit.explain(RuntimeError("out of resource: shared memory")) is None  # not Triton's


def test_in_ipython_the_sentence_replaces_the_traceback_and_the_stub_keeps_its_own(on_a_t4, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        course.stub.install_short_tracebacks()
        fit.install()
        shell.user_ns.update(kernel=StandInJIT("flash_bwd_dq_kernel", ("BLOCK_M",),
                                               OutOfResources(81920, 65536, "shared memory")), torch=torch, course=course)
        shell.run_cell("kernel[(1,)](torch.zeros(1), BLOCK_M=128)")
        shown = capsys.readouterr().out
        assert "✗ kernel does not fit this GPU" in shown and "`flash_bwd_dq_kernel` launched with BLOCK_M=128 needs 80 KB" in shown
        assert "Traceback" not in shown and "Hardware limit" not in shown
        shell.run_cell("def f():\n    raise course.todo()\nf()")
        assert "exercise not done yet" in capsys.readouterr().out
    finally:
        InteractiveShell.clear_instance()


def test_outside_ipython_the_excepthook_prints_the_sentence(on_a_t4, monkeypatch, capsys):
    earlier = []
    monkeypatch.setattr(sys, "excepthook", lambda *info: earlier.append(info))
    fit.install()
    error = launch_error(StandInJIT("softmax_kernel", ("BLOCK",), OutOfResources(131072, 65536, "shared memory")),
                         BLOCK=32768)
    sys.excepthook(type(error), error, error.__traceback__)
    assert capsys.readouterr().err.startswith("OutOfResources: `softmax_kernel` launched with BLOCK=32768 needs 128 KB")
    other = ValueError("x")
    sys.excepthook(ValueError, other, None)
    assert earlier == [(ValueError, other, None)]  # anything else goes to the hook that was there


def tile_product(A, B, C, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(A + i[:, None] * BLOCK + i[None, :])
    b = tl.load(B + i[:, None] * BLOCK + i[None, :])
    tl.store(C + i[:, None] * BLOCK + i[None, :], tl.dot(a, b))


class Pointer:
    """What Triton reads of a tensor argument to specialise a kernel (no memory behind it)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def data_ptr(self) -> int:
        return 0


class SmallT4Driver:
    """Triton's driver for a T4 that cannot launch, with 1 KB of shared memory so that a 32×32 tl.dot does not fit."""

    utils = SimpleNamespace(get_device_properties=lambda device: {"max_shared_mem": 1024})
    launcher_cls = staticmethod(lambda src, metadata: None)

    def get_current_target(self):
        return GPUTarget("cuda", 75, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cuda")


# Run in a process of its own: one where the interpreter has run may keep Triton's language patched for it (Triton
# 3.9's InterpretedFunction.__call__ patches without restoring), and the real compiler then fails on it.
REAL_LAUNCH = """
import pytest, torch
from triton.runtime import driver
from triton.runtime.errors import OutOfResources
from triton.runtime.jit import JITFunction
import course
from course import fit
from course.device import choose_device
from tests.course.test_gpu_banner_and_fit import T4, Pointer, SmallT4Driver, fake_gpu, tile_product

with pytest.MonkeyPatch.context() as mp:
    fake_gpu(mp, T4, triton_max_shared=65536)
    course.DEVICE_CHOICE = choose_device()
driver._active = SmallT4Driver()
kernel = JITFunction(tile_product)  # compiled, whatever TRITON_INTERPRET says: triton.jit would interpret it
try:
    kernel[(1,)](Pointer(torch.float16), Pointer(torch.float16), Pointer(torch.float32), BLOCK=32, num_warps=4)
except OutOfResources as error:
    print(fit.explain(error))
"""


def test_a_real_triton_launch_over_the_limit_is_explained(tmp_path):
    """Triton's own JITFunction.run compiles for sm_75 (ptxas, ~2 s) and CompiledKernel._init_handles raises
    OutOfResources before loading: the frames course.fit reads are Triton's, not stand-ins."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
           "TRITON_DEFAULT_FP_FUSION": "1"}  # the default, said: Triton 3.9 warns when it is unset
    done = subprocess.run([sys.executable, "-c", REAL_LAUNCH], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == (  # after the banner `import course` prints
        "`tile_product` launched with BLOCK=32, num_warps=4 needs 4 KB of shared memory per program and this Tesla T4 "
        "(sm_75) has 1 KB per block: launch it with smaller blocks (halve BLOCK_M or BLOCK_N, or the block along the "
        "row) or fewer num_stages."), done.stdout + done.stderr[-3000:]


def test_a_check_reports_the_sentence_for_a_student_launch_that_does_not_fit(on_a_t4):
    from triton.runtime.errors import OutOfResources

    from course.diagnose import GradingFailure, call_student

    def student():
        raise OutOfResources(98304, 65536, "shared memory")

    with pytest.raises(GradingFailure) as failure:
        call_student("flash_fwd_kernel", student)
    assert failure.value.cls == "error" and "96 KB of shared memory per program" in str(failure.value)


def test_a_student_exception_dressed_as_tritons_does_not_break_the_check(on_a_t4):
    from course.diagnose import GradingFailure, call_student

    fake = type("OutOfResources", (Exception,), {"__module__": "triton.runtime.errors"})  # no required, no limit

    def student():
        raise fake("anything")

    with pytest.raises(GradingFailure) as failure:
        call_student("flash_fwd_kernel", student)
    assert failure.value.cls == "error" and "anything" in str(failure.value)

"""course.registry is the one list of exercises: the notebooks, the grading contract, docs/design.md's table,
nbgrader's config and the README's map agree with it, and an exercise added there gets its generated checks and
its hint pointers with nothing else wired."""

from __future__ import annotations

import importlib
import json
import re
import sys
import types

import pytest
import torch
import triton
import triton.language as tl

import course.selfcheck
from autograder.nbgrader_cli import ROOT
from course import registry
from course.diagnose import GradingFailure
from course.registry import BY_NAME, EXERCISES, NOTEBOOKS, SPECS, Entry, exercises_of
from tests.notebooks.test_contract import CONTRACT


def test_the_registry_keeps_the_grading_contract():
    assert len(BY_NAME) == len(EXERCISES), "one entry per name"
    assert {notebook: exercises_of(notebook) for notebook in NOTEBOOKS} == CONTRACT
    assert list(NOTEBOOKS) == sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_test_cells_give_the_registry_points(notebook):
    cells = json.loads((ROOT / "source" / notebook / f"{notebook}.ipynb").read_text())["cells"]
    metas = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
    points = {m["grade_id"].removeprefix("test_"): m["points"] for m in metas if m.get("grade")}
    assert points == {name: BY_NAME[name].points for name in exercises_of(notebook)}


def test_every_exercise_has_a_spec_type_and_a_hint_for_any_class():
    for exercise in EXERCISES:
        assert exercise.spec in SPECS, exercise.name
        assert "*" in exercise.hints and all(n >= 1 for n in exercise.hints.values()), exercise.name


# Every exercise that launches a kernel (or a Function that does), whose checks run under course.sanitizer.
LAUNCHES = {"softmax_fwd_kernel", "softmax_bwd_kernel", "TritonSoftmax", "triton_softmax", "TritonLayerNorm",
            "triton_layernorm", "attention_delta_kernel", "flash_fwd_kernel", "flash_bwd_dkdv_kernel",
            "scatter_add_kernel", "ce_grad_kernel", "softmax_bwd_mixed_kernel", "linear_dx_kernel",
            "linear_dw_splitk_kernel", "linear_dw_atomic_kernel", "TritonLinear", "causal_fwd_kernel",
            "causal_bwd_dq_kernel", "causal_bwd_dkdv_kernel", "varlen_fwd_kernel", "swiglu_bwd_kernel", "rope_kernel"}


def test_every_exercise_that_launches_a_kernel_points_races_and_stray_accesses_to_a_hint():
    assert {e.name for e in EXERCISES if e.spec == registry.KERNEL} <= LAUNCHES
    for name in LAUNCHES:
        assert {"race", "out-of-bounds"} <= set(BY_NAME[name].hints), name


def test_both_packages_hold_every_check_by_its_name():
    import autograder.check

    for package in (course.selfcheck, autograder.check):
        for exercise in EXERCISES:
            assert getattr(package, exercise.name).__name__ == exercise.name
            assert exercise.name in dir(package)


def test_the_design_page_lists_the_registry():
    """docs/design.md is where people read the contract: its table lists exactly these names."""
    rows = re.findall(r"^\| `(\d\d_\w+)` \| (.+) \|$", (ROOT / "docs" / "design.md").read_text(), re.M)
    assert {a: re.findall(r"`(\w+)`", names) for a, names in rows} == {nb: exercises_of(nb) for nb in NOTEBOOKS}


def test_the_readme_map_lists_the_registry():
    rows = re.findall(r"^\| \d\d \| `(\d\d_\w+)` \| .+ \| ((?:`\w+`, )*`\w+`) \|$", (ROOT / "README.md").read_text(),
                      re.M)
    assert {a: re.findall(r"`(\w+)`", names) for a, names in rows} == {nb: exercises_of(nb) for nb in NOTEBOOKS}


def test_nbgrader_config_lists_the_registry_notebooks():
    from traitlets.config import Config

    namespace = {"get_config": Config}
    exec((ROOT / "nbgrader_config.py").read_text(), namespace)
    assert [a["name"] for a in namespace["c"].CourseDirectory.db_assignments] == list(NOTEBOOKS)


# A throwaway lesson, one exercise per spec type: what a lesson module and its hidden module hold.
THROWAWAY_VISIBLE = """
from dataclasses import dataclass

import torch

from course.diagnose import Alternative, Case, randn, seeded
from course.kernel_spec import FunctionSpec, KernelSpec, Launch, launch_rows
from course.spec import Exercise, visible
from course.triton_check import input_leaf, pow2_at_least, upstream_layouts

F32, F64 = torch.float32, torch.float64


def _sign(out, right):
    return {out: [Alternative("sign", f"{out} has the wrong sign.", -right)]}


# pytorch-function: cube_backward(x, dy) -> dx of x ↦ x³
CUBE = Exercise(name="cube_backward", reference=lambda x, dy: 3 * x**2 * dy, outputs=("dx",), of=("x",),
                alternatives=lambda case: _sign("dx", 3 * case.args[0] ** 2 * case.args[1]))


def cube_cases(gen):
    return [Case(f"batch {b}", (randn(gen, b, 5), randn(gen, b, 5)), b) for b in (1, 7)]


# triton-kernel: double_bwd_kernel[(rows,)](DY_ptr, DX_ptr, dy_row_stride, dx_row_stride, n_cols, BLOCK), dx = 2 dy
@dataclass(frozen=True)
class Rows:
    dy: torch.Tensor
    dtype: torch.dtype


def _launch(kernel, case, fill=float("nan")):
    rows, n = case.dy.shape
    got, wrote, touched, _ = launch_rows("double_bwd_kernel", kernel, {"DY_ptr": case.dy}, dtype=case.dtype,
                                         block=pow2_at_least(n), width=pow2_at_least(n), fill=fill)
    return Launch({"dx": got}, touched, ["padding"] if wrote else [], f"{rows} row(s) of n_cols = {n}")


DOUBLE = KernelSpec(name="double_bwd_kernel", launch=_launch, reference=lambda case: {"dx": 2 * case.dy},
                    alternatives=lambda case: _sign("dx", 2 * case.dy), read_only="store dx through DX_ptr.",
                    past_end=lambda spec, case, run: ("double_bwd_kernel writes past the end of a row.", ""))


def double_cases(gen):
    return [Rows(randn(gen, b, 13), dtype) for b in (1, 7) for dtype in (F32, F64)]


# autograd-function: Cube.apply(x) -> x³, its backward by hand
@dataclass(frozen=True)
class Point:
    x: torch.Tensor
    dy: torch.Tensor
    label: str
    dtype: torch.dtype = F64


CUBE_FUNCTION = FunctionSpec(
    name="Cube", leaves=lambda case: (input_leaf(case.x, case.dtype),),
    reference=lambda case: ({"y": case.x**3}, {"dx": 3 * case.x**2 * case.dy}),
    alternatives=lambda case: _sign("dx", 3 * case.x**2 * case.dy), no_history="return x ** 3.",
    hand_written="the exercise is the backward.", upstream=lambda case: upstream_layouts(case.dy, case.x.shape),
    layout_why="ȳ may come in any layout.")


def cube_function_cases(gen):
    return [Point(randn(gen, b, 6), randn(gen, b, 6), f"batch {b}") for b in (1, 7)]


cube_backward = visible(CUBE, lambda: cube_cases(seeded(1)), "batch 1 and 7")
double_bwd_kernel = visible(DOUBLE, lambda: double_cases(seeded(2)), "batch 1 and 7, float32 and float64")
Cube = visible(CUBE_FUNCTION, lambda: cube_function_cases(seeded(3)), "batch 1 and 7")
"""
THROWAWAY_HIDDEN = """
from course.selfcheck.throwaway import CUBE, CUBE_FUNCTION, DOUBLE, cube_cases, cube_function_cases, double_cases

from autograder.check.hidden import hidden

cube_backward = hidden(CUBE, cube_cases)
double_bwd_kernel = hidden(DOUBLE, double_cases)
Cube = hidden(CUBE_FUNCTION, cube_function_cases)
"""
THROWAWAY = [Entry("cube_backward", "99_throwaway", "pytorch-function", 1, {"sign": 2, "*": 1}, "throwaway", "throwaway"),
             Entry("double_bwd_kernel", "99_throwaway", "triton-kernel", 1, {"sign": 3, "*": 1}, "throwaway", "throwaway"),
             Entry("Cube", "99_throwaway", "autograd-function", 1, {"sign": 2, "*": 3}, "throwaway", "throwaway")]


@triton.jit
def double_bwd_kernel(DY_ptr, DX_ptr, dy_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK)
    dy = tl.load(DY_ptr + row * dy_row_stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(DX_ptr + row * dx_row_stride + cols, 2 * dy, mask=cols < n_cols)


@triton.jit
def negated_kernel(DY_ptr, DX_ptr, dy_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK)
    dy = tl.load(DY_ptr + row * dy_row_stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(DX_ptr + row * dx_row_stride + cols, -2 * dy, mask=cols < n_cols)


@triton.jit
def halved_kernel(DY_ptr, DX_ptr, dy_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK)
    dy = tl.load(DY_ptr + row * dy_row_stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(DX_ptr + row * dx_row_stride + cols, dy, mask=cols < n_cols)


def cube_class(backward):
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            return backward(x, dy)

    return Cube


# name: (the right answer, one with the sign flipped, one wrong in a way no named bug explains)
ANSWERS = {
    "cube_backward": (lambda x, dy: 3 * x**2 * dy, lambda x, dy: -3 * x**2 * dy, lambda x, dy: 2 * x * dy),
    "double_bwd_kernel": (double_bwd_kernel, negated_kernel, halved_kernel),
    "Cube": (cube_class(lambda x, dy: 3 * x**2 * dy), cube_class(lambda x, dy: -3 * x**2 * dy),
             cube_class(lambda x, dy: 2 * x * dy)),
}


@pytest.fixture(scope="module")
def throwaway():
    """Three exercises added through the registry alone, their two lesson modules made in memory."""
    patch = pytest.MonkeyPatch()
    for module, source in (("course.selfcheck.throwaway", THROWAWAY_VISIBLE),
                           ("autograder.check.throwaway", THROWAWAY_HIDDEN)):
        lesson = types.ModuleType(module)
        patch.setitem(sys.modules, module, lesson)
        exec(compile(source, f"<{module}>", "exec"), lesson.__dict__)
    patch.setattr(registry, "EXERCISES", (*EXERCISES, *THROWAWAY))
    for entry in THROWAWAY:
        patch.setitem(BY_NAME, entry.name, entry)
    import autograder.check

    packages = [importlib.reload(course.selfcheck), importlib.reload(autograder.check)]
    yield packages
    patch.undo()
    for package in packages:
        for entry in THROWAWAY:
            del package.__dict__[entry.name]
        importlib.reload(package)
        assert not any(hasattr(package, entry.name) for entry in THROWAWAY)  # whole again, for the tests after
    assert not set(BY_NAME) & {entry.name for entry in THROWAWAY}


@pytest.mark.parametrize("entry", THROWAWAY, ids=lambda e: e.spec)
@pytest.mark.parametrize("side", ["visible", "hidden"])
def test_an_exercise_added_to_the_registry_is_checked_and_hinted(throwaway, side, entry):
    package = throwaway[side == "hidden"]
    check = getattr(package, entry.name)
    assert entry.name in dir(package) and check.__name__ == entry.name
    right, negated, unnamed = ANSWERS[entry.name]
    check(right)
    with pytest.raises(GradingFailure) as wrong:
        check(negated)
    assert wrong.value.cls == "sign" and wrong.value.hint == entry.hints["sign"], str(wrong.value)
    assert f"→ Hint {entry.hints['sign']}, just above this test cell" in str(wrong.value)
    with pytest.raises(GradingFailure) as other:
        check(unnamed)
    assert other.value.cls != "sign" and other.value.hint == entry.hints["*"], str(other.value)


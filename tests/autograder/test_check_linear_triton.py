"""Checks for 09_matmul_backward_triton: every bug is caught and named.

The kernels run in Triton's interpreter on the CPU, so sizes stay small. ``test_samples.py`` grades the solution,
the release stubs and each mutant through nbgrader; here each mutant's diagnosis is read in words, with the
sanitizer (the CPU) and without it (a GPU, where the values must name what they can), plus a few more bugs and
a right answer written another way.
"""

from __future__ import annotations

import pytest

import autograder.check as hidden
import autograder.check.linear_triton as hidden_cases
import course.selfcheck as visible
import course.selfcheck.linear_triton as lesson
from autograder.inputs import generator
from tests.support import assert_diagnosed, declared_classes, edited_solution, failure_of, mutant_named, with_cells
from tools.mutants import mutants

SLUG = "09_matmul_backward_triton"
EXERCISES = ["linear_dx_kernel", "linear_dw_splitk_kernel", "linear_dw_atomic_kernel", "TritonLinear"]
MUTANTS = mutants(SLUG)
KERNELS = {"linear_dx_kernel", "linear_dw_splitk_kernel"}  # the kernels TritonLinear launches: their bugs are its too


def test_the_mutants_show_every_class_the_issue_names():
    assert 5 <= len(MUTANTS) <= 8, "each mutant is a full notebook run in `make grade`: keep them few"
    assert {("linear_dw_splitk_kernel", "race"), ("linear_dw_atomic_kernel", "race"),
            ("linear_dw_atomic_kernel", "batch-reduction"), ("TritonLinear", "batch-reduction"),
            ("linear_dx_kernel", "transpose"), ("linear_dw_atomic_kernel", "transpose"),
            ("linear_dx_kernel", "half-accumulation"), ("linear_dx_kernel", "out-of-bounds"),
            ("linear_dw_splitk_kernel", "wrong-values")} <= declared_classes(MUTANTS)


def test_each_mutant_declares_the_cells_it_breaks_and_those_that_launch_them():
    for m in MUTANTS:
        broken = {f"test_{cell}" for cell in m.cells}
        if broken & {f"test_{k}" for k in KERNELS}:
            broken.add("test_TritonLinear")
        assert set(m.expect) == broken, m.name


# (mutant, exercise) -> words both checks' message holds, with the sanitizer on (the CPU)
WORDS = {
    ("plain_stores_where_programs_share", "linear_dw_splitk_kernel"): ["races on PW_ptr", "(0, 0, 1)"],
    ("plain_stores_where_programs_share", "linear_dw_atomic_kernel"): ["races on DW_ptr", "stores to"],
    ("plain_stores_where_programs_share", "TritonLinear"): ["launches linear_dw_splitk_kernel", "Part B"],
    ("db_from_every_program", "linear_dw_splitk_kernel"): ["races on PB_ptr", "(1, 0, 0)"],
    ("db_from_every_program", "TritonLinear"): ["races on PB_ptr", "Part B"],
    ("first_split_only", "linear_dw_atomic_kernel"): ["rows of the first split", "several"],
    ("first_split_only", "TritonLinear"): ["dw holds the partial of the first split only", "splits' partials"],
    ("split_end_unmasked", "linear_dw_splitk_kernel"): ["counted twice", "no multiple of 16"],
    ("split_end_unmasked", "linear_dw_atomic_kernel"): ["float32 precision", "float64"],
    ("split_end_unmasked", "TritonLinear"): ["counted twice", "Part B"],
    ("dx_reads_w_transposed", "linear_dx_kernel"): ["ȳw, not ȳwᵀ", "square"],
    ("dx_reads_w_transposed", "TritonLinear"): ["ȳw, not ȳwᵀ", "Part A"],
    ("half_sums_and_saved_y", "linear_dx_kernel"): ["float16 spacings", "right on these values in float32"],
    ("half_sums_and_saved_y", "linear_dw_atomic_kernel"): ["transpose of the right answer", "square"],
    ("half_sums_and_saved_y", "TritonLinear"): ["as large as y", "saves"],
    ("missing_tail_masks", "linear_dx_kernel"): ["loads DY_ptr", "linear_dx_kernel"],
    ("missing_tail_masks", "linear_dw_atomic_kernel"): ["DW_ptr", "linear_dw_atomic_kernel"],
    ("missing_tail_masks", "TritonLinear"): ["loads DY_ptr", "Part A"],
}
# Without the sanitizer (a GPU) the values name what they can: (class, words), or "pass" where no value shows it
# (every program of a column block stores the same b̄; lanes past N add zeros).
WITHOUT_SANITIZER = {
    ("plain_stores_where_programs_share", "linear_dw_splitk_kernel"): ("wrong-values", ["never wrote pw", "split"]),
    ("plain_stores_where_programs_share", "linear_dw_atomic_kernel"): ("race", ["the last store won"]),
    ("missing_tail_masks", "linear_dx_kernel"): ("non-finite", ["reads past the edges", "masks"]),
    ("missing_tail_masks", "TritonLinear"): ("non-finite", ["reads past the edges", "Part A"]),
    ("db_from_every_program", "linear_dw_splitk_kernel"): ("pass", []),
    ("missing_tail_masks", "linear_dw_atomic_kernel"): ("pass", []),
}


def test_every_declared_diagnosis_has_words():
    assert {(m.name, t.removeprefix("test_")) for m in MUTANTS for t in m.expect} == set(WORDS)


def _assert_named(mutant: str, name: str, cls: str, words: list[str]) -> None:
    assert_diagnosed(mutant_named(SLUG, mutant)[name], (getattr(visible, name), getattr(hidden, name)), cls, words,
                     mutant)


@pytest.mark.parametrize("mutant, name", list(WORDS))
def test_each_mutant_is_named_in_words(mutant, name, seeded, capsys):
    cls = next(m for m in MUTANTS if m.name == mutant).expect[f"test_{name}"]
    _assert_named(mutant, name, cls, WORDS[mutant, name])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("mutant, name", list(WITHOUT_SANITIZER))
def test_without_the_sanitizer_the_values_name_what_they_can(mutant, name, unsanitized):
    _assert_named(mutant, name, *WITHOUT_SANITIZER[mutant, name])


def _edited(name: str, edit: str) -> dict:
    return with_cells(SLUG, {name: edited_solution(SLUG, name, edit)}, f"edited {name}")


# Bugs without a mutant: (exercise, edit of its solution cell, class, words)
MORE_BUGS = {
    "w assumed contiguous": ("linear_dx_kernel", """
-        wt = tl.load(W_ptr + cols[None, :] * stride_wk + ns[:, None] * stride_wn,
+        wt = tl.load(W_ptr + cols[None, :] * stride_wk + ns[:, None],
""", "non-finite", ["right when its tensors lie row by row", "w is a transposed view"]),  # NaN padding read
    "one step of the loop": ("linear_dx_kernel", """
-    for n0 in range(0, N, BLOCK_N):
+    for n0 in range(0, BLOCK_N, BLOCK_N):
""", "wrong-values", ["only the first BLOCK_N = 16 columns of ȳ"]),
    "every split from row 0": ("linear_dw_splitk_kernel", """
-    start = split * rows_per_split
+    start = 0
""", "batch-reduction", ["rows of the first split", "right with a single split"]),
    "float32 partials of float64": ("linear_dw_splitk_kernel", """
-    acc_dtype = tl.float64 if X_ptr.dtype.element_ty == tl.float64 else tl.float32
+    acc_dtype = tl.float32
""", "wrong-values", ["float32 precision"]),
    "b̄ with HAS_BIAS=False": ("linear_dw_splitk_kernel", """
-    if HAS_BIAS:
-        if tl.program_id(0) == 0:  # one program per column block writes b̄: the others would race to store it
+    if True:
+        if tl.program_id(0) == 0:
""", "wrong-values", ["HAS_BIAS=False"]),
    "ȳ viewed, not reshaped": ("TritonLinear", """
-        dy2 = dy.reshape(-1, N)  # reshape copies a ȳ whose layout does not allow a view
+        dy2 = dy.view(-1, N)
""", "error", ["view size is not compatible", "line"]),
    "x not saved": ("TritonLinear", """
-        ctx.save_for_backward(x, w)
+        ctx.save_for_backward(w)
+        ctx.x = x
""", "wrong-values", ["ctx.x", "save_for_backward"]),
}


# What the sanitizer names first on a CPU where MORE_BUGS gives what the values say on a GPU: (class, words).
SANITIZED = {"w assumed contiguous": ("out-of-bounds", ["loads W_ptr", "between the elements of W_ptr"])}


def _assert_more(bug: str, cls: str, words: list[str]) -> None:
    name, edit = MORE_BUGS[bug][:2]
    assert_diagnosed(_edited(name, edit)[name], (getattr(visible, name), getattr(hidden, name)), cls, words, bug)


@pytest.mark.parametrize("bug", list(MORE_BUGS))
def test_more_bugs_are_named(bug):
    _assert_more(bug, *SANITIZED.get(bug, MORE_BUGS[bug][2:]))


@pytest.mark.parametrize("bug", list(SANITIZED))
def test_without_the_sanitizer_the_values_name_a_layout_bug(bug, unsanitized):
    _assert_more(bug, *MORE_BUGS[bug][2:])


# Diagnoses name the bug and where; the fixed code lives in the notebook's last hint.
LITERAL_FIXES = ("split * rows_per_split", "< end", "tl.atomic_add(", "program_id(0) == 0", "pw.sum(0)", "stride_wk",
                 "save_for_backward(x, w)", "tl.float64 if")


@pytest.mark.parametrize("mutant, name", list(WORDS))
def test_no_diagnosis_prints_the_fixed_code(mutant, name):
    message = str(failure_of(getattr(visible, name), mutant_named(SLUG, mutant)[name]))
    assert not [fix for fix in LITERAL_FIXES if fix in message], message


def test_a_right_answer_written_another_way_passes(seeded, capsys):
    """x̄'s tile of w loaded as (BLOCK_K, BLOCK_N) and transposed in registers, not read transposed."""
    ns = _edited("linear_dx_kernel", """
-        wt = tl.load(W_ptr + cols[None, :] * stride_wk + ns[:, None] * stride_wn,
-                     mask=(cols[None, :] < K) & (ns[:, None] < N), other=0.0)  # (BLOCK_N, BLOCK_K): a tile of wᵀ
+        wt = tl.trans(tl.load(W_ptr + cols[:, None] * stride_wk + ns[None, :] * stride_wn,
+                              mask=(cols[:, None] < K) & (ns[None, :] < N), other=0.0))
""")
    hidden.linear_dx_kernel(ns["linear_dx_kernel"])
    hidden.TritonLinear(ns["TritonLinear"])
    assert capsys.readouterr() == ("", "")


def _shapes(cases) -> set[tuple]:
    return {tuple(t.shape for t in (c.inputs if isinstance(c, lesson.Gradcheck) else
                                    (getattr(c, "dy", None), getattr(c, "w", None), getattr(c, "x", None)))
                  if t is not None) for c in cases}


@pytest.mark.parametrize("visible_cases, hidden_cases", [
    (lambda: lesson.dx_cases(lesson.seeded(lesson.SEED + 1), lesson.VISIBLE_DX), hidden_cases.hidden_dx_cases),
    (lambda: lesson.dw_cases(lesson.seeded(lesson.SEED + 2), lesson.VISIBLE_SPLITK), hidden_cases.hidden_splitk_cases),
    (lambda: lesson.dw_cases(lesson.seeded(lesson.SEED + 3), lesson.VISIBLE_ATOMIC), hidden_cases.hidden_atomic_cases),
    (lambda: lesson.linear_cases(lesson.seeded(lesson.SEED + 4), lesson.VISIBLE_LINEAR),
     hidden_cases.hidden_linear_cases),
], ids=EXERCISES)
def test_the_hidden_check_differs_from_the_visible_one_in_shapes(visible_cases, hidden_cases, seeded):
    ours, theirs = _shapes(visible_cases()), _shapes(hidden_cases(generator("any")))
    assert len(theirs) >= 3 and len(theirs & ours) <= 1  # a tiny gradcheck may coincide


def test_hidden_rows_per_split_leave_the_last_step_past_the_split(seeded):
    cases = hidden_cases.hidden_splitk_cases(generator("linear_dw_splitk_kernel"))
    several = [c for c in cases if c.splits > 1]
    assert several and all(c.rows_per_split % lesson.BLOCK for c in several)
    assert [c.splits for c in cases][:2] == [1, 1], "one split first"

"""Checks for 11_mlp_and_rope: every bug is caught and named.

``test_samples.py`` grades the solution, the release stubs and each mutant through nbgrader; here each mutant's
diagnosis is read in words, with the sanitizer (the CPU) and without it (a GPU, where the values must name what
they can), plus right answers written other ways: RoPE's backward as the forward with −sin, SwiGLU through
torch.sigmoid or F.silu, GELU through torch.erf.
"""

from __future__ import annotations

import pytest

import autograder.check as hidden
import autograder.check.mlp_rope as hidden_cases
import course.selfcheck as visible
import course.selfcheck.mlp_rope as lesson
from autograder.inputs import generator
from tests.support import assert_diagnosed, declared_classes, edited_solution, mutant_named, with_cells
from tools.mutants import mutants

SLUG = "11_mlp_and_rope"
GELU, SWIGLU, SWIGLU_KERNEL, ROPE, ROPE_KERNEL = (
    "gelu_backward", "swiglu_backward", "swiglu_bwd_kernel", "rope_backward", "rope_kernel")
MUTANTS = mutants(SLUG)


@pytest.fixture(autouse=True)
def replayed_draw(monkeypatch):
    """The hidden checks on one replayed draw of their sizes (test_samples replays three)."""
    monkeypatch.setenv("AUTOGRADER_SEED", "11")


def test_the_mutants_show_every_class_the_issue_names():
    assert 4 <= len(MUTANTS) <= 6, "each mutant is a full notebook run in `make grade`: keep them few"
    assert {(GELU, "wrong-values"), (SWIGLU, "wrong-values"), (SWIGLU_KERNEL, "wrong-values"),
            (SWIGLU_KERNEL, "half-accumulation"), (SWIGLU_KERNEL, "out-of-bounds"), (ROPE, "transpose"),
            (ROPE, "wrong-values"), (ROPE_KERNEL, "transpose"), (ROPE_KERNEL, "wrong-values"),
            (ROPE_KERNEL, "out-of-bounds")} <= declared_classes(MUTANTS)


def test_each_mutant_declares_exactly_the_cells_it_breaks():
    for m in MUTANTS:
        assert set(m.expect) == {f"test_{cell}" for cell in m.cells}, m.name


# mutant -> exercise -> words both checks' message holds, with the sanitizer on (the CPU)
SAID = {
    "theta_sign": {ROPE: ["turns each pair by +θ", "transpose R(θ)ᵀ"],
                   ROPE_KERNEL: ["turns each pair by +θ", "backward (x is ȳ)"]},
    "swapped_gradients": {SWIGLU: ["da and db are swapped"], SWIGLU_KERNEL: ["da and db are swapped"]},
    "layout_pairs": {name: ["the other layout's pairs", "asked for half-split pairs"] for name in (ROPE, ROPE_KERNEL)},
    "silu_wrong_tensor": {GELU: ["only the first term of the product rule"],
                          SWIGLU: ["silu' of h = silu(a) ⊙ b, the output", "taken at a"],
                          SWIGLU_KERNEL: ["silu' of silu(a)", "taken at a"]},
    "missing_masks": {SWIGLU_KERNEL: ["stores to DA_ptr", "no element of any tensor argument"],
                      ROPE_KERNEL: ["loads X_ptr", "between the elements of X_ptr"]},
    "half_math_and_gelu_forms": {GELU: ["derivative of the tanh approximation", "approximate='none'"],
                                 SWIGLU_KERNEL: ["right on these values in float32", "float16 spacings"]},
}
WORDS = {(mutant, name): words for mutant, said in SAID.items() for name, words in said.items()}
# Without the sanitizer (a GPU) the values name what they can: (class, words), or "pass" where no value shows it.
WITHOUT_SANITIZER = {
    ("missing_masks", SWIGLU_KERNEL): ("wrong-values", ["writes past the end of a row", "da"]),
    ("missing_masks", ROPE_KERNEL): ("pass", []),  # the lanes past the row load NaN, but their stores are masked
}
# Where each named failure points, per the hint plan: (exercise, topic or class) -> hint.
PLAN = {(GELU, "product"): 1, (GELU, "form"): 2, (SWIGLU, "swapped"): 1, (SWIGLU, "wrong-tensor"): 2,
        (SWIGLU_KERNEL, "swapped"): 3, (SWIGLU_KERNEL, "wrong-tensor"): 3, (SWIGLU_KERNEL, "half-accumulation"): 2,
        (SWIGLU_KERNEL, "out-of-bounds"): 1, (ROPE, "transpose"): 2, (ROPE, "layout"): 2,
        (ROPE_KERNEL, "transpose"): 3, (ROPE_KERNEL, "layout"): 2, (ROPE_KERNEL, "out-of-bounds"): 1}
DECLARED = {(m.name, test.removeprefix("test_")): cls for m in MUTANTS for test, cls in m.expect.items()}


def test_every_declared_diagnosis_has_words_and_a_planned_hint():
    assert set(DECLARED) == set(WORDS)
    assert {(name, cls) for (_, name), cls in DECLARED.items() if cls != "wrong-values"} <= set(PLAN)


# Diagnoses name the bug and where; the fixed code lives in the notebook's last hint.
LITERAL_FIXES = ("-sin", "cos, -", "not interleaved", "(1 - s)", ".to(cdtype)", "mask=inside", "x * pdf")


@pytest.mark.parametrize("mutant, name, on_a_gpu", [(m, n, False) for m, n in WORDS] +
                         [(m, n, True) for m, n in WITHOUT_SANITIZER])
def test_each_mutant_is_named_in_words(mutant, name, on_a_gpu, request, capsys):
    """With the sanitizer (the CPU) as the mutant declares; without it (a GPU) as WITHOUT_SANITIZER says; each
    failure points to the hint the plan gives its topic (else its class), and prints no fixed code."""
    if on_a_gpu:
        request.getfixturevalue("unsanitized")
    cls, words = WITHOUT_SANITIZER[mutant, name] if on_a_gpu else (DECLARED[mutant, name], WORDS[mutant, name])
    checks = (getattr(visible, name), getattr(hidden, name))
    for failure in assert_diagnosed(mutant_named(SLUG, mutant)[name], checks, cls, words, mutant):
        planned = PLAN.get((name, failure.topic or failure.cls))
        assert planned is None or failure.hint == planned, f"{mutant}: hint {failure.hint}, planned {planned}"
        assert not [fix for fix in LITERAL_FIXES if fix in str(failure)], str(failure)
    assert capsys.readouterr().err == ""


def _edited(name: str, edit: str):
    """The solution of ``name`` with ``edit`` applied (tools.mutants' form), as a student's namespace holds it."""
    return with_cells(SLUG, {name: edited_solution(SLUG, name, edit)}, f"edited {name}")[name]


OTHER_WAYS = {  # (exercise, edit of its solution cell)
    "RoPE's backward as the forward turned by −θ": (ROPE, """
-    g1, g2 = rope_pairs(dy, interleaved)
-    return rope_join(g1 * cos + g2 * sin, g2 * cos - g1 * sin, interleaved)
+    return rope_forward(dy, cos, -sin, interleaved)
"""),
    "SwiGLU through F.silu": (SWIGLU, """
-    s = torch.sigmoid(a)
-    return dh * b * s * (1 + a * (1 - s)), dh * a * s
+    silu = torch.nn.functional.silu(a)
+    return dh * b * (torch.sigmoid(a) + silu * (1 - torch.sigmoid(a))), dh * silu
"""),
    "GELU's exact form through torch.erf and the density's exp written apart": (GELU, """
-    return dy * (cdf + x * pdf)
+    return dy * cdf + dy * x * pdf
"""),
    "the SwiGLU kernel with tl.sigmoid": (SWIGLU_KERNEL, """
-    s = 1 / (1 + tl.exp(-a))
+    s = tl.sigmoid(a)
"""),
}


@pytest.mark.parametrize("way", list(OTHER_WAYS))
@pytest.mark.parametrize("on_a_gpu", [False, True])
def test_a_right_answer_written_another_way_passes(way, on_a_gpu, request, capsys):
    """…with the sanitizer, and without it (a GPU's path)."""
    if on_a_gpu:
        request.getfixturevalue("unsanitized")
    name, edit = OTHER_WAYS[way]
    fn = _edited(name, edit)
    getattr(visible, name)(fn)
    getattr(hidden, name)(fn)
    assert capsys.readouterr().err == ""


MORE_BUGS = {  # (exercise, edit of its solution cell, class, words)
    "silu' as σ(a) alone": (SWIGLU, """
-    return dh * b * s * (1 + a * (1 - s)), dh * a * s
+    return dh * b * s, dh * a * s
""", "wrong-values", ["σ(a) for silu'(a)"]),
    "b̄ as h̄ ⊙ a": (SWIGLU, """
-    return dh * b * s * (1 + a * (1 - s)), dh * a * s
+    return dh * b * s * (1 + a * (1 - s)), dh * a
""", "wrong-values", ["what multiplies b in h"]),
    "the exact derivative for the tanh form": (GELU, """
-    if approximate == "tanh":
+    if False:
""", "wrong-values", ["derivative of the exact (erf) GELU", "approximate='tanh'"]),
    "the SwiGLU kernel in float32 for float64 inputs": (SWIGLU_KERNEL, """
-    b = tl.load(B_ptr + row * stride_b + cols, mask=inside, other=0.0).to(cdtype)
-    dh = tl.load(DH_ptr + row * stride_dh + cols, mask=inside, other=0.0).to(cdtype)
-    a = a.to(cdtype)
+    b = tl.load(B_ptr + row * stride_b + cols, mask=inside, other=0.0).to(tl.float32)
+    dh = tl.load(DH_ptr + row * stride_dh + cols, mask=inside, other=0.0).to(tl.float32)
+    a = a.to(tl.float32)
""", "wrong-values", ["float32 precision", "cdtype"]),
    "the forward launch turned by −θ": (ROPE_KERNEL, """
-    if BACKWARD:
+    if not BACKWARD:
""", "transpose", ["turns each pair by −θ", "forward"]),
    "a row's position taken as the row": (ROPE_KERNEL, """
-    cos = tl.load(COS_ptr + pos * half + i, mask=inside, other=0.0)
-    sin = tl.load(SIN_ptr + pos * half + i, mask=inside, other=0.0)
+    cos = tl.load(COS_ptr + row * half + i, mask=inside, other=0.0)
+    sin = tl.load(SIN_ptr + row * half + i, mask=inside, other=0.0)
""", "out-of-bounds", ["COS_ptr"]),
}


@pytest.mark.parametrize("name, edit, cls, words", list(MORE_BUGS.values()), ids=list(MORE_BUGS))
def test_more_bugs_are_named(name, edit, cls, words):
    fn = _edited(name, edit)
    assert_diagnosed(fn, (getattr(visible, name), getattr(hidden, name)), cls, words, f"{name}: {edit}")


def _tensors(case) -> tuple:
    """The tensors whose shapes tell a case: its arguments, the gradcheck's first two, a kernel case's first."""
    if isinstance(case, lesson.Gradcheck):
        return case.inputs[:2]
    return getattr(case, "args", None) or (case.x if hasattr(case, "x") else case.a,)


# exercise -> (the visible case builder, its seed, its table, the hidden cases)
TABLES = {GELU: (lesson.gelu_cases, 1, lesson.VISIBLE_GELU, hidden_cases.hidden_gelu_cases),
          SWIGLU: (lesson.swiglu_cases, 2, lesson.VISIBLE_SWIGLU, hidden_cases.hidden_swiglu_cases),
          SWIGLU_KERNEL: (lesson.swiglu_kernel_cases, 3, lesson.VISIBLE_SWIGLU_KERNEL,
                          hidden_cases.hidden_swiglu_kernel_cases),
          ROPE: (lesson.rope_cases, 4, lesson.VISIBLE_ROPE, hidden_cases.hidden_rope_cases),
          ROPE_KERNEL: (lesson.rope_kernel_cases, 5, lesson.VISIBLE_ROPE_KERNEL, hidden_cases.hidden_rope_kernel_cases)}


@pytest.mark.parametrize("name", list(TABLES))
def test_no_hidden_shape_is_a_visible_one(name, seeded):
    build, offset, table, drawn = TABLES[name]
    ours, theirs = ({tuple(tuple(t.shape) for t in _tensors(c)) for c in cases}
                    for cases in (build(lesson.seeded(lesson.SEED + offset), table), drawn(generator("any"))))
    assert len(theirs) >= 2 and not ours & theirs, name


def test_the_hidden_cases_cover_the_sizes_the_issue_names(seeded):
    swiglu = [c for c in hidden_cases.hidden_swiglu_kernel_cases(generator("any")) if isinstance(c, lesson.SwigluCase)]
    assert {c.dtype for c in swiglu} == {lesson.F64, lesson.F32, lesson.F16}
    assert all(c.a.shape[1] % c.block and c.a.shape[1] > c.block for c in swiglu)
    rope = [c for c in hidden_cases.hidden_rope_kernel_cases(generator("any")) if isinstance(c, lesson.RopeCase)]
    assert {(c.interleaved, c.backward) for c in rope} == {(False, False), (True, True), (True, False), (False, True)}
    assert {c.dtype for c in rope} == {lesson.F64, lesson.F32}
    assert all(c.x.shape[-1] // 2 & (c.x.shape[-1] // 2 - 1) for c in rope), "D/2 no power of two"
    assert {c.kwargs.get("approximate") for c in hidden_cases.hidden_gelu_cases(generator("any"))} == {
        None, "none", "tanh"}
    for cases in (hidden_cases.hidden_gelu_cases, hidden_cases.hidden_swiglu_cases, hidden_cases.hidden_rope_cases):
        assert [c.batch for c in cases(generator("any"))][0] == 1 and 7 in {c.batch for c in cases(generator("any"))}

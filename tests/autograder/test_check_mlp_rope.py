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
from tests.support import assert_diagnosed, declared_classes, edited_solution, failure_of, mutant_named, with_cells
from tools.mutants import mutants

SLUG = "11_mlp_and_rope"
GELU, SWIGLU, SWIGLU_KERNEL, ROPE, ROPE_KERNEL = (
    "gelu_backward", "swiglu_backward", "swiglu_bwd_kernel", "rope_backward", "rope_kernel")
MUTANTS = mutants(SLUG)


def test_the_mutants_show_every_class_the_issue_names():
    assert 4 <= len(MUTANTS) <= 6, "each mutant is a full notebook run in `make grade`: keep them few"
    assert {(GELU, "wrong-values"), (SWIGLU, "wrong-values"), (SWIGLU_KERNEL, "wrong-values"),
            (SWIGLU_KERNEL, "half-accumulation"), (SWIGLU_KERNEL, "out-of-bounds"), (ROPE, "transpose"),
            (ROPE, "wrong-values"), (ROPE_KERNEL, "transpose"), (ROPE_KERNEL, "wrong-values"),
            (ROPE_KERNEL, "out-of-bounds")} <= declared_classes(MUTANTS)


def test_each_mutant_declares_exactly_the_cells_it_breaks():
    for m in MUTANTS:
        assert set(m.expect) == {f"test_{cell}" for cell in m.cells}, m.name


# (mutant, exercise) -> words both checks' message holds, with the sanitizer on (the CPU)
WORDS = {
    ("theta_sign", ROPE): ["turns each pair by +θ", "transpose R(θ)ᵀ"],
    ("theta_sign", ROPE_KERNEL): ["turns each pair by +θ", "backward (x is ȳ)"],
    ("swapped_gradients", SWIGLU): ["da and db are swapped"],
    ("swapped_gradients", SWIGLU_KERNEL): ["da and db are swapped"],
    ("layout_pairs", ROPE): ["the other layout's pairs", "asked for half-split pairs"],
    ("layout_pairs", ROPE_KERNEL): ["the other layout's pairs", "asked for half-split pairs"],
    ("silu_wrong_tensor", GELU): ["only the first term of the product rule"],
    ("silu_wrong_tensor", SWIGLU): ["silu' of h = silu(a) ⊙ b, the output", "taken at a"],
    ("silu_wrong_tensor", SWIGLU_KERNEL): ["silu' of silu(a)", "taken at a"],
    ("missing_masks", SWIGLU_KERNEL): ["stores to DA_ptr", "no element of any tensor argument"],
    ("missing_masks", ROPE_KERNEL): ["loads X_ptr", "between the elements of X_ptr"],
    ("half_math_and_gelu_forms", GELU): ["derivative of the tanh approximation", "approximate='none'"],
    ("half_math_and_gelu_forms", SWIGLU_KERNEL): ["right on these values in float32", "float16 spacings"],
}
# Without the sanitizer (a GPU) the values name what they can: (class, words), or "pass" where no value shows it.
WITHOUT_SANITIZER = {
    ("missing_masks", SWIGLU_KERNEL): ("wrong-values", ["writes past the end of a row", "da"]),
    ("missing_masks", ROPE_KERNEL): ("pass", []),  # the lanes past the row load NaN, but their stores are masked
}
HINTS = {"swapped": 1, "product": 1, "form": 2, "wrong-tensor": 2, "layout": 2, "half-accumulation": 2}


def test_every_declared_diagnosis_has_words():
    assert {(m.name, t.removeprefix("test_")) for m in MUTANTS for t in m.expect} == set(WORDS)


def _assert_named(mutant: str, name: str, cls: str, words: list[str]) -> None:
    checks = (getattr(visible, name), getattr(hidden, name))
    for failure in assert_diagnosed(mutant_named(SLUG, mutant)[name], checks, cls, words, mutant):
        key = failure.topic if failure.topic in HINTS else failure.cls
        expected = 3 if name == SWIGLU_KERNEL and key in ("swapped", "wrong-tensor") else HINTS.get(key)
        assert expected is None or failure.hint == expected, f"{mutant}: hint {failure.hint} for {key}"


@pytest.fixture(autouse=True)
def one_hidden_draw(monkeypatch):
    """One replayed draw of the hidden sizes (test_samples replays three): every run reads the same."""
    monkeypatch.setenv("AUTOGRADER_SEED", "11")


NAMED = [(m, n, False) for m, n in WORDS] + [(m, n, True) for m, n in WITHOUT_SANITIZER]


@pytest.mark.parametrize("mutant, name, on_a_gpu", NAMED)
def test_each_mutant_is_named_in_words(mutant, name, on_a_gpu, request, capsys):
    """With the sanitizer (the CPU) as the mutant declares; without it (a GPU) as WITHOUT_SANITIZER says."""
    if on_a_gpu:
        request.getfixturevalue("unsanitized")
        _assert_named(mutant, name, *WITHOUT_SANITIZER[mutant, name])
    else:
        _assert_named(mutant, name, next(m for m in MUTANTS if m.name == mutant).expect[f"test_{name}"],
                      WORDS[mutant, name])
    assert capsys.readouterr().err == ""


# Diagnoses name the bug and where; the fixed code lives in the notebook's last hint.
LITERAL_FIXES = ("-sin", "cos, -", "not interleaved", "(1 - s)", ".to(cdtype)", "mask=inside", "x * pdf")


@pytest.mark.parametrize("mutant, name", list(WORDS))
def test_no_diagnosis_prints_the_fixed_code(mutant, name):
    message = str(failure_of(getattr(visible, name), mutant_named(SLUG, mutant)[name]))
    assert not [fix for fix in LITERAL_FIXES if fix in message], message


def _edited(name: str, edit: str) -> dict:
    return with_cells(SLUG, {name: edited_solution(SLUG, name, edit)}, f"edited {name}")


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
    fn = _edited(name, edit)[name]
    getattr(visible, name)(fn)
    getattr(hidden, name)(fn)
    assert capsys.readouterr().err == ""


MORE_BUGS = {  # (exercise, edit of its solution cell, class, words)
    "silu' as σ(a) alone": (SWIGLU, """
-    return dh * b * s * (1 + a * (1 - s)), dh * a * s
+    return dh * b * s, dh * a * s
""", "wrong-values", ["σ(a) for silu'(a)"]),
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


@pytest.mark.parametrize("bug", list(MORE_BUGS))
def test_more_bugs_are_named(bug):
    name, edit, cls, words = MORE_BUGS[bug]
    assert_diagnosed(_edited(name, edit)[name], (getattr(visible, name), getattr(hidden, name)), cls, words, bug)


def _shapes(cases) -> set[tuple]:
    return {tuple(tuple(t.shape) for t in (c.inputs[:2] if isinstance(c, lesson.Gradcheck) else
                                           c.args if hasattr(c, "args") else (c.x,) if hasattr(c, "x") else (c.a,)))
            for c in cases}


def test_the_hidden_checks_differ_from_the_visible_ones_in_shapes(seeded):
    pairs = [(lesson.gelu_cases(lesson.seeded(lesson.SEED + 1), lesson.VISIBLE_GELU),
              hidden_cases.hidden_gelu_cases(generator("any"))),
             (lesson.swiglu_cases(lesson.seeded(lesson.SEED + 2), lesson.VISIBLE_SWIGLU),
              hidden_cases.hidden_swiglu_cases(generator("any"))),
             (lesson.rope_cases(lesson.seeded(lesson.SEED + 4), lesson.VISIBLE_ROPE),
              hidden_cases.hidden_rope_cases(generator("any"))),
             (lesson.swiglu_kernel_cases(lesson.seeded(lesson.SEED + 3), lesson.VISIBLE_SWIGLU_KERNEL),
              hidden_cases.hidden_swiglu_kernel_cases(generator("any"))),
             (lesson.rope_kernel_cases(lesson.seeded(lesson.SEED + 5), lesson.VISIBLE_ROPE_KERNEL),
              hidden_cases.hidden_rope_kernel_cases(generator("any")))]
    for ours, theirs in pairs:
        assert len(_shapes(theirs)) >= 2 and not _shapes(theirs) & _shapes(ours)


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

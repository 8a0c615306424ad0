"""The checks of 01_matmul_from_shapes: the mutants cover the lesson's bugs, and every check can fail.

Both the hidden checks (``autograder.check.matmul``) and the visible ones
(``course.selfcheck.matmul``) are run on the same functions: a student must read the
same diagnosis before submitting as after. The solution, the release stubs and each
mutant's diagnosis are checked for every lesson in ``test_samples.py``.
"""

import warnings

import pytest
import torch

import autograder.check.matmul as hidden
import course
import course.selfcheck.matmul as visible
from autograder.inputs import generator
from course.diagnose import diagnose
from tests.support import diagnosis, failure_of, solutions
from tools.build_notebooks import TEXT_DIR, parse
from tools.mutants import mutants

SLUG = "01_matmul_from_shapes"
FUNCTIONS = ["linear_backward", "linear_bias_backward", "reduce_to_shape", "batched_matmul_backward"]  # gradients
EXERCISES = [*FUNCTIONS[:3], "name_the_bug", "batched_matmul_backward"]  # every graded function, in notebook order
SOLUTION = solutions(SLUG)
MUTANTS = mutants(SLUG)
F64 = torch.float64

# The bug classes each exercise must have a mutant for (the list, where it applies).
REQUIRED = {
    "linear_backward": {"transpose", "batch-reduction", "sign", "scale", "shape"},
    "linear_bias_backward": {"transpose", "batch-reduction", "sign", "scale", "shape", "broadcast-axis"},
    "reduce_to_shape": {"batch-reduction", "scale", "shape", "broadcast-axis"},
    "name_the_bug": {"wrong-values", "shape"},  # a backward misnamed; an answer outside the vocabulary
    "batched_matmul_backward": {"transpose", "batch-reduction", "sign", "scale", "shape"},
}


@pytest.fixture
def one_seed(monkeypatch):
    """One replayable hidden draw, for the checks' own sanity tests."""
    monkeypatch.setenv("AUTOGRADER_SEED", "0")


def both(name: str):
    return [getattr(hidden, name), getattr(visible, name)]


# ---------------------------------------------------------------------------
# The mutants


def test_the_mutants_cover_every_bug_class_of_every_exercise():
    assert 1 <= len(MUTANTS) <= 6, "each mutant is a full notebook run in `make grade`: keep them few"
    seen = {name: set() for name in EXERCISES}
    for m in MUTANTS:
        assert set(m.cells) == set(EXERCISES) and set(m.expect) == {f"test_{f}" for f in EXERCISES}
        for test, cls in m.expect.items():
            seen[test.removeprefix("test_")].add(cls)
    for name, classes in REQUIRED.items():
        assert classes <= seen[name], f"{name}: no mutant for {sorted(classes - seen[name])}"


# ---------------------------------------------------------------------------
# Exceptions, autograd


def crashing_linear_backward(x, w, dy):
    dx = dy @ w.mT
    dw = torch.mm(x, dy)  # (B, K) @ (B, N): the inner axes do not agree
    return dx, dw


def test_an_exception_is_an_error_that_names_the_students_line(one_seed):
    for check in both("linear_backward"):
        failure = failure_of(check, crashing_linear_backward)
        assert failure.cls == "error"
        assert "RuntimeError" in failure.sentence
        assert "in crashing_linear_backward" in str(failure) and "dw = torch.mm(x, dy)" in str(failure)


def test_a_function_that_is_not_callable_is_an_error():
    for check in both("reduce_to_shape"):
        assert failure_of(check, None).cls == "error"


def autograd_linear_backward(x, w, dy):
    leaves = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    return torch.autograd.grad(leaves[0] @ leaves[1], leaves, dy)


def test_autograd_inside_the_backward_is_refused(one_seed):
    for check in both("linear_backward"):
        assert failure_of(check, autograd_linear_backward).cls == "autograd-in-backward"


# ---------------------------------------------------------------------------
# The checks can fail: near misses are caught


def nudged(name: str, *, when=lambda args: True, by: float = 1e-5):
    """The solution with one entry of its last output moved by ``by`` (relative), wherever ``when(args)``."""
    def fn(*args):
        out = SOLUTION[name](*args)
        outs = list(out) if isinstance(out, tuple) else [out]
        if when(args):
            last = outs[-1].clone()
            last.view(-1)[0] += by * (last.abs().max() + 1)
            outs[-1] = last
        return tuple(outs) if isinstance(out, tuple) else outs[0]
    return fn


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_tiny_error_in_one_entry_fails(name, one_seed):
    for check in both(name):
        failure_of(check, nudged(name))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_zeros_fail(name):
    def zeros(*args):
        expected = SOLUTION[name](*args)
        return tuple(torch.zeros_like(t) for t in expected) if isinstance(expected, tuple) else torch.zeros_like(expected)
    for check in both(name):
        failure_of(check, zeros)


@pytest.mark.parametrize("name", ["linear_backward", "linear_bias_backward"])
def test_right_only_at_batch_1_fails(name, one_seed):
    batch_above_1 = lambda args: args[0].reshape(-1, args[0].shape[-1]).shape[0] > 1  # noqa: E731
    for check in both(name):
        assert failure_of(check, nudged(name, when=batch_above_1, by=0.5)).cls == "batch-reduction"


@pytest.mark.parametrize("name", ["linear_backward", "linear_bias_backward"])
def test_right_only_for_a_2d_input_fails(name, one_seed):
    for check in both(name):
        failure_of(check, nudged(name, when=lambda args: args[0].ndim > 2, by=0.5))


def test_a_reduction_right_only_when_nothing_is_broadcast_fails(one_seed):
    for check in both("reduce_to_shape"):
        failure_of(check, nudged("reduce_to_shape", when=lambda args: tuple(args[0].shape) != tuple(args[1]), by=0.5))


@pytest.mark.parametrize("name, bad", [
    ("linear_bias_backward", lambda x, w, b, dy: (dy @ w.mT, x.reshape(-1, w.shape[0]).mT @ dy.reshape(-1, w.shape[1]),
                                                  torch.zeros(2, 2, dtype=F64))),
    ("reduce_to_shape", lambda grad, shape: torch.zeros(2, 2, dtype=F64) if len(shape) < 2 else grad.sum_to_size(shape)),
])
def test_a_result_with_too_many_axes_is_a_shape_failure_not_a_crash(name, bad):
    for check in both(name):
        assert failure_of(check, bad).cls == "shape"


def test_torchs_own_sum_to_size_is_refused_once_its_values_pass(one_seed):
    """Tensor.sum_to_size is the whole of reduce_to_shape: right values, and no derivation."""
    for check in both("reduce_to_shape"):
        failure = failure_of(check, lambda grad, shape: grad.sum_to_size(shape))
        assert failure.cls == "wrong-values" and "sum_to_size" in failure.sentence, str(failure)
    assert torch.Tensor.sum_to_size(torch.ones(2, 3), (1, 3)).tolist() == [[2.0, 2.0, 2.0]], "put back after the check"


def test_a_correct_answer_that_warns_still_passes_and_keeps_stderr_clean(capsys):
    def noisy(x, w, dy):
        warnings.warn("a deprecation the student did not cause", UserWarning, stacklevel=1)
        return SOLUTION["linear_backward"](x, w, dy)
    for check in both("linear_backward"):
        check(noisy)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------
# Inputs, references and alternatives


def hidden_linear_cases(gen, bias):
    name = "linear_bias_backward" if bias else "linear_backward"
    return visible.EXERCISES[name].cases(gen, hidden.LINEAR_SHAPES + hidden.LINEAR_TRANSPOSED)


def hidden_reduce_cases(gen):
    return visible.EXERCISES["reduce_to_shape"].cases(gen, hidden.REDUCE_SHAPES + hidden.REDUCE_TRANSPOSED)


def hidden_batched_cases(gen):
    return visible.EXERCISES["batched_matmul_backward"].cases(gen, hidden.BATCHED_SHAPES + hidden.BATCHED_TRANSPOSED)


def test_the_hidden_shapes_cover_what_the_contract_promises():
    leads = [lead for lead, _, _ in hidden.LINEAR_SHAPES]
    rows = [torch.Size(lead).numel() for lead in leads]
    assert rows[0] == 1 and 7 in rows, "batch 1 first, then batch 7"
    assert any(len(lead) >= 2 and torch.Size(lead).numel() > 1 for lead in leads), "a 3-D (or more) x"
    assert any(K == N for _, K, N in hidden.LINEAR_SHAPES) and any(K != N for _, K, N in hidden.LINEAR_SHAPES)
    assert any(torch.Size(lead).numel() == N for lead, _, N in hidden.LINEAR_SHAPES), "a square dy, for db's axis"
    sizes = {s for lead, K, N in hidden.LINEAR_SHAPES for s in (*lead, K, N)}
    assert any(s > 2 and s & (s - 1) for s in sizes), "non-power-of-two sizes"
    targets = [tuple(shape) for _, shape in hidden.REDUCE_SHAPES]
    assert tuple(hidden.REDUCE_SHAPES[0][0]) == targets[0], "the identity first (the reduction's batch 1)"
    assert () in targets and any(isinstance(shape, torch.Size) for _, shape in hidden.REDUCE_SHAPES)
    assert any(len(set(g)) == 1 and len(g) >= 2 and len(t) < len(g) for g, t in hidden.REDUCE_SHAPES), "a square grad"


def test_hidden_inputs_change_with_the_seed_and_replay_with_it(monkeypatch):
    def first_x(seed):
        monkeypatch.setenv("AUTOGRADER_SEED", seed)
        return hidden_linear_cases(generator("linear_backward"), bias=False)[2].args[0]
    assert torch.equal(first_x("5"), first_x("5"))
    assert not torch.equal(first_x("5"), first_x("6"))
    assert first_x("5").dtype == F64


def test_visible_inputs_are_fixed():
    a, b = visible.VISIBLE_CASES["linear_bias_backward"](), visible.VISIBLE_CASES["linear_bias_backward"]()
    assert all(torch.equal(s, t) for ca, cb in zip(a, b) for s, t in zip(ca.args, cb.args))


# The closed forms, in float64: what the checks' one reference (torch autograd) must agree with.


def linear_reference(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x̄ = ȳ Wᵀ keeps x's leading axes; W̄ = xᵀ ȳ sums over every one of them."""
    K, N = w.shape
    dx = dy @ w.mT  # (..., N) @ (N, K) -> (..., K)
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)  # (R, K), (R, N)
    dw = (x_rows[:, :, None] * dy_rows[:, None, :]).sum(dim=0)  # Σ_r x[r, k] ȳ[r, n], the elementwise definition
    return dx, dw


def linear_bias_reference(x, w, b, dy):
    """As ``linear_reference``, plus b̄ = ȳ summed over every row (b was copied to each)."""
    dx, dw = linear_reference(x, w, dy)
    return dx, dw, dy.reshape(-1, w.shape[1]).sum(dim=0)


def reduce_reference(grad: torch.Tensor, shape) -> torch.Tensor:
    """Sum the axes broadcasting prepended; sum, keeping them, the size-1 axes it stretched."""
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    out = grad.sum(dim=tuple(range(lead))) if lead else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    return out.sum(dim=stretched, keepdim=True) if stretched else out.clone()


def batched_reference(a: torch.Tensor, c: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ā = ȳ cᵀ per element; c̄ = aᵀ ȳ per element, summed over the batch where c is shared."""
    c_each = c.expand(a.shape[0], *c.shape[-2:])  # (B, K, N): the matrix each element used
    da = torch.einsum("bmn,bkn->bmk", dy, c_each)  # (B, M, K)
    per_element = torch.einsum("bmk,bmn->bkn", a, dy)  # (B, K, N)
    if c.ndim == 2:
        dc = per_element.sum(dim=0)
    elif c.shape[0] == 1:
        dc = per_element.sum(dim=0, keepdim=True)
    else:
        dc = per_element
    return da, dc


@pytest.mark.parametrize("bias", [False, True])
def test_the_hidden_references_agree_with_autograd(bias, one_seed):
    reference = linear_bias_reference if bias else linear_reference
    autograd = visible._linear_bias_reference if bias else visible._linear_reference
    for case in hidden_linear_cases(generator("ref"), bias=bias):
        for ours, torchs in zip(reference(*case.args), autograd(*case.args)):
            assert ours.shape == torchs.shape and torch.allclose(ours, torchs, rtol=1e-12, atol=1e-12), case.label


def test_the_hidden_reduction_agrees_with_autograd_and_sum_to_size(one_seed):
    for case in hidden_reduce_cases(generator("ref")):
        grad, shape = case.args
        ours = reduce_reference(grad, shape)
        assert ours.shape == tuple(shape), case.label
        assert torch.allclose(ours, visible._reduce_reference(grad, shape), rtol=1e-12, atol=1e-12)
        assert torch.allclose(ours, grad.sum_to_size(shape), rtol=1e-12, atol=1e-12)


def hidden_alternatives(seed_salt: str = "alts"):
    """(output name, expected, alternatives, case label) for every output of every hidden case."""
    for case in hidden_linear_cases(generator(seed_salt), bias=True):
        expected = dict(zip(("dx", "dw", "db"), visible._linear_bias_reference(*case.args)))
        for out, alts in visible.bias_alternatives(visible._linear_bias_reference, *case.args).items():
            yield out, expected[out], alts, case.label
    for case in hidden_reduce_cases(generator(seed_salt)):
        grad, shape = case.args
        expected = visible._reduce_reference(grad, shape)
        yield "result", expected, visible.reduce_alternatives(grad, shape, expected), case.label


def test_every_named_bug_is_diagnosed_as_itself(one_seed):
    """Fed back as a student's answer, each alternative gets its own class: none is shadowed or ambiguous."""
    count = 0
    for out, expected, alts, label in hidden_alternatives():
        for alt in alts:
            failure = diagnose(out, alt.value, expected, alternatives=alts)
            assert failure is not None, f"{label}: {out} alternative equals the right answer"
            assert (failure.cls, failure.sentence) == (alt.cls, alt.sentence), f"{label}: {alt.sentence}"
            count += 1
    assert count > 50


def test_the_square_cases_produce_the_bugs_only_values_can_show(one_seed):
    """Where shapes cannot tell, an alternative must: dy @ w for a square w, dy summed over features for a square dy."""
    named = {(out, alt.cls) for out, expected, alts, _ in hidden_alternatives() for alt in alts
             if alt.value.shape == expected.shape}
    assert ("dx", "transpose") in named and ("db", "broadcast-axis") in named and ("result", "broadcast-axis") in named


# ---------------------------------------------------------------------------
# name_the_bug


def suspects_of_the_notebook() -> dict:
    """What §9's given cell defines: suspect_1 … suspect_5 and broken_batched_matmul_backward."""
    cell = next(c for c in parse((TEXT_DIR / f"{SLUG}.py").read_text(), SLUG) if "def suspect_1" in c.source)
    ns = {"torch": torch}
    exec(compile(cell.source, "<§9>", "exec"), ns)
    return ns


@pytest.mark.parametrize("seed", range(8))
def test_every_hidden_broken_backward_has_the_class_it_declares(seed, monkeypatch):
    """The solution's classifier agrees with every flavour's label, whatever the draw."""
    monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
    for label, backward, cls, what in hidden.name_the_bug_cases(generator("name_the_bug")):
        assert SOLUTION["name_the_bug"](backward) == cls, f"{label}: {what}"


def test_every_flavour_is_named_right_and_every_class_is_drawn(monkeypatch):
    flavours = [(cls, what, fn) for cls, groups in hidden.BROKEN.items() for group in groups for what, fn in group]
    for cls, what, backward in flavours:
        assert SOLUTION["name_the_bug"](backward) == cls, what
    for seed in range(5):
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        drawn = [cls for _, _, cls, _ in hidden.name_the_bug_cases(generator("name_the_bug"))]
        assert set(drawn) == set(visible.BUG_NAMES) and len(drawn) == sum(map(len, hidden.BROKEN.values()))


def test_the_hidden_backwards_give_nothing_away(monkeypatch):
    """Their names are all alike; the label a student reads is a number."""
    monkeypatch.setenv("AUTOGRADER_SEED", "0")
    cases = hidden.name_the_bug_cases(generator("name_the_bug"))
    assert {backward.__name__ for _, backward, cls, _ in cases if backward is not hidden._right_by_einsum} == {"backward"}
    assert all(label.startswith("hidden backward ") for label, *_ in cases)
    assert all(not any(word in backward.__name__ for word in visible.BUG_NAMES) for _, backward, _, _ in cases)


def test_the_visible_suspects_are_the_notebooks_and_are_labelled_right():
    """The first five are §9's suspects (same bug on the same inputs); every label is the solution's answer."""
    ns = suspects_of_the_notebook()
    gen = torch.Generator().manual_seed(3)
    args = (torch.randn(7, 3, generator=gen, dtype=F64), torch.randn(3, 5, generator=gen, dtype=F64),
            torch.randn(5, generator=gen, dtype=F64), torch.randn(7, 5, generator=gen, dtype=F64))
    for i, (label, backward, _, _) in enumerate(visible.SUSPECTS[:5], start=1):
        theirs, ours = ns[f"suspect_{i}"](*args), backward(*args)
        assert all(torch.equal(t, o) for t, o in zip(theirs, ours)), label
    for label, backward, cls, _ in visible.SUSPECTS:
        assert SOLUTION["name_the_bug"](backward) == cls, label
    assert not any(fn.__name__[:1] != "_" for _, fn, _, _ in visible.SUSPECTS), "course functions a student calls are private"


@pytest.mark.parametrize("answer", visible.BUG_NAMES)
def test_a_constant_answer_fails(answer, one_seed):
    for check in both("name_the_bug"):
        assert failure_of(check, lambda backward: answer).cls == "wrong-values"


def test_an_answer_outside_the_vocabulary_is_a_shape_failure():
    for check in both("name_the_bug"):
        assert failure_of(check, lambda backward: "transposed").cls == "shape"
        assert failure_of(check, lambda backward: 3).cls == "shape"


def test_a_lookup_of_the_visible_suspects_fails_the_hidden_check(one_seed):
    """Learning the visible labels by heart passes the visible check and nothing else."""
    table = {fn: cls for _, fn, cls, _ in visible.SUSPECTS}
    lookup = lambda backward: table.get(backward, "none")  # noqa: E731
    visible.name_the_bug(lookup)
    assert failure_of(hidden.name_the_bug, lookup).cls == "wrong-values"


def test_a_course_helper_inside_name_the_bug_is_delegation(one_seed):
    def borrows(backward):
        course.relative_error(torch.ones(2, dtype=F64), torch.ones(2, dtype=F64))
        return SOLUTION["name_the_bug"](backward)

    for check in both("name_the_bug"):
        assert diagnosis(check, borrows) == "delegated-to-helper"


def test_autograd_is_allowed_inside_name_the_bug(one_seed):
    """name_the_bug is a test of a backward, and autograd is a fair reference there."""
    def with_autograd(backward):
        x, w, b = (torch.randn(*s, dtype=F64, requires_grad=True) for s in ((7, 3), (3, 5), (5,)))
        torch.autograd.grad((x @ w + b).sum(), (x, w, b))
        return SOLUTION["name_the_bug"](backward)

    for check in both("name_the_bug"):
        check(with_autograd)


# ---------------------------------------------------------------------------
# batched_matmul_backward


def test_the_handed_over_broken_backward_is_a_batch_reduction(one_seed):
    ns = suspects_of_the_notebook()
    for check in both("batched_matmul_backward"):
        assert failure_of(check, ns["broken_batched_matmul_backward"]).cls == "batch-reduction"


def test_the_hidden_batched_reference_agrees_with_autograd(one_seed):
    for case in hidden_batched_cases(generator("ref")):
        for ours, torchs in zip(batched_reference(*case.args), visible._batched_reference(*case.args)):
            assert ours.shape == torchs.shape and torch.allclose(ours, torchs, rtol=1e-12, atol=1e-12), case.label


def test_every_named_batched_bug_is_diagnosed_as_itself(one_seed):
    count = 0
    for case in hidden_batched_cases(generator("alts")):
        expected = dict(zip(("da", "dc"), visible._batched_reference(*case.args)))
        for out, alts in visible.batched_alternatives(visible._batched_reference, *case.args).items():
            for alt in alts:
                failure = diagnose(out, alt.value, expected[out], alternatives=alts)
                assert failure is not None and (failure.cls, failure.sentence) == (alt.cls, alt.sentence), case.label
                count += 1
    assert count >= 5


def test_every_check_ends_with_non_contiguous_inputs(one_seed):
    for cases in (hidden_linear_cases(generator("x"), bias=True), hidden_reduce_cases(generator("x")),
                  hidden_batched_cases(generator("x")),
                  *(visible.VISIBLE_CASES[name]() for name in ("linear_backward", "reduce_to_shape", "batched_matmul_backward"))):
        tensors = [a for a in cases[-1].args if isinstance(a, torch.Tensor)]
        assert any(not t.is_contiguous() for t in tensors), cases[-1].label

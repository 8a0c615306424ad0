"""05_attention_recompute: the checks name this lesson's bugs, and can fail.

The solution, the release stubs and each mutant's diagnosis are checked for every lesson
in ``test_samples.py``. Every check is run twice where it matters: the hidden one (``autograder.check``, random
inputs — several seeds here, since grading draws a fresh one each run) and the visible one
(``course.selfcheck``, fixed inputs). A mutant must get the same diagnosis from both. The
property checks (nothing T×T saved or allocated) get their own tests below: what they must
catch, and what they must let through. Warnings are errors here: a warning in a test cell
writes to stderr, and nbgrader scores such a cell zero.
"""

from __future__ import annotations

import linecache
import math
from pathlib import Path

import pytest
import torch

import autograder.check.attention as hidden
import course.selfcheck.attention as visible
from autograder.inputs import generator, randn
from autograder.submissions import Mutant, mutants
from course.diagnose import relative_error
from tests.support import failure_of, mutant_functions, solutions

pytestmark = pytest.mark.filterwarnings("error")

SLUG = "05_attention_recompute"
EXERCISES = (
    "ManualAttention", "manual_attention", "attention_forward_lse", "attention_backward_recompute",
    "RecomputeAttention", "recompute_attention", "attention_delta_kernel",
)
MUTANTS = mutants(SLUG)
F64 = torch.float64
REQUIRED = {  # the bug classes this lesson is about, per exercise: a mutant shows each one
    "ManualAttention": {"scale", "transpose", "broadcast-axis", "autograd-in-backward"},
    "manual_attention": {"wrong-values"},  # bypasses ManualAttention
    "attention_forward_lse": {"scale", "saved-quadratic-tensor"},
    "attention_backward_recompute": {"sign", "wrong-values", "saved-quadratic-tensor", "autograd-in-backward"},
    "RecomputeAttention": {"saved-quadratic-tensor", "autograd-in-backward"},
    "recompute_attention": {"saved-quadratic-tensor", "wrong-values"},
    "attention_delta_kernel": {"non-finite", "wrong-values"},  # a missing column mask; a store past n_rows
}


@pytest.fixture(scope="module")
def solution() -> dict:
    return solutions(SLUG)


def variant(cells: dict[str, str]) -> dict:
    """The solutions with some cells replaced, as a student's namespace."""
    return mutant_functions(Mutant(Path("variant.py"), SLUG, "variant", "", {}, cells))


def both(name: str):
    return [getattr(hidden, name), getattr(visible, name)]


# ---------------------------------------------------------------------------
# The references


def test_the_hidden_references_agree_with_torch():
    gen = generator("reference-test")
    for B, T, d in [(1, 7, 3), (7, 70, 5), (2, 201, 12)]:
        q, k, v, do = (randn(gen, B, T, d) for _ in range(4))
        for mine, torchs in zip(hidden.attention_reference(q, k, v, do), visible.sdpa_reference(q, k, v, do)):
            assert relative_error(mine, torchs) < 1e-13
        o, lse = hidden.forward_reference(q, k, v)
        assert relative_error(o, visible.sdpa_reference(q, k, v, do)[0]) < 1e-13
        assert relative_error(lse, visible.lse_reference(q, k)) < 1e-14
        D = hidden._delta_reference(o.reshape(-1, d), do.reshape(-1, d))
        assert relative_error(D, (o * do).sum(-1).reshape(-1)) < 1e-14


# ---------------------------------------------------------------------------
# The mutants (their diagnoses, for every lesson: test_samples.py)


def test_the_mutants_cover_the_bugs_this_lesson_is_about():
    assert 1 <= len(MUTANTS) <= 6, "each mutant is a full notebook run in `make grade`: keep them few"
    seen = {name: set() for name in EXERCISES}
    for m in MUTANTS:
        assert {f"test_{g}" for g in m.cells} <= set(m.expect), f"{m.name}: every replaced cell must fail its test"
        assert set(m.expect) <= {f"test_{name}" for name in EXERCISES}
        for test, cls in m.expect.items():
            seen[test.removeprefix("test_")].add(cls)
    for name, classes in REQUIRED.items():
        assert classes <= seen[name], f"{name}: no mutant shows {sorted(classes - seen[name])}"


# ---------------------------------------------------------------------------
# Unfinished helpers and student exceptions


def test_an_unfinished_helper_is_named_by_the_function_that_runs_it(solution):
    ns = variant({"attention_backward_recompute": '''
def attention_backward_recompute(q, k, v, o, lse, do):
    raise course.todo()'''})
    for check in both("RecomputeAttention"):
        failure = failure_of(check, ns["RecomputeAttention"])
        assert failure.cls == "not-implemented" and "runs attention_backward_recompute" in failure.sentence
        assert "Part D" in failure.sentence
    for check in both("recompute_attention"):
        failure = failure_of(check, ns["recompute_attention"])
        assert failure.cls == "not-implemented" and "Part E" in failure.sentence


STUDENT_CELL = '''\
def attention_backward_recompute(q, k, v, o, lse, do):
    D = (do * o).sum(dim=-1)
    P = torch.exp(q @ k - lse[..., None])
    return P, P, P
'''


def test_an_exception_is_error_and_names_the_students_line():
    filename = "<ipython-input-9>"  # IPython keeps cell sources in linecache like this
    linecache.cache[filename] = (len(STUDENT_CELL), None, STUDENT_CELL.splitlines(True), filename)
    ns = {"torch": torch}
    exec(compile(STUDENT_CELL, filename, "exec"), ns)
    for check in both("attention_backward_recompute"):
        failure = failure_of(check, ns["attention_backward_recompute"])
        assert failure.cls == "error"
        assert "line 3: P = torch.exp(q @ k - lse[..., None])" in str(failure)


# ---------------------------------------------------------------------------
# Values: named bugs beyond the mutants


MANUAL_TEMPLATE = '''
class ManualAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        P = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(q, k, v, P)
        return P @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, P = ctx.saved_tensors
        c = 1 / math.sqrt(q.shape[-1])
        dP = do @ v.mT
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
        dq, dk, dv = c * (dS @ k), c * (dS.mT @ q), P.mT @ do
        return RESULT
'''


@pytest.mark.parametrize("result, cls, words", [
    ("dk, dq, dv", "wrong-values", "holds the gradient of k"),  # returned in the wrong order
    ("dq, dk, P @ do", "transpose", "dv is P Ō"),  # P where Pᵀ belongs
    ("dq, -dk, dv", "sign", "negative"),
    ("dq * c, dk, dv", "scale", "twice"),
    ("dq.mT, dk, dv", "transpose", "transpose"),  # a shape autograd refuses: diagnosed, not a crash
    ("dq, dk", "shape", "must return 3 gradients"),  # one gradient short
])
def test_named_bugs_of_the_manual_backward(result, cls, words, seeded):
    ns = variant({"ManualAttention": MANUAL_TEMPLATE.replace("RESULT", result)})
    for check in both("ManualAttention"):
        failure = failure_of(check, ns["ManualAttention"])
        assert failure.cls == cls, str(failure)
        assert words in str(failure)


def test_a_missing_scale_in_the_blockwise_backward_is_scale(solution, seeded):
    def unscaled(q, k, v, o, lse, do):
        dq, dk, dv = solution["attention_backward_recompute"](q, k, v, o, lse, do)
        return dq * math.sqrt(q.shape[-1]), dk, dv

    for check in both("attention_backward_recompute"):
        failure = failure_of(check, unscaled)
        assert failure.cls == "scale" and "√d" in failure.sentence


@pytest.mark.parametrize("wrong, cls, words", [
    (lambda o, lse, q, k: (o, lse[..., None]), "shape", "size-1 axis"),  # keepdim left on
    (lambda o, lse, q, k: o, "shape", "must return 2"),  # o alone
])
def test_named_bugs_of_the_forward(wrong, cls, words, solution):
    def fn(q, k, v):
        o, lse = solution["attention_forward_lse"](q, k, v)
        return wrong(o, lse, q, k)

    small = visible._blockwise_cases(3)[:3]
    failure = failure_of(lambda f: visible.check_forward_lse(f, small), fn)
    assert failure.cls == cls and words in str(failure), str(failure)


def test_the_row_max_alone_is_named(solution):
    def row_max(q, k, v):
        o, _ = solution["attention_forward_lse"](q, k, v)
        return o, (q @ k.mT / math.sqrt(q.shape[-1])).amax(dim=-1)

    failure = failure_of(lambda f: visible.check_forward_lse(f, visible._blockwise_cases(3)[:3]), row_max)
    assert failure.cls == "wrong-values" and "row max m alone" in failure.sentence


# ---------------------------------------------------------------------------
# Properties: what must be caught, and what must pass


BLOCKWISE_CASES = visible._blockwise_cases(9)  # ends with the T = 256 case


def test_a_query_strip_over_all_keys_is_allowed(solution):
    """(B, 64, T) strips are O(T) for a fixed block: only T² is refused."""
    def strip_forward(q, k, v):
        B, T, d = q.shape
        o, lse = torch.empty_like(q), q.new_empty(B, T)
        for i in range(0, T, 64):
            S = q[:, i:i + 64] @ k.mT / math.sqrt(d)  # (B, 64, T)
            lse[:, i:i + 64] = torch.logsumexp(S, dim=-1)
            o[:, i:i + 64] = torch.exp(S - lse[:, i:i + 64, None]) @ v
        return o, lse

    visible.check_forward_lse(strip_forward, BLOCKWISE_CASES)


def test_one_T_by_T_matrix_per_batch_entry_is_caught(solution):
    def per_entry(q, k, v, o, lse, do):
        out = [solution["attention_backward_recompute"](*(t[b:b + 1] for t in (q, k, v, o, lse, do)))
               for b in range(q.shape[0])]
        _ = [torch.exp(q[b] @ k[b].T) for b in range(q.shape[0])]  # a (T, T) temporary per entry
        return tuple(torch.cat(parts) for parts in zip(*out))

    failure = failure_of(lambda f: visible.check_backward_recompute(f, [visible.backward_case(c) for c in BLOCKWISE_CASES]),
                         per_entry)
    assert failure.cls == "saved-quadratic-tensor" and "256×256" in str(failure)


RECOMPUTE_TEMPLATE = '''
class RecomputeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        FORWARD_EXTRA
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        BACKWARD_EXTRA
        return attention_backward_recompute(q, k, v, o, lse, do)
'''


@pytest.mark.parametrize("forward_extra, backward_extra, words", [
    ("ctx.P = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]) - lse[..., None])", "pass", "ctx.P"),  # kept on ctx
    ("pass", "S = q @ k.mT", "while RecomputeAttention.backward ran"),  # a T×T temporary in the backward
])
def test_the_recompute_function_class_is_watched_on_ctx_and_in_its_backward(forward_extra, backward_extra, words, seeded):
    code = RECOMPUTE_TEMPLATE.replace("FORWARD_EXTRA", forward_extra).replace("BACKWARD_EXTRA", backward_extra)
    ns = variant({"RecomputeAttention": code})
    for check in both("RecomputeAttention"):
        failure = failure_of(check, ns["RecomputeAttention"])
        assert failure.cls == "saved-quadratic-tensor" and words in str(failure), str(failure)
    for check in both("recompute_attention"):
        assert failure_of(check, ns["recompute_attention"]).cls == "saved-quadratic-tensor"


def test_the_manual_class_may_save_p():
    """Saving P is what Part A asks for: the T×T checks watch the recompute pair only."""
    gen = torch.Generator().manual_seed(0)
    visible.check_function_class("ManualAttention", solutions(SLUG)["ManualAttention"],
                                 [visible.attention_case(gen, 1, 300, 4)])


# ---------------------------------------------------------------------------
# The D kernel


DELTA_TEMPLATE = '''
import triton
import triton.language as tl


@triton.jit
def attention_delta_kernel(O_ptr, DO_ptr, Delta_ptr, o_row_stride, do_row_stride, n_rows, head_dim,
                           BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = ROWS
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols[None, :] < head_dim)
    o = tl.load(O_ptr + rows[:, None] * o_row_stride + cols[None, :], mask=mask, other=0.0)
    do = tl.load(DO_ptr + rows[:, None] * do_row_stride + cols[None, :], mask=mask, other=0.0)
    tl.store(Delta_ptr + rows, SUM, mask=row_ok)
'''


@pytest.mark.parametrize("rows, total, cls, words", [
    ("tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "tl.sum(o * do, axis=1)", "pass", ""),
    ("tl.arange(0, BLOCK_M)", "tl.sum(o * do, axis=1)", "wrong-values", "first block"),  # every program on block 0
    ("tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "tl.sum(o, axis=1)", "wrong-values", "O alone"),
    ("tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)",
     "wrong-values", "float32 precision"),
    ("tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "-tl.sum(o * do, axis=1)", "sign", ""),
])
def test_named_bugs_of_the_delta_kernel(rows, total, cls, words, seeded):
    kernel = variant({"attention_delta_kernel": DELTA_TEMPLATE.replace("ROWS", rows).replace("SUM", total)})[
        "attention_delta_kernel"]
    for check in both("attention_delta_kernel"):
        if cls == "pass":
            check(kernel)
            continue
        failure = failure_of(check, kernel)
        assert failure.cls == cls and words in str(failure), str(failure)


def test_a_plain_function_is_not_a_kernel(capsys):
    for check in both("attention_delta_kernel"):
        failure = failure_of(check, lambda *args: None)
        assert failure.cls == "error" and "@triton.jit" in failure.sentence


# ---------------------------------------------------------------------------
# Trivially wrong answers fail


def zeros_like_grads(q, k, v, o, lse, do):
    return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


@pytest.mark.parametrize("name, wrong, cls", [
    ("attention_backward_recompute", zeros_like_grads, "wrong-values"),
    ("attention_backward_recompute", lambda *args: zeros_like_grads(*args)[:2], "shape"),
    ("attention_forward_lse", lambda q, k, v: (torch.zeros_like(q), q.new_zeros(q.shape[:2])), "wrong-values"),
    ("manual_attention", lambda q, k, v: q, "wrong-values"),
    ("recompute_attention", lambda q, k, v: q * 1.0, "wrong-values"),
    ("ManualAttention", object, "error"),  # not an autograd.Function
])
def test_trivially_wrong_answers_fail(name, wrong, cls, seeded):
    for check in both(name):
        assert failure_of(check, wrong).cls == cls

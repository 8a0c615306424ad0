"""05_attention_recompute: the checks name this lesson's bugs, and can fail.

The solution, the release stubs and each mutant's diagnosis are checked for every lesson
in ``test_samples.py``. Every check is run twice where it matters: the hidden one (``autograder.check``, random
inputs — several seeds here, since grading draws a fresh one each run) and the visible one
(``course.selfcheck``, fixed inputs). A mutant must get the same diagnosis from both. The
property checks (one tile at a time in Parts C and D, nothing T×T saved or allocated in E and F)
get their own tests below: what they must catch, and what they must let through. So do the
FlashAttention kernels' named bugs. Warnings are errors here: a warning in a test cell
writes to stderr, and nbgrader scores such a cell zero.
"""

from __future__ import annotations

import math

import pytest
import torch

import autograder.check.attention as hidden
import course.selfcheck.attention as visible
from autograder.inputs import generator, randn
from course.diagnose import relative_error
from course.registry import hints_of
from tests.notebooks.test_derivation import answer_table, found
from tests.support import (
    assert_crash_quotes_the_line,
    edited_solution,
    failure_of,
    mutant_functions,
    mutant_named,
    solution_cells,
    solution_fixture,
    solutions,
    with_cells,
)
from tools.mutants import mutants

pytestmark = pytest.mark.filterwarnings("error")

SLUG = "05_attention_recompute"
EXERCISES = (
    "ManualAttention", "manual_attention", "attention_forward_lse", "attention_backward_recompute",
    "RecomputeAttention", "recompute_attention", "attention_delta_kernel", "flash_fwd_kernel", "flash_bwd_dkdv_kernel",
)
MUTANTS = mutants(SLUG)
F64 = torch.float64
REQUIRED = {  # the bug classes this lesson is about, per exercise: a mutant shows each one
    "ManualAttention": {"scale", "transpose", "broadcast-axis", "autograd-in-backward"},
    "manual_attention": {"wrong-values"},  # bypasses ManualAttention
    "attention_forward_lse": {"scale", "saved-quadratic-tensor", "untiled"},
    "attention_backward_recompute": {"sign", "wrong-values", "saved-quadratic-tensor", "untiled", "autograd-in-backward"},
    "RecomputeAttention": {"saved-quadratic-tensor", "autograd-in-backward"},
    "recompute_attention": {"saved-quadratic-tensor", "wrong-values"},
    "attention_delta_kernel": {"out-of-bounds"},  # a missing column mask; a store past n_rows; head_dim as stride
    "flash_fwd_kernel": {"scale", "wrong-values"},  # sm_scale forgotten; keys past T scored 0; the rescale skipped
    "flash_bwd_dkdv_kernel": {"scale", "wrong-values", "out-of-bounds"},  # sm_scale; no D; unmasked store, strides
}


solution = solution_fixture(SLUG)


def variant(cells: dict[str, str]) -> dict:
    """The solutions with some cells replaced, as a student's namespace."""
    return with_cells(SLUG, cells)


def both(name: str):
    return [getattr(hidden, name), getattr(visible, name)]


# ---------------------------------------------------------------------------
# The references


def closed_form(q, k, v, do):
    """(o, L, dq, dk, dv) of attention for the upstream gradient do, from the formulas, float64."""
    c = 1 / math.sqrt(q.shape[-1])
    S = c * q @ k.mT  # (B, T, T)
    L = torch.logsumexp(S, dim=-1)  # (B, T)
    P = torch.exp(S - L[..., None])
    o = P @ v
    D = (do * o).sum(dim=-1, keepdim=True)  # = rowsum(dP ⊙ P)
    dS = P * (do @ v.mT - D)
    return o, L, c * dS @ k, c * dS.mT @ q, P.mT @ do


def test_the_reference_agrees_with_the_closed_forms():
    gen = generator("reference-test")
    for B, T, d in [(1, 7, 3), (7, 70, 5), (2, 201, 12)]:
        q, k, v, do = (randn(gen, B, T, d) for _ in range(4))
        closed = closed_form(q, k, v, do)
        for mine, formula in zip(visible.attention_reference(q, k, v, do), closed):
            assert relative_error(mine, formula) < 1e-13
        o, lse = visible.attention_forward(q, k, v)
        assert relative_error(o, closed[0]) < 1e-13
        assert relative_error(lse, closed[1]) < 1e-14
        D = visible.delta_reference(o.reshape(-1, d), do.reshape(-1, d))
        assert relative_error(D, torch.einsum("re,re->r", o.reshape(-1, d), do.reshape(-1, d))) < 1e-14


# ---------------------------------------------------------------------------
# The mutants (their diagnoses, for every lesson: test_samples.py)


def test_the_mutants_cover_the_bugs_this_lesson_is_about():
    # Each mutant is a full notebook run in `make grade`: keep them few. Two of the nine are the walks that are
    # not tiled (a row, a 16-query strip, D from a pass over P), which no other bug of Parts C and D shares a cell with.
    assert 1 <= len(MUTANTS) <= 9
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
    assert_crash_quotes_the_line(both("attention_backward_recompute"), STUDENT_CELL, "attention_backward_recompute",
                                 "<ipython-input-9>", "line 3: P = torch.exp(q @ k - lse[..., None])")


# ---------------------------------------------------------------------------
# Values: named bugs beyond the mutants


def manual_returning(result: str) -> str:
    """The solution's ManualAttention cell, its backward returning ``result`` instead of ``dq, dk, dv``."""
    return edited_solution(SLUG, "ManualAttention", f"-        return dq, dk, dv\n+        return {result}",
                           "ManualAttention.backward")


@pytest.mark.parametrize("result, cls, words", [
    ("dk, dq, dv", "wrong-values", "holds the gradient of k"),  # returned in the wrong order
    ("dq, dk, P @ do", "transpose", "dv matches P Ō"),  # P where Pᵀ belongs
    ("dq, -dk, dv", "sign", "negative"),
    ("dq * c, dk, dv", "scale", "twice"),
    ("dq.mT, dk, dv", "transpose", "transpose"),  # a shape autograd refuses: diagnosed, not a crash
    ("dq, dk", "shape", "must return 3 gradients"),  # one gradient short
])
def test_named_bugs_of_the_manual_backward(result, cls, words, seeded):
    ns = variant({"ManualAttention": manual_returning(result)})
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

    small = visible._cases(3, visible.BLOCKWISE)[:3]
    failure = failure_of(lambda f: visible.check_forward_lse(f, small), fn)
    assert failure.cls == cls and words in str(failure), str(failure)


def test_the_row_max_alone_is_named(solution):
    def row_max(q, k, v):
        o, _ = solution["attention_forward_lse"](q, k, v)
        return o, (q @ k.mT / math.sqrt(q.shape[-1])).amax(dim=-1)

    failure = failure_of(lambda f: visible.check_forward_lse(f, visible._cases(3, visible.BLOCKWISE)[:3]), row_max)
    assert failure.cls == "wrong-values" and "row max m alone" in failure.sentence


# ---------------------------------------------------------------------------
# Properties: what must be caught, and what must pass


BLOCKWISE_CASES = visible._cases(9, visible.BLOCKWISE)  # ends with the T = 256 case


def strip_forward(q, k, v):
    """Right values from a (B, 64, T) strip of scores per query block: O(T) memory, but not a tile."""
    B, T, d = q.shape
    o, lse = torch.empty_like(q), q.new_empty(B, T)
    for i in range(0, T, 64):
        S = q[:, i:i + 64] @ k.mT / math.sqrt(d)  # (B, 64, T)
        lse[:, i:i + 64] = torch.logsumexp(S, dim=-1)
        o[:, i:i + 64] = torch.exp(S - lse[:, i:i + 64, None]) @ v
    return o, lse


def test_a_query_strip_over_all_keys_is_refused_with_its_shape():
    """A (B, 64, T) strip is 4 tiles at T = 256: the check names it, and why."""
    failure = failure_of(lambda f: visible.check_forward_lse(f, BLOCKWISE_CASES), strip_forward)
    assert failure.cls == "saved-quadratic-tensor"
    assert "2×64×256" in failure.sentence and "strip" in failure.sentence and "4 times" in failure.sentence


def test_the_tile_is_the_notebooks_own_and_capped_at_64(solution):
    """The check reads BLOCK_Q and BLOCK_K where the function was defined; a block above 64 counts as 64."""
    for blocks, verdict in [((32, 16), "pass"), ((64, 64), "pass"), ((64, 256), "saved-quadratic-tensor")]:
        ns = variant({"attention_forward_lse": solution_cells(SLUG)["attention_forward_lse"]
                      .replace("BLOCK_Q = 64", f"BLOCK_Q = {blocks[0]}").replace("BLOCK_K = 64", f"BLOCK_K = {blocks[1]}")})
        fn = ns["attention_forward_lse"]
        assert (ns["BLOCK_Q"], ns["BLOCK_K"]) == blocks
        for check in (lambda f: visible.check_forward_lse(f, BLOCKWISE_CASES),
                      lambda f: visible.check_backward_recompute(ns["attention_backward_recompute"],
                                                                 [visible.backward_case(c) for c in BLOCKWISE_CASES])):
            if verdict == "pass":
                check(fn)
            else:
                failure = failure_of(check, fn)
                assert failure.cls == verdict and "BLOCK_K = 256, counted as 64" in str(failure), str(failure)


def test_one_T_by_T_matrix_per_batch_entry_is_caught(solution):
    def per_entry(q, k, v, o, lse, do):
        out = [solution["attention_backward_recompute"](*(t[b:b + 1] for t in (q, k, v, o, lse, do)))
               for b in range(q.shape[0])]
        _ = [torch.exp(q[b] @ k[b].T) for b in range(q.shape[0])]  # a (T, T) temporary per entry
        return tuple(torch.cat(parts) for parts in zip(*out))

    failure = failure_of(lambda f: visible.check_backward_recompute(f, [visible.backward_case(c) for c in BLOCKWISE_CASES]),
                         per_entry)
    assert failure.cls == "saved-quadratic-tensor" and "256×256" in str(failure)


# Walks that are not tiled: right values, O(T) memory, under the element bound — refused by what they allocate


def row_forward(q, k, v):
    """One query row against every key, its log-sum-exp by the library: (B, 1, T) rows of scores."""
    B, T, d = q.shape
    o, lse = torch.empty_like(q), q.new_empty(B, T)
    for i in range(T):
        S = (q[:, i:i + 1] @ k.mT) / math.sqrt(d)  # (B, 1, T)
        lse[:, i:i + 1] = torch.logsumexp(S, dim=-1)
        o[:, i:i + 1] = torch.exp(S - lse[:, i:i + 1, None]) @ v
    return o, lse


def squeezed_row_forward(q, k, v):
    """The same walk with q scaled first and every row squeezed to (B, T): the shape of lse, told apart by the
    rows each tensor came from."""
    B, T, d = q.shape
    q = q / math.sqrt(d)  # a new (B, T, d) tensor: its rows must still be followed through the slices below
    o, lse = torch.empty_like(q), q.new_empty(B, T)
    for i in range(T):
        s = torch.einsum("bd,btd->bt", q[:, i], k)  # (B, T)
        lse[:, i] = torch.logsumexp(s, dim=-1)
        o[:, i] = torch.einsum("bt,btd->bd", torch.softmax(s, dim=-1), v)
    return o, lse


def strip16_forward(q, k, v):
    """(B, 16, T) strips: 2·16·256 = 8,192 elements, exactly one 2×64×64 tile at T = 256."""
    o, lse = torch.empty_like(q), q.new_empty(q.shape[:2])
    for q_strip, o_strip, lse_strip in zip(q.split(16, 1), o.split(16, 1), lse.split(16, 1)):  # views: written in place
        S = q_strip @ k.mT / math.sqrt(q.shape[-1])
        lse_strip.copy_(torch.logsumexp(S, dim=-1))
        o_strip.copy_(torch.exp(S - lse_strip[..., None]) @ v)
    return o, lse


def key_strip_backward(q, k, v, o, lse, do):
    """Keys outside, and every query at once inside: (B, T, 16) strips of P along the query axis."""
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    D = (do * o).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    for j in range(0, T, 16):
        kj, vj = k[:, j:j + 16], v[:, j:j + 16]
        P = torch.exp(c * (q @ kj.mT) - lse[..., None])  # (B, T, 16)
        dS = P * (do @ vj.mT - D[..., None])
        dv[:, j:j + 16] = P.mT @ do
        dq += c * (dS @ kj)
        dk[:, j:j + 16] = c * (dS.mT @ q)
    return dq, dk, dv


def test_walks_that_are_not_tiled_are_refused_with_the_shape_and_the_axis(solution):
    """A row, a squeezed row and a 16-query strip of scores against every key: each under the element bound,
    each named with its shape, the axis that runs along the keys, and the block it exceeds."""
    for fn, shape in [(row_forward, "2×1×256"), (squeezed_row_forward, "2×1×256"), (strip16_forward, "2×16×256")]:
        failure = failure_of(lambda f: visible.check_forward_lse(f, BLOCKWISE_CASES), fn)
        assert failure.cls == "untiled", str(failure)
        assert shape in failure.sentence and "axis 2 holds 256" in failure.sentence, failure.sentence
        assert "runs along the keys" in failure.sentence and "BLOCK_K = 64" in failure.sentence
    failure = failure_of(lambda f: visible.check_backward_recompute(f, [visible.backward_case(c) for c in BLOCKWISE_CASES]),
                         key_strip_backward)
    assert failure.cls == "untiled" and "2×256×16" in failure.sentence and "axis 1 holds 256" in failure.sentence
    assert "runs along the queries" in failure.sentence and "BLOCK_Q = 64" in failure.sentence, failure.sentence


@pytest.mark.parametrize("mutant", ["rows", "strip16"])
def test_the_untiled_mutants_fail_the_hidden_checks_too(mutant, seeded):
    """At the hidden T (drawn in [200, 256), several blocks long) each shortcut is refused as it is visibly."""
    functions = mutant_named(SLUG, mutant)
    for name in ("attention_forward_lse", "attention_backward_recompute"):
        assert failure_of(getattr(hidden, name), functions[name]).cls == "untiled"


def test_a_tiled_walk_in_any_order_passes(solution):
    """Keys outside in the forward too (FlashAttention-1's order), with per-query running values for all rows in
    (B, T) buffers updated block by block, and lse assembled from blocks by torch.cat: every tensor from queries
    and keys is at most a tile, and the (B, T) ones come from T query rows."""
    def keys_outside(q, k, v):
        B, T, d = q.shape
        c = 1 / math.sqrt(d)
        m, ell, acc = q.new_full((B, T), -math.inf), q.new_zeros(B, T), torch.zeros_like(q)
        for j in range(0, T, 64):
            for i in range(0, T, 64):
                S = c * (q[:, i:i + 64] @ k[:, j:j + 64].mT)
                m_new = torch.maximum(m[:, i:i + 64], S.amax(dim=-1))
                p = torch.exp(S - m_new[..., None])
                alpha = torch.exp(m[:, i:i + 64] - m_new)
                ell[:, i:i + 64] = alpha * ell[:, i:i + 64] + p.sum(dim=-1)
                acc[:, i:i + 64] = alpha[..., None] * acc[:, i:i + 64] + p @ v[:, j:j + 64]
                m[:, i:i + 64] = m_new
        lse = torch.cat([m[:, i:i + 64] + torch.log(ell[:, i:i + 64]) for i in range(0, T, 64)], dim=1)
        return acc / ell[..., None], lse

    for check in both("attention_forward_lse"):
        check(keys_outside)


def test_d_taken_from_a_pass_over_the_tiles_is_refused(solution):
    """Every tile in bounds, but D summed from P̄ ⊙ P in a first pass: the result does not move with o."""
    functions = mutant_named(SLUG, "strip16")
    for check in both("attention_backward_recompute"):
        failure = failure_of(check, functions["attention_backward_recompute"])
        assert failure.cls == "untiled" and "handed another o" in failure.sentence
        assert failure.hint == 1  # the hint about the row scalar without a row of P


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
    visible.MANUAL.check(solutions(SLUG)["ManualAttention"], [visible.attention_case(gen, 1, 300, 4)])


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
    # Every program on block 0: the programs' stores meet there (on a GPU, where nothing is recorded: "first block").
    ("tl.arange(0, BLOCK_M)", "tl.sum(o * do, axis=1)", "race", "program (0, 0, 0) stores to it"),
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


def test_without_the_sanitizer_every_program_on_block_0_is_named_by_its_values(unsanitized, seeded):
    kernel = variant({"attention_delta_kernel": DELTA_TEMPLATE.replace("ROWS", "tl.arange(0, BLOCK_M)").replace(
        "SUM", "tl.sum(o * do, axis=1)")})["attention_delta_kernel"]
    for check in both("attention_delta_kernel"):
        failure = failure_of(check, kernel)
        assert failure.cls == "wrong-values" and "first block" in str(failure), str(failure)


def test_a_plain_function_is_not_a_kernel(capsys):
    for check in both("attention_delta_kernel"):
        failure = failure_of(check, lambda *args: None)
        assert failure.cls == "error" and "@triton.jit" in failure.sentence


# ---------------------------------------------------------------------------
# FlashAttention's kernels


def test_the_flash_references_agree_with_torch():
    gen = generator("flash-reference-test")
    q, k, v, do = (randn(gen, 3, 37, 5) for _ in range(4))
    case = visible.FlashCase(q, k, v, do, 16, 32)
    for bug in hidden.ONLINE_BUGS:  # each named bug is really a bug, here
        o, _ = hidden.online_softmax_forward(q, k, v, 16, bug)
        assert relative_error(o, visible.attention_reference(q, k, v, do)[0]) > 1e-6, bug
    o, L = hidden.online_softmax_forward(q, k, v, 16, "none")  # and the simulation without one is attention
    assert relative_error(o, closed_form(q, k, v, do)[0]) < 1e-13
    assert relative_error(L, closed_form(q, k, v, do)[1]) < 1e-13
    mine = closed_form(q, k, v, do)
    theirs = visible.attention_reference(q, k, v, do)
    assert all(relative_error(a, b) < 1e-13 for a, b in zip(mine, theirs))
    assert case.block_d == 16


def flash_variant(name: str, old: str, new: str):
    """The solution kernel ``name`` with one line changed."""
    code = solution_cells(SLUG)[name]
    assert code.count(old) == 1, old
    return variant({name: code.replace(old, new)})[name]


FLASH_FWD_BUGS = [  # (old, new, class, words)
    ("* sm_scale  # (BLOCK_M, BLOCK_N): a tile of S", "# (BLOCK_M, BLOCK_N): a tile of S", "scale", "unscaled"),
    ('s = tl.where(keys[None, :] < seq_len, s, -float("inf"))', "pass", "wrong-values", "keys past T"),
    ("alpha = tl.exp(m - m_new)", "alpha = tl.exp(m_new - m_new)", "wrong-values", "never rescaled"),
    ("acc = acc * alpha[:, None] + tl.dot(p, v)", "acc = acc + tl.dot(p, v)", "wrong-values", "not the accumulated"),
    ("alpha = tl.exp(m - m_new)", "alpha = tl.exp(m_new - m)", "non-finite", "NaN"),  # e^(+inf) at the first block
    ("mask=kv_mask, other=0.0)\n        v = ", ")\n        v = ", "non-finite", "reads lanes"),  # K loaded unmasked
    ("acc / ell[:, None], mask=q_mask)", "acc / ell[:, None])", "wrong-values", "writes outside"),
    ("mask=rows < seq_len)", "mask=rows < seq_len + 5)", "wrong-values", "L"),  # L stored past T
    ("m + tl.log(ell)", "tl.log(ell)", "wrong-values", "log ℓ alone"),
    ("keys[:, None] * stride_t + cols[None, :] * stride_e, mask=kv_mask, other=0.0)\n        v",
     "keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)\n        v", "non-finite", "contiguous"),
]


# What course.sanitizer names first on a CPU (class, words), where the lists above give what the checks' own ladder
# says on a GPU (nothing is recorded there): tested below without the sanitizer.
FLASH_FWD_SANITIZED = {
    "unmasked-load": ("out-of-bounds", "flash_fwd_kernel loads"),
    "unmasked-store": ("out-of-bounds", "flash_fwd_kernel stores to"),
    "L-past-T": ("out-of-bounds", "past the last element of L_ptr"),
    "head_dim-stride": ("out-of-bounds", "between the elements"),
}
FLASH_DKDV_SANITIZED = {
    "unmasked-store": ("out-of-bounds", "flash_bwd_dkdv_kernel stores to"),
    "unmasked-Q": ("out-of-bounds", "of Q_ptr"),
    "head_dim-stride": ("out-of-bounds", "of DO_ptr"),
}


# Bugs only the hidden check names: telling them apart takes a simulation of the online softmax (or of
# an unnormalised P), which would spell out the exercise in the package students receive. The visible
# check gives them the same class without the name.
NAMED_BY_THE_HIDDEN_CHECK_ONLY = {"keys past T", "never rescaled", "not the accumulated", "without the rows' L"}


def named(check, kernel, cls: str, words: str) -> None:
    failure = failure_of(check, kernel)
    assert failure.cls == cls, str(failure)
    if check.__module__.startswith("autograder") or words not in NAMED_BY_THE_HIDDEN_CHECK_ONLY:
        assert words in str(failure), str(failure)


FLASH_FWD_IDS = ["no-scale", "keys-past-T-scored-0", "alpha-always-1", "acc-not-rescaled", "alpha-inverted",
                 "unmasked-load", "unmasked-store", "L-past-T", "lse-without-m", "head_dim-stride"]


FLASH_DKDV_BUGS = [
    ("dk * sm_scale, mask=kv_mask)", "dk, mask=kv_mask)", "scale", "√d times too large"),
    ("dv, mask=kv_mask)", "dv)", "wrong-values", "writes outside"),
    ("ds = p * (dp - D[:, None])", "ds = p * dp", "wrong-values", "row scalar"),
    ("ds = p * (dp - D[:, None])", "ds = p * (D[:, None] - dp)", "sign", "sign"),
    ("tl.exp(s - L[:, None])", "tl.exp(s)", "wrong-values", "without the rows' L"),
    ("dv += tl.dot(tl.trans(p), do)", "dv += tl.dot(tl.trans(p), q)", "wrong-values", "dv"),
    ("mask=q_mask, other=0.0)\n        do", ")\n        do", "non-finite", "reads lanes"),  # Q loaded unmasked
    ("mask=q_mask, other=0.0)\n        do = tl.load(DO_ptr + base + rows[:, None] * stride_t + cols[None, :] * stride_e",
     "mask=q_mask, other=0.0)\n        do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols[None, :]",
     "non-finite", "contiguous"),
]


FLASH_DKDV_IDS = ["no-scale", "unmasked-store", "no-D", "sign", "no-L", "dv-from-q", "unmasked-Q", "head_dim-stride"]


FLASH = {  # kernel: (its edits, their ids, what the sanitizer names first, the one seed: interpreted kernels are slow)
    "flash_fwd_kernel": (FLASH_FWD_BUGS, FLASH_FWD_IDS, FLASH_FWD_SANITIZED, "4"),
    "flash_bwd_dkdv_kernel": (FLASH_DKDV_BUGS, FLASH_DKDV_IDS, FLASH_DKDV_SANITIZED, "5"),
}


def flash_bug_named(name: str, bug: str, monkeypatch, sanitized: bool = True) -> None:
    """Both checks name the edit ``bug`` of kernel ``name`` as its list says, or (``sanitized``) as the sanitizer
    says first."""
    bugs, ids, first, seed = FLASH[name]
    old, new, cls, words = bugs[ids.index(bug)]
    monkeypatch.setenv("AUTOGRADER_SEED", seed)
    kernel = flash_variant(name, old, new)
    for check in both(name):
        named(check, kernel, *(first.get(bug, (cls, words)) if sanitized else (cls, words)))


@pytest.mark.parametrize("name, bug", [(n, b) for n, (_, ids, _, _) in FLASH.items() for b in ids])
def test_named_bugs_of_the_flash_kernels(name, bug, monkeypatch):
    flash_bug_named(name, bug, monkeypatch)


@pytest.mark.parametrize("name, bug", [(n, b) for n, (_, _, first, _) in FLASH.items() for b in first])
def test_without_the_sanitizer_the_flash_ladder_names_the_mask_bugs(name, bug, unsanitized, monkeypatch):
    flash_bug_named(name, bug, monkeypatch, sanitized=False)


@pytest.mark.parametrize("name", ["flash_fwd_kernel", "flash_bwd_dkdv_kernel"])
def test_a_plain_function_is_not_a_flash_kernel(name):
    for check in both(name):
        failure = failure_of(check, lambda *args: None)
        assert failure.cls == "error" and "@triton.jit" in failure.sentence


def test_the_gradcheck_catches_what_the_values_let_through(monkeypatch):
    """A forward kernel right on the value cases but wrong elsewhere is caught by the gradcheck case."""
    kernel = flash_variant("flash_fwd_kernel", "acc / ell[:, None], mask=q_mask)",
                           "acc / ell[:, None] * tl.where(seq_len == 19, 1.01, 1.0), mask=q_mask)")
    failure = failure_of(visible.flash_fwd_kernel, kernel)  # T = 19 only in the visible gradcheck case
    assert failure.cls == "wrong-values" and "gradcheck" in failure.sentence


# ---------------------------------------------------------------------------
# Diagnoses: a pointer to a hint, never the fix


def test_every_class_the_mutants_get_points_to_a_hint():
    for m in MUTANTS:
        for test, cls in m.expect.items():
            table = hints_of(test.removeprefix("test_"))
            assert cls in table or "*" in table, (m.name, test, cls)


FORBIDDEN_IN_MESSAGES = [  # the fixes and formulas the hints give, which a failure must not
    "keepdim=True", "[..., None]", "mask=rows < n_rows", "cols < head_dim", "other=0.0", "rowsum(Ō ⊙ O)",
    "= c·S̄", "S̄ = P ⊙", "Pᵀ Ō", "exp(m − m", "-float('inf')", '-float("inf")', "tl.where", ".apply(q, k, v)",
]


def test_no_failure_message_gives_the_fix(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SEED", "6")
    messages = []
    for m in MUTANTS:
        functions = mutant_functions(m)
        for test in m.expect:
            name = test.removeprefix("test_")
            for check in both(name):
                messages.append(str(failure_of(check, functions[name])))
    for old, new, _, _ in FLASH_FWD_BUGS:
        messages += [str(failure_of(check, flash_variant("flash_fwd_kernel", old, new)))
                     for check in both("flash_fwd_kernel")]
    forms = [f for entry in answer_table(SLUG).values() for f in entry.get("forms", [])]
    assert len(forms) > 20
    for text in messages:
        for fix in FORBIDDEN_IN_MESSAGES:
            assert fix not in text, f"{fix!r} in:\n{text}"
        assert not found(forms, text), f"an answer form in:\n{text}"


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

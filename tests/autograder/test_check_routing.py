"""06_topk_routing: the checks name this lesson's bugs, and can fail.

The solution, the release stubs and each mutant's diagnosis are checked for every lesson
in ``test_samples.py``. Every check is run twice where it matters: the hidden one (``autograder.check``, random
inputs — several seeds here, since grading draws a fresh one each run) and the visible
one (``course.selfcheck``, fixed inputs). A mutant must get the same diagnosis from both.
The heart of this lesson is ``non-atomic-scatter``: a store where an add is needed is right
without repeated indices and wrong with them, so the tests below also prove that the
inputs really contain both, and that the class needs both to be given.
Warnings are errors in this module: a warning in a test cell writes to stderr, and
nbgrader scores such a cell zero.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import autograder.check as hidden
import course.selfcheck as visible
from autograder.check import routing as hidden_routing
from autograder.inputs import generator
from course.diagnose import GradingFailure, relative_error
from course.selfcheck import routing as visible_routing
from tests.support import assert_crash_quotes_the_line, assert_mutants_cover, diagnosis, mutant_named, solution_fixture
from tools.mutants import mutants

pytestmark = pytest.mark.filterwarnings("error")

ASSIGNMENT = "06_topk_routing"
EXERCISES = ("topk_backward", "embedding_backward", "relu_backward", "maxpool1d_backward", "dropout_backward",
             "moe_gate_backward", "scatter_add_kernel")
SCATTERS = ("topk_backward", "embedding_backward", "maxpool1d_backward")
MUTANTS = mutants(ASSIGNMENT)
F64 = torch.float64
solution = solution_fixture(ASSIGNMENT)


def mutant(name: str) -> dict:
    return mutant_named(ASSIGNMENT, name)


# ---------------------------------------------------------------------------
# The mutants (their diagnoses, for every lesson: test_samples.py)


def test_mutants_cover_the_bugs_this_lesson_is_about():
    declared = assert_mutants_cover(MUTANTS, {
        ("topk_backward", "non-atomic-scatter"),  # scatter_ for scatter_add_
        ("embedding_backward", "non-atomic-scatter"),  # dW[ids] = dy
        ("maxpool1d_backward", "non-atomic-scatter"),  # overlapping windows, stored
        ("scatter_add_kernel", "race"),  # tl.store; a read-add-store; one behind an atomic that never runs
        ("embedding_backward", "batch-reduction"),  # the first sequence only
        ("dropout_backward", "scale"),  # 1/(1 − p) forgotten
        ("relu_backward", "wrong-values"),  # relu(ȳ); x >= 0, wrong on an in-place ReLU's output
        ("maxpool1d_backward", "wrong-values"),  # the in-window position; windows kernel_size apart
        ("moe_gate_backward", "sign"),
        ("moe_gate_backward", "wrong-values"),  # the softmax backward skipped
    }, most=7)
    assert {name for name, _ in declared} == set(EXERCISES), "every exercise has a mutant"


def test_the_store_names_its_writer_and_the_kernel_race_names_both_programs(seeded):
    store = mutant("store_instead_of_add")
    for name in ("topk_backward", "embedding_backward", "maxpool1d_backward"):
        with pytest.raises(GradingFailure, match="the last writer won"):
            getattr(hidden, name)(store[name])
    for bug, second in (("store_instead_of_add", "stores to it"), ("read_add_store_kernel", "loads it"),
                        ("atomic_only_in_a_dead_branch", "loads it")):
        for check in (hidden.scatter_add_kernel, visible.scatter_add_kernel):
            with pytest.raises(GradingFailure, match=rf"races on OUT_ptr\[\d+, \d+\]: program \(\d+, 0, 0\) stores to it "
                               rf"\(line \d+ of scatter_add_kernel[^)]*\) and program \(\d+, 0, 0\) {second}") as info:
                check(mutant(bug)["scatter_add_kernel"])
            assert info.value.cls == "race"


def test_without_the_sanitizer_a_kernel_store_is_named_by_its_values(unsanitized, seeded):
    """On a GPU nothing is recorded: a tl.store where rows share a destination keeps one of them, which the values
    show (a read-add-store there may happen to give the right sums, and cannot be told by its values)."""
    with pytest.raises(GradingFailure, match="the last writer won") as info:
        hidden.scatter_add_kernel(mutant("store_instead_of_add")["scatter_add_kernel"])
    assert info.value.cls == "non-atomic-scatter"


# ---------------------------------------------------------------------------
# non-atomic-scatter needs inputs without repeats, and inputs with them


def _cases(name: str) -> list:
    gen = generator(f"cases-{name}")
    return {
        "topk_backward": hidden_routing._topk_cases,
        "embedding_backward": hidden_routing._embedding_cases,
        "maxpool1d_backward": hidden_routing._maxpool_cases,
    }[name](gen)


def _contributions(name: str, case) -> torch.Tensor:
    """How many contributions each output entry receives (1-D over the destinations)."""
    if name == "topk_backward":
        _, indices, n = case.args
        return F.one_hot(indices, n).sum(dim=-2).reshape(-1)
    if name == "embedding_backward":
        _, ids, num = case.args
        return torch.bincount(ids.reshape(-1), minlength=num)
    dy, x, K, s = case.args
    return F.one_hot(visible_routing.maxpool_positions(x, K, s), x.shape[-1]).sum(dim=-2).reshape(-1)


@pytest.mark.parametrize("name", SCATTERS)
def test_hidden_inputs_have_cases_without_repeats_first_then_repeats_at_the_last_slot(name, seeded):
    cases = _cases(name)
    flags = [c.repeats for c in cases]
    assert flags == sorted(flags) and not flags[0] and flags[-1], "no-repeat cases first, then repeats"
    assert {c.batch for c in cases} >= {1, 7}
    assert any(len(c.args[1].shape) >= 3 for c in cases), "a 3-D case"
    for case in cases:
        counts = _contributions(name, case)
        assert bool((counts >= 2).any()) == case.repeats, case.label
    for case in (c for c in cases if c.repeats):  # the last slot, repeated, where an off-by-one hides
        if name == "topk_backward":
            assert bool((case.args[1] == case.args[2] - 1).sum(dim=-1).ge(2).all())
        elif name == "embedding_backward":
            assert int((case.args[1] == case.args[2] - 1).sum()) >= 2
        else:  # max-pool: the last position is the last window's max, a position is two windows' max
            positions = visible_routing.maxpool_positions(case.args[1], *case.args[2:])
            assert bool((positions[..., -1] == case.args[1].shape[-1] - 1).all())


@pytest.mark.parametrize("name", SCATTERS)
def test_a_store_is_invisible_without_repeats_and_caught_with_them(name, seeded):
    """Without the repeated cases the store mutant passes: that is why the checks need both."""
    cases = _cases(name)
    fn = mutant("store_instead_of_add")[name]
    runner = visible_routing.EXERCISES[name].check
    runner(fn, [c for c in cases if not c.repeats])  # passes
    with pytest.raises(GradingFailure) as info:
        runner(fn, cases)
    assert info.value.cls == "non-atomic-scatter"


def test_an_add_that_is_not_a_sum_is_non_atomic_scatter_too(seeded):
    """Neither the last nor the first writer, but wrong only where contributions collide: their mean."""
    def mean(dy, indices, n):
        return dy.new_zeros(*dy.shape[:-1], n).scatter_reduce_(-1, indices, dy, reduce="mean", include_self=False)

    for check in (hidden.topk_backward, visible.topk_backward):
        with pytest.raises(GradingFailure, match="wrong only where several land") as info:
            check(mean)
        assert info.value.cls == "non-atomic-scatter"


def test_a_bug_outside_the_collisions_is_not_called_non_atomic(solution, seeded):
    """Right without repeats, but wrong also where one contribution lands: not a scatter bug."""
    def off_when_repeated(dy, indices, n):
        dx = solution["topk_backward"](dy, indices, n)
        repeated = bool((F.one_hot(indices, n).sum(dim=-2) >= 2).any())
        return dx + 1.0 if repeated else dx

    assert diagnosis(hidden.topk_backward, off_when_repeated) == "wrong-values"


# ---------------------------------------------------------------------------
# References and inputs


# Closed forms in float64, independent of autograd: the one reference each check uses must agree with them.


def _gather_closed_form(dy, indices, n):
    """x̄_j = Σ_m ȳ_m [i_m = j]: the one-hot (…, k, n) weighted by ȳ and summed over m."""
    return (F.one_hot(indices, n).to(dy.dtype) * dy[..., :, None]).sum(dim=-2)


def _embedding_closed_form(dy, ids, num_embeddings):
    """W̄ = onehot(ids)ᵀ ȳ over every lookup: (num_embeddings, R) @ (R, D)."""
    D = dy.shape[-1]
    return F.one_hot(ids.reshape(-1), num_embeddings).to(dy.dtype).T @ dy.reshape(-1, D)


def _maxpool_closed_form(dy, x, kernel_size, stride):
    """ȳ gathered back to a_j = j·s + argmax of window j, window by window."""
    L_out = (x.shape[-1] - kernel_size) // stride + 1
    windows = [x[..., j * stride: j * stride + kernel_size].argmax(dim=-1) + j * stride for j in range(L_out)]
    a = torch.stack(windows, dim=-1)  # (..., L_out)
    return _gather_closed_form(dy, a, x.shape[-1])


def _moe_closed_form(dy, logits, indices, expert_out):
    """z̄ = p ⊙ p̄ − p ⟨p, p̄⟩ with p̄ the scattered ḡ_m = ⟨ȳ, h_m⟩, and h̄_m = g_m ȳ."""
    p = torch.softmax(logits, dim=-1)  # (..., E)
    onehot = F.one_hot(indices, logits.shape[-1]).to(p.dtype)  # (..., k, E)
    g = (onehot * p[..., None, :]).sum(dim=-1)  # (..., k)
    dg = torch.einsum("...md,...d->...m", expert_out, dy)  # (..., k)
    dp = (onehot * dg[..., :, None]).sum(dim=-2)  # (..., E)
    return p * dp - p * (p * dp).sum(dim=-1, keepdim=True), g[..., :, None] * dy[..., None, :]


def test_the_references_agree_with_closed_forms(seeded):
    for name, closed, auto in (
        ("topk_backward", _gather_closed_form, visible_routing.gather_reference),
        ("embedding_backward", _embedding_closed_form, visible_routing.embedding_reference),
        ("maxpool1d_backward", _maxpool_closed_form, visible_routing.maxpool_reference),
    ):
        for case in _cases(name):
            assert relative_error(closed(*case.args), auto(*case.args)) < 1e-14, case.label
    gen = generator("references")
    for lead, E, k, D in (((1,), 7, 2, 5), ((7,), 4, 4, 2), ((2, 5), 9, 2, 6)):
        case = visible_routing.moe_case("moe", gen, lead, E, k, D)
        for mine, auto in zip(_moe_closed_form(*case.args), visible_routing.moe_reference(*case.args)):
            assert relative_error(mine, auto) < 1e-12
    x = torch.randn(7, 5, generator=gen, dtype=F64)
    dy = torch.randn(7, 5, generator=gen, dtype=F64)
    mask = visible_routing.keep_mask(gen, 0.3, 7, 5)
    assert relative_error(torch.where(x > 0, dy, torch.zeros_like(dy)), visible_routing.relu_reference(dy, x)) == 0.0
    dropout = torch.where(mask, dy / (1 - 0.3), torch.zeros_like(dy))
    assert relative_error(dropout, visible_routing.dropout_reference(dy, mask, 0.3)) < 1e-15
    src, index = torch.randn(9, 4, generator=gen, dtype=F64), torch.randint(0, 3, (9,), generator=gen)
    index_add = F.one_hot(index, 3).to(F64).T @ src
    assert relative_error(index_add, visible_routing.index_add_reference(src, index, 3)) < 1e-15


@pytest.mark.parametrize("draw", range(5))
def test_a_fresh_dropout_mask_is_wrong_values(draw, seeded):
    """Drawing a new mask in the backward is a different function, whatever the draw."""
    gen = torch.Generator().manual_seed(draw)

    def fresh_mask(dy, mask, p):
        return dy * (torch.rand(dy.shape, generator=gen) >= p) / (1 - p)

    assert diagnosis(hidden.dropout_backward, fresh_mask) == "wrong-values"
    assert diagnosis(visible.dropout_backward, fresh_mask) == "wrong-values"


def test_relu_inputs_avoid_the_kink_and_the_output_tells_the_comparisons_apart(seeded):
    """Inputs x never sit at 0, so x > 0 and x >= 0 agree there; the in-place cases hand over y = relu(x), whose
    dropped entries are exactly 0: there only the strict comparison is right, and the other is named."""
    for cases in (hidden_routing._relu_cases(generator("relu")), visible_routing.relu_cases(
            torch.Generator().manual_seed(1), (("b", (3, 4)),), ("t", (3, 4)), 0.1, (("b", (3, 4)),))):
        on_x = [c for c in cases if "handed in" not in c.label]
        on_y = [c for c in cases if "handed in" in c.label]
        assert on_x and on_y
        assert all(bool((c.args[1] != 0).all()) for c in on_x)
        assert all(bool((c.args[1] == 0).any()) and bool((c.args[1] >= 0).all()) for c in on_y)
        visible_routing.EXERCISES["relu_backward"].check(lambda dy, x: dy * (x >= 0), on_x)  # passes on x
    for check in (hidden.relu_backward, visible.relu_backward):
        check(lambda dy, x: torch.where(x > 0, dy, torch.zeros_like(dy)))
        with pytest.raises(GradingFailure, match="in-place ReLU") as info:
            check(lambda dy, x: dy * (x >= 0))
        assert info.value.cls == "wrong-values"


def test_maxpool_windows_placed_kernel_size_apart_are_named(seeded):
    """Right while stride = kernel_size; at a stride that leaves gaps the windows' maxima land elsewhere."""
    def wrong(dy, x, kernel_size, stride):
        windows = x.unfold(-1, kernel_size, stride)
        a = windows.argmax(dim=-1) + kernel_size * torch.arange(dy.shape[-1])
        return torch.zeros_like(x).scatter_add_(-1, a, dy)

    for check in (hidden.maxpool1d_backward, visible.maxpool1d_backward):
        with pytest.raises(GradingFailure, match="j·stride") as info:
            check(wrong)
        assert info.value.cls == "wrong-values"


# ---------------------------------------------------------------------------
# Other named bugs


@pytest.mark.parametrize("name, wrong, cls", [
    ("topk_backward", lambda dy, indices, n: dy.new_zeros(*dy.shape[:-1], n), "wrong-values"),
    ("topk_backward", lambda dy, indices, n: dy.clone(), "shape"),  # ȳ's shape instead of x's
    ("embedding_backward", lambda dy, ids, num: dy.new_zeros(num, dy.shape[-1]), "wrong-values"),
    ("relu_backward", lambda dy, x: torch.zeros_like(dy), "wrong-values"),
    ("relu_backward", lambda dy, x: -dy * (x > 0), "sign"),
    ("maxpool1d_backward", lambda dy, x, k, s: torch.zeros_like(x), "wrong-values"),
    ("dropout_backward", lambda dy, mask, p: dy * mask / p, "scale"),  # right only at p = 0.5
    ("dropout_backward", lambda dy, mask, p: dy * mask * (1 - p), "scale"),
    ("dropout_backward", lambda dy, mask, p: dy / (1 - p), "wrong-values"),  # mask not applied
    ("moe_gate_backward", lambda dy, z, i, h: (torch.zeros_like(z), torch.zeros_like(h)), "wrong-values"),
    ("moe_gate_backward", lambda dy, z, i, h: torch.zeros_like(z), "shape"),  # one gradient instead of two
])
def test_trivially_wrong_answers_fail(name, wrong, cls, seeded):
    assert diagnosis(getattr(hidden, name), wrong) == cls
    assert diagnosis(getattr(visible, name), wrong) == cls


@pytest.mark.parametrize("bug, match", [
    (lambda dy, x: torch.relu(dy), "relu\\(ȳ\\)"),
    (lambda dy, x: dy * torch.relu(x), "forward's output"),
    (lambda dy, x: dy * (x < 0), "inverted"),
])
def test_relu_bugs_are_named(bug, match, seeded):
    for check in (hidden.relu_backward, visible.relu_backward):
        with pytest.raises(GradingFailure, match=match):
            check(bug)


def test_average_pool_backward_is_named(seeded):
    """ȳ spread over each window (average pooling's backward), precomputed: autograd is refused inside the call."""
    cases = _cases("maxpool1d_backward")
    spread = {}
    for case in cases:
        dy, x, K, s = case.args
        leaf = torch.zeros_like(x, requires_grad=True)
        y = F.avg_pool1d(leaf.reshape(-1, 1, x.shape[-1]), K, s).reshape(dy.shape)
        spread[(tuple(x.shape), K, s)] = torch.autograd.grad(y, leaf, dy)[0]

    def average(dy, x, kernel_size, stride):
        return spread[(tuple(x.shape), kernel_size, stride)]

    with pytest.raises(GradingFailure, match="average pooling") as info:
        visible_routing.EXERCISES["maxpool1d_backward"].check(average, cases)
    assert info.value.cls == "wrong-values"


@pytest.mark.parametrize("bug, match", [
    ("dlogits_p_dp", "−s term"),
    ("dlogits_chosen_only", "not chosen"),
    ("renormalised", "renormalised"),
    ("dexpert_no_gate", "multiplied by its gate"),
])
def test_moe_bugs_are_named_by_the_hidden_check(bug, match, solution, seeded):
    right = solution["moe_gate_backward"]

    def wrong(dy, logits, indices, expert_out):
        dlogits, dexpert = right(dy, logits, indices, expert_out)
        p = torch.softmax(logits, dim=-1)
        dg = (expert_out * dy[..., None, :]).sum(dim=-1)
        dp = torch.zeros_like(p).scatter_add_(-1, indices, dg)
        chosen = torch.zeros_like(p).scatter_(-1, indices, 1.0)
        if bug == "dlogits_p_dp":
            return p * dp, dexpert
        if bug == "dlogits_chosen_only":
            return dlogits * chosen, dexpert
        if bug == "renormalised":
            q = torch.softmax(logits.masked_fill(chosen == 0, float("-inf")), dim=-1)
            return q * (dp - (q * dp).sum(dim=-1, keepdim=True)), dexpert
        return dlogits, dy[..., None, :].expand_as(expert_out)

    with pytest.raises(GradingFailure, match=match) as info:
        hidden.moe_gate_backward(wrong)
    assert info.value.cls == "wrong-values"
    assert diagnosis(visible.moe_gate_backward, wrong) == "wrong-values"


def test_autograd_inside_the_backward_is_refused():
    def with_autograd(dy, logits, indices, expert_out):  # plain torch: a course helper would be delegation
        logits, expert_out = logits.clone().requires_grad_(True), expert_out.clone().requires_grad_(True)
        gates = torch.softmax(logits, dim=-1).gather(-1, indices)
        y = (gates[..., :, None] * expert_out).sum(dim=-2)
        return torch.autograd.grad(y, (logits, expert_out), dy)

    assert diagnosis(hidden.moe_gate_backward, with_autograd) == "autograd-in-backward"
    assert diagnosis(visible.moe_gate_backward, with_autograd) == "autograd-in-backward"


# ---------------------------------------------------------------------------
# The kernel


@triton.jit
def _unmasked_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    dest = tl.load(INDEX_ptr + i)
    row = tl.load(SRC_ptr + i * src_row_stride + cols)  # no mask: reads the NaN padding
    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row)  # and adds it past the row


@triton.jit
def _source_row_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)
    tl.atomic_add(OUT_ptr + i * out_row_stride + cols, row, mask=mask)  # row i, not index[i]


@triton.jit
def _idle_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    pass


@triton.jit
def _spin_lock_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    """A read-add-store made race-free by a lock per destination row, and no tl.atomic_add anywhere."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    dest = tl.load(INDEX_ptr + i)
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)
    # Row dest's lock: the index entry of the first source row that adds into it, ~dest while held (given back).
    owner = i
    for k in range(0, i):
        other = tl.load(INDEX_ptr + k)
        owner = tl.where(((other == dest) | (other == ~dest)) & (k < owner), k, owner)
    while tl.atomic_cas(INDEX_ptr + owner, dest, ~dest) != dest:
        pass
    out = tl.load(OUT_ptr + dest * out_row_stride + cols, mask=mask, other=0.0)
    tl.store(OUT_ptr + dest * out_row_stride + cols, out + row, mask=mask)
    tl.atomic_xchg(INDEX_ptr + owner, dest)


@pytest.mark.parametrize("kernel, cls, match", [
    (_unmasked_kernel, "out-of-bounds", r"loads SRC_ptr \+ \d+ in program \(0, 0, 0\) .* past the last element of SRC_ptr"),
    (_source_row_kernel, "wrong-values", r"index\[i\]"),  # row i instead of index[i]
    (_idle_kernel, "wrong-values", "wrong values"),
])
def test_kernel_bugs_fail_both_checks(kernel, cls, match, seeded):
    for check in (hidden.scatter_add_kernel, visible.scatter_add_kernel):
        with pytest.raises(GradingFailure, match=match) as info:
            check(kernel)
        assert info.value.cls == cls


def test_without_the_sanitizer_an_unmasked_kernel_is_named_by_the_sentinels(unsanitized, seeded):
    for check in (hidden.scatter_add_kernel, visible.scatter_add_kernel):
        with pytest.raises(GradingFailure, match="writes outside") as info:
            check(_unmasked_kernel)
        assert info.value.cls == "wrong-values"


def test_a_kernel_judged_by_its_accesses_passes_with_a_spin_lock_and_no_atomic_add(seeded, capsys):
    hidden.scatter_add_kernel(_spin_lock_kernel)
    visible.scatter_add_kernel(_spin_lock_kernel)
    assert capsys.readouterr().out.startswith("✓ scatter_add_kernel passes the visible checks")


def test_a_plain_function_is_not_a_kernel(solution):
    assert diagnosis(visible.scatter_add_kernel, solution["scatter_add_kernel"].fn) == "error"
    assert diagnosis(hidden.scatter_add_kernel, None) == "error"


# ---------------------------------------------------------------------------
# Student exceptions


STUDENT_CELL = '''\
def embedding_backward(dy, ids, num_embeddings):
    dW = dy.new_zeros(num_embeddings, dy.shape[-1])
    dW.index_add_(0, ids, dy)
    return dW
'''


def test_an_exception_is_error_and_names_the_students_line():
    assert_crash_quotes_the_line((hidden.embedding_backward, visible.embedding_backward), STUDENT_CELL,
                                 "embedding_backward", "<ipython-input-6>", "line 3: dW.index_add_(0, ids, dy)")


# ---------------------------------------------------------------------------
# A transposed (non-contiguous) input in every check


def test_a_view_that_assumes_contiguous_ids_fails_on_the_transposed_case(seeded):
    def with_view(dy, ids, num_embeddings):
        D = dy.shape[-1]
        return dy.new_zeros(num_embeddings, D).index_add_(0, ids.view(-1), dy.view(-1, D))

    for check in (hidden.embedding_backward, visible.embedding_backward):
        with pytest.raises(GradingFailure, match="transposed") as info:
            check(with_view)
        assert info.value.cls == "error"
        assert "ids.view(-1)" in str(info.value), "the student's own line is shown"


def test_a_wrong_answer_only_for_a_transposed_input_is_named_a_layout_bug(solution, seeded):
    right = solution["topk_backward"]

    def layout_bound(dy, indices, n):
        dx = right(dy, indices, n)
        return dx if dy.is_contiguous() else dx + 1.0

    for check in (hidden.topk_backward, visible.topk_backward):
        with pytest.raises(GradingFailure, match="laid out in memory") as info:
            check(layout_bound)
        assert info.value.cls == "wrong-values"

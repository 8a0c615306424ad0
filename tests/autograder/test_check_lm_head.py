"""The checks of 07_fused_linear_cross_entropy: a right answer passes, and each bug of the issue gets its class.

The right implementations and the bugs are written here, independently of the notebook's solutions and of
``kernels`` (the checks' references are torch's own autograd); the notebook's own mutants are in
tests/submissions/07_fused_linear_cross_entropy/. Each runs through the hidden check
(``autograder.check.lm_head``, fresh inputs — several seeds here, since grading draws a fresh one each run) and
the visible one (``course.selfcheck.lm_head``, fixed inputs); both must give the same verdict. Beside the values,
the walked functions are graded on what they allocate: a T×V tensor is ``materialized-logits`` even when every
value is right. Warnings are errors here: a warning in a test cell writes to stderr, and nbgrader scores such a
cell zero.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

import course
from autograder.check import lm_head as hidden
from course.diagnose import CLASSES, GradingFailure
from course.memory import Allocation
from course.selfcheck import ce_grad
from course.selfcheck import lm_head as visible
from tests.support import diagnosis, failure_of

pytestmark = pytest.mark.filterwarnings("error")

IGNORE = -100
EXERCISES = ("linear_ce_backward", "chunked_linear_ce", "vocab_blocked_lse")


def both(name: str):
    return [getattr(hidden, name), getattr(visible, name)]


# ---------------------------------------------------------------------------
# Right answers, written from the derivation: z = h Wᵀ, z̄ = (softmax(z) − onehot(target)) / n on counted rows


def _pieces(h, W, target):
    """(per-token loss on counted rows, the logits' gradient before the 1/n, counted as 0/1) for one chunk."""
    z = h @ W.T  # (T, V)
    lse = torch.logsumexp(z, dim=-1)  # (T,)
    counted = (target != IGNORE).to(z.dtype)  # (T,)
    safe = target.clamp(min=0)  # an ignored row reads class 0, then is zeroed
    losses = (lse - z.gather(1, safe[:, None])[:, 0]) * counted
    dz = torch.exp(z - lse[:, None])
    dz[torch.arange(len(target)), safe] -= 1.0
    return losses, dz * counted[:, None], counted


def dense(h, W, target):
    losses, dz, counted = _pieces(h, W, target)
    n = counted.sum()
    return losses.sum() / n, dz @ W / n, dz.T @ h / n


def chunked(h, W, target, chunk):
    n = (target != IGNORE).sum().to(h.dtype)
    loss = h.new_zeros(())
    dh = torch.empty_like(h)  # (T, d)
    dW = torch.zeros_like(W)  # (V, d)
    for s in range(0, h.shape[0], chunk):
        hc = h[s:s + chunk]
        losses, dz, _ = _pieces(hc, W, target[s:s + chunk])  # (chunk, V): the only V-wide tensors
        loss = loss + losses.sum() / n
        dh[s:s + chunk] = dz @ W / n
        dW += dz.T @ hc / n
    return loss, dh, dW


def blocked(h, W, block):
    T, V = h.shape[0], W.shape[0]
    m = h.new_full((T,), float("-inf"))  # running max
    s = h.new_zeros(T)  # running sum of exp(z − m)
    for j in range(0, V, block):
        z = h @ W[j:j + block].T  # (T, block)
        new = torch.maximum(m, z.amax(-1))
        s = s * torch.exp(m - new) + torch.exp(z - new[:, None]).sum(-1)
        m = new
    return m + torch.log(s)


RIGHT = {"linear_ce_backward": dense, "chunked_linear_ce": chunked, "vocab_blocked_lse": blocked}


@pytest.mark.parametrize("name", EXERCISES)
def test_a_right_answer_passes_both_checks(name, seeded, capsys):
    for check in both(name):
        check(RIGHT[name])
    assert capsys.readouterr().out.startswith(f"✓ {name} passes the visible checks")  # the hidden one is silent


def test_the_visible_checks_are_fast():
    for name in EXERCISES:
        start = time.perf_counter()
        getattr(visible, name)(RIGHT[name])
        assert time.perf_counter() - start < 2.0, name


def test_the_cases_are_what_the_contract_asks(seeded):
    """float64, batch 1 first then batch 7, non-powers of two, ignored rows, a transposed view, a square W."""
    head, lse = (lambda gen, name=name, shapes=shapes: visible.EXERCISES[name].cases(gen, shapes)
                 for name, shapes in (("linear_ce_backward", hidden.HEAD_SHAPES), ("vocab_blocked_lse", hidden.LSE_SHAPES)))
    for name, make in (("linear_ce_backward", head), ("chunked_linear_ce", hidden._chunk_cases),
                       ("vocab_blocked_lse", lse)):

        cases = make(torch.Generator().manual_seed(seeded))
        h0 = cases[0].args[0]
        assert cases[0].batch == 1 and 7 in {c.batch for c in cases}
        assert all(c.args[0].dtype == torch.float64 for c in cases)
        assert any(not c.args[0].is_contiguous() and not c.args[1].is_contiguous() for c in cases), name
        assert h0.shape[0] == 1
        for case in cases:
            h, W = case.args[:2]
            T, d, V = h.shape[0], h.shape[1], W.shape[0]
            assert all(s & (s - 1) for s in (d, V)) and (T == 1 or T & (T - 1)), f"{name}: a power of two"
        if name != "vocab_blocked_lse":
            assert any(W.shape[0] == W.shape[1] for _, W, *_ in (c.args for c in cases)), "a square W"
            assert any((c.args[2] == IGNORE).any() for c in cases), "ignored targets"
            assert all((c.args[2] != IGNORE).any() for c in cases), "never every target ignored"
        if name != "linear_ce_backward":
            sizes = [(c.args[0].shape[0] if name == "chunked_linear_ce" else c.args[1].shape[0], c.args[-1])
                     for c in cases]
            assert any(n % k for n, k in sizes) and any(k == 1 or k >= n for n, k in sizes)
            big = sizes[-1]
            assert big[0] >= visible.MEMORY_RATIO * big[1], "the last case is large enough for the memory rule"


# ---------------------------------------------------------------------------
# The bugs, each with its class


def sum_not_mean(h, W, target):
    loss, dh, dW = dense(h, W, target)
    n = (target != IGNORE).sum()
    return loss * n, dh * n, dW * n  # bug: the 1/n forgotten


def mean_over_every_row(h, W, target):
    losses, dz, _ = _pieces(h, W, target)
    T = h.shape[0]  # bug: the ignored rows counted in the mean
    return losses.sum() / T, dz @ W / T, dz.T @ h / T


def chunked_mean_over_every_row(h, W, target, chunk):
    loss, dh, dW = chunked(h, W, target, chunk)
    c = (target != IGNORE).sum() / h.shape[0]  # bug: divides by T, not by the counted tokens
    return loss * c, dh * c, dW * c


def dW_not_accumulated(h, W, target, chunk):
    n = (target != IGNORE).sum().to(h.dtype)
    loss, dh = h.new_zeros(()), torch.empty_like(h)
    for s in range(0, h.shape[0], chunk):
        losses, dz, _ = _pieces(h[s:s + chunk], W, target[s:s + chunk])
        loss = loss + losses.sum() / n
        dh[s:s + chunk] = dz @ W / n
        dW = dz.T @ h[s:s + chunk] / n  # bug: each chunk replaces dW
    return loss, dh, dW


def materialized(h, W, target, chunk):
    z = h @ W.T  # bug: the full T×V logits, before the walk
    del z
    return chunked(h, W, target, chunk)


def lse_materialized(h, W, block):
    return torch.logsumexp(h @ W.T, dim=-1)  # bug: the full T×V logits


def two_halves(h, W, target, chunk):
    return chunked(h, W, target, -(-h.shape[0] // 2))  # bug: `chunk` ignored, two (T/2)×V pieces of logits


def lse_two_halves(h, W, block):
    return blocked(h, W, -(-W.shape[0] // 2))  # bug: `block` ignored, two T×(V/2) pieces of logits


def logaddexp_walk(h, W, block):
    lse = h.new_full((h.shape[0],), float("-inf"))
    for j in range(0, W.shape[0], block):
        lse = torch.logaddexp(lse, (h @ W[j:j + block].T).logsumexp(-1))  # bug: torch combines the blocks
    return lse


def blockwise_logsumexp(h, W, block):
    """The running max and rescaled sum written out, but each block's own sum taken by torch.logsumexp."""
    m = h.new_full((h.shape[0],), float("-inf"))
    s = h.new_zeros(h.shape[0])
    for j in range(0, W.shape[0], block):
        lb = torch.logsumexp(h @ W[j:j + block].T, -1)  # bug: a library log-sum-exp inside the walk
        new = torch.maximum(m, lb)
        s = s * torch.exp(m - new) + torch.exp(lb - new)
        m = new
    return m + torch.log(s)


def softmax_walk(h, W, block):
    """Each block's sum from its softmax's normaliser: lse_b = z_b[0] − log softmax(z_b)[0]."""
    lse = h.new_full((h.shape[0],), float("-inf"))
    for j in range(0, W.shape[0], block):
        z = h @ W[j:j + block].T
        lb = z[:, 0] - torch.log_softmax(z, -1)[:, 0]  # bug: a library softmax inside the walk
        top = torch.maximum(lse, lb)
        lse = top + torch.log(torch.exp(lse - top) + torch.exp(lb - top))
    return lse


def transposed_dW(h, W, target):
    loss, dh, dW = dense(h, W, target)
    return loss, dh, dW.T.contiguous()  # bug: hᵀ z̄ in place of z̄ᵀ h


def chunked_transposed_dW(h, W, target, chunk):
    loss, dh, dW = chunked(h, W, target, chunk)
    return loss, dh, dW.T.contiguous()


def negated(h, W, target):
    loss, dh, dW = dense(h, W, target)
    return loss, -dh, -dW


def uses_autograd(h, W, target, *chunk):
    h = h.detach().requires_grad_(True)
    W = W.detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(h @ W.T, target, ignore_index=IGNORE)
    dh, dW = torch.autograd.grad(loss, (h, W))
    return loss.detach(), dh, dW


def todo(*args):
    raise course.todo()


def ignored_as_class_0(h, W, target):
    n = (target != IGNORE).sum()
    losses, dz, _ = _pieces(h, W, target.clamp(min=0))  # bug: an ignored token becomes a token of class 0
    return losses.sum() / n, dz @ W / n, dz.T @ h / n


def ignored_rows_get_a_gradient(h, W, target):
    losses, _, counted = _pieces(h, W, target)
    n = counted.sum()
    dz = torch.softmax(h @ W.T, -1)
    dz[torch.arange(len(target)), target.clamp(min=0)] -= counted  # bug: the softmax of ignored rows kept
    return losses.sum() / n, dz @ W / n, dz.T @ h / n


def mean_per_chunk(h, W, target, chunk):
    loss, dh, dW = h.new_zeros(()), torch.empty_like(h), torch.zeros_like(W)
    for s in range(0, h.shape[0], chunk):
        losses, dz, counted = _pieces(h[s:s + chunk], W, target[s:s + chunk])
        m = counted.sum()  # bug: each chunk's own count
        loss = loss + losses.sum() / m
        dh[s:s + chunk] = dz @ W / m
        dW += dz.T @ h[s:s + chunk] / m
    return loss, dh, dW


def dh_through_W_the_wrong_way(h, W, target):
    loss, dh, dW = dense(h, W, target)
    if W.shape[0] != W.shape[1]:
        return loss, dh, dW
    _, dz, counted = _pieces(h, W, target)
    return loss, dz @ W.T / counted.sum(), dW  # bug: Wᵀ where W belongs, which only fits when V = d


def unstable_lse(h, W, block):
    return torch.log(torch.exp(h @ W[:block].T).sum(-1) + sum(
        torch.exp(h @ W[j:j + block].T).sum(-1) for j in range(block, W.shape[0], block)))


@pytest.mark.parametrize(("name", "fn", "cls"), [
    ("linear_ce_backward", sum_not_mean, "scale"),  # missing 1/T
    ("chunked_linear_ce", lambda h, W, t, c: sum_not_mean(h, W, t), "scale"),
    ("linear_ce_backward", mean_over_every_row, "scale"),  # the mean over the wrong count, with ignored rows
    ("chunked_linear_ce", chunked_mean_over_every_row, "scale"),
    ("chunked_linear_ce", dW_not_accumulated, "batch-reduction"),  # dW not accumulated across chunks
    ("chunked_linear_ce", materialized, "materialized-logits"),  # the logits, materialized
    ("vocab_blocked_lse", lse_materialized, "materialized-logits"),
    ("chunked_linear_ce", two_halves, "materialized-logits"),  # `chunk` ignored: half the logits at once
    ("vocab_blocked_lse", lse_two_halves, "materialized-logits"),
    ("vocab_blocked_lse", logaddexp_walk, "delegated-to-library"),  # torch.logaddexp and Tensor.logsumexp
    ("vocab_blocked_lse", blockwise_logsumexp, "delegated-to-library"),  # torch.logsumexp per block
    ("vocab_blocked_lse", softmax_walk, "delegated-to-library"),  # torch.log_softmax per block
    ("linear_ce_backward", transposed_dW, "transpose"),  # a transposed W̄
    ("chunked_linear_ce", chunked_transposed_dW, "transpose"),
    ("linear_ce_backward", negated, "sign"),
    ("linear_ce_backward", dh_through_W_the_wrong_way, "transpose"),  # the square case names it
    ("linear_ce_backward", ignored_as_class_0, "wrong-values"),
    ("linear_ce_backward", ignored_rows_get_a_gradient, "wrong-values"),
    ("chunked_linear_ce", mean_per_chunk, "wrong-values"),
    ("vocab_blocked_lse", unstable_lse, "non-finite"),  # exp without the running max overflows at ±1000
    ("linear_ce_backward", uses_autograd, "autograd-in-backward"),
    ("chunked_linear_ce", uses_autograd, "autograd-in-backward"),
    ("linear_ce_backward", todo, "not-implemented"),
    ("chunked_linear_ce", todo, "not-implemented"),
    ("vocab_blocked_lse", todo, "not-implemented"),
])
def test_each_bug_gets_its_class_from_both_checks(name, fn, cls, seeded):
    assert cls in CLASSES
    for check in both(name):
        assert diagnosis(check, fn) == cls, check.__module__


def test_named_bugs_are_named_not_generic(seeded):
    for name, fn, words in (("linear_ce_backward", ignored_as_class_0, "as if their target were class 0"),
                            ("linear_ce_backward", ignored_rows_get_a_gradient, "a gradient"),
                            ("chunked_linear_ce", mean_per_chunk, "a mean per chunk"),
                            ("linear_ce_backward", dh_through_W_the_wrong_way, "only fit because V = d")):
        for check in both(name):
            failure = failure_of(check, fn)
            assert not failure.generic and words in failure.sentence, (check.__module__, failure.sentence)


@pytest.mark.parametrize(("name", "helper"), [("linear_ce_backward", "head_reference"),
                                              ("chunked_linear_ce", "head_reference"),
                                              ("vocab_blocked_lse", "lse_reference")])
def test_the_checks_reference_is_no_answer(name, helper, seeded):
    reference = getattr(visible, helper)
    for check in both(name):
        assert diagnosis(check, lambda *args: reference(*args)) == "delegated-to-helper"


def test_the_wrong_count_is_named_as_the_ignored_rows():
    failure = failure_of(visible.linear_ce_backward, mean_over_every_row)
    assert "ignore_index" in failure.sentence and failure.topic == "ignored" and failure.hint == 1


def test_dW_not_accumulated_says_so_and_points_to_the_walk():
    failure = failure_of(visible.chunked_linear_ce, dW_not_accumulated)
    assert failure.sentence.startswith("dW holds the last chunk's contribution alone") and failure.hint == 3


def test_materialized_logits_names_the_tensor_and_passes_its_values(seeded):
    for check in both("chunked_linear_ce"):
        failure = failure_of(check, materialized)
        T, V = (visible.CHUNK_SHAPES[-1].T, visible.CHUNK_SHAPES[-1].V) if check is visible.chunked_linear_ce else (
            hidden.MEMORY_CHUNK.T, hidden.MEMORY_CHUNK.V)
        assert f"a {T}×{V} tensor" in failure.sentence and "right values" in failure.sentence
    failure = failure_of(visible.vocab_blocked_lse, lse_materialized)
    assert f"{visible.LSE_SHAPES[-1].T}×{visible.LSE_SHAPES[-1].V}" in failure.sentence


def test_the_memory_rule_needs_the_large_case():
    """On the small cases alone, forming the logits in full is invisible: one chunk there is as big as all of them."""
    ex = visible.EXERCISES["chunked_linear_ce"]
    cases = ex.cases(torch.Generator().manual_seed(0), visible.CHUNK_SHAPES)
    ex.check(materialized, cases[:-1])
    with pytest.raises(GradingFailure) as info:
        ex.check(materialized, cases)
    assert info.value.cls == "materialized-logits"


def test_an_allocation_measured_in_another_process_is_named_by_its_size():
    """The grader's re-check measures the call in another process, which reports elements, not shapes."""
    ex = visible.EXERCISES["chunked_linear_ce"]
    case = ex.cases(torch.Generator().manual_seed(0), visible.CHUNK_SHAPES[-1:])[0]
    T, V = case.args[0].shape[0], case.args[1].shape[0]
    measured = Allocation("an allocation (measured where the code ran)", (T * V,), T * V, 8 * T * V, None, True)
    with pytest.raises(GradingFailure) as info:
        visible.check_no_logits("chunked_linear_ce", [(case.args, SimpleNamespace(allocations=[measured], touched=[]))], [case])
    assert info.value.cls == "materialized-logits" and f"{T * V:,} elements at once" in info.value.sentence
    d, chunk = case.args[0].shape[1], case.args[3]
    allowed = chunk * V + T * d + V * d  # one chunk's logits, dh, dW
    at_most = Allocation("aten.mm", (allowed,), allowed, 8 * allowed, torch.float64, False)
    visible.check_no_logits("chunked_linear_ce", [(case.args, SimpleNamespace(allocations=[at_most], touched=[]))], [case])
    above = Allocation("aten.mm", (allowed + 1,), allowed + 1, 8 * (allowed + 1), torch.float64, False)
    with pytest.raises(GradingFailure) as info:
        visible.check_no_logits("chunked_linear_ce", [(case.args, SimpleNamespace(allocations=[above], touched=[]))], [case])
    assert info.value.cls == "materialized-logits"


def test_a_walk_that_ignores_its_chunk_is_named_by_its_allocation_and_the_chunk(seeded):
    """Two halves of T pass the values and never make T×V: the diagnosis names the half and the chunk it ignored."""
    for check, shape in ((visible.chunked_linear_ce, visible.CHUNK_SHAPES[-1]),
                         (hidden.chunked_linear_ce, hidden.MEMORY_CHUNK)):
        failure = failure_of(check, two_halves)
        half = -(-shape.T // 2)
        assert failure.cls == "materialized-logits" and "right values" in failure.sentence
        assert f"a {half}×{shape.V} tensor" in failure.sentence and f"chunk = {shape.size}" in failure.sentence
        assert f"one chunk of logits ({shape.size}×{shape.V}" in failure.sentence
    failure = failure_of(visible.vocab_blocked_lse, lse_two_halves)
    shape = visible.LSE_SHAPES[-1]
    assert f"block = {shape.size}" in failure.sentence and f"one block of logits ({shape.T}×{shape.size}" in failure.sentence


def test_the_library_combining_is_named_by_its_op(seeded):
    for fn, op in ((logaddexp_walk, "aten.logaddexp"), (blockwise_logsumexp, "aten.logsumexp"),
                   (softmax_walk, "aten._log_softmax")):
        for check in both("vocab_blocked_lse"):
            failure = failure_of(check, fn)
            assert failure.cls == "delegated-to-library" and op in failure.sentence, (fn.__name__, failure.sentence)
            assert "running max" in failure.sentence and failure.hint is not None


def test_a_library_backward_kernel_is_autograd(seeded):
    def library(h, W, target):
        z = h @ W.T
        logp = torch.log_softmax(z, -1)
        loss = torch.nn.functional.nll_loss(logp, target, ignore_index=IGNORE)
        n = torch.tensor(float((target != IGNORE).sum()), dtype=h.dtype)  # the mean's count, as nll_loss keeps it
        dlogp = torch.ops.aten.nll_loss_backward(torch.ones((), dtype=h.dtype), logp, target, None, 1, IGNORE, n)
        dz = torch.ops.aten._log_softmax_backward_data(dlogp, logp, 1, h.dtype)
        return loss, dz @ W, dz.T @ h

    for check in both("linear_ce_backward"):
        assert diagnosis(check, library) == "autograd-in-backward"


def test_the_hidden_check_names_bugs_the_visible_one_keeps_to_itself(seeded):
    """The online log-sum-exp without its rescaling, and a gradient from the softmax alone: named only hidden."""
    def no_rescale(h, W, block):
        m = h.new_full((h.shape[0],), float("-inf"))
        s = h.new_zeros(h.shape[0])
        for j in range(0, W.shape[0], block):
            z = h @ W[j:j + block].T
            m = torch.maximum(m, z.amax(-1))
            s = s + torch.exp(z - m[:, None]).sum(-1)  # bug: s was measured from the old max
        return m + torch.log(s)

    failure = failure_of(hidden.vocab_blocked_lse, no_rescale)
    assert failure.cls == "wrong-values" and "running sum" in failure.sentence

    def softmax_alone(h, W, target):
        loss, _, _ = dense(h, W, target)
        counted = (target != IGNORE).to(h.dtype)[:, None] / (target != IGNORE).sum()
        p = torch.softmax(h @ W.T, -1) * counted
        return loss, p @ W, p.T @ h

    failure = failure_of(hidden.linear_ce_backward, softmax_alone)
    assert failure.cls == "wrong-values" and "target's own logit" in failure.sentence


# ---------------------------------------------------------------------------
# Part D: ce_grad_kernel, the chunk's gradient written over its logits. The right kernel is written here from the
# derivation; each bug is a one-line edit of it, loaded from its own file (Triton reads a kernel's source).

CE_GRAD_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def ce_grad_kernel(Z_ptr, TARGET_ptr, LOSS_ptr, z_row_stride, V, n, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    z_row = Z_ptr + row * z_row_stride
    cols = tl.arange(0, BLOCK_V)
    dtype = Z_ptr.dtype.element_ty
    y = tl.load(TARGET_ptr + row)
    t = tl.where(y != -100, y, 0)
    scale = tl.where(y != -100, tl.full([], 1.0, dtype) / n, 0.0).to(dtype)
    m = tl.full([], float("-inf"), dtype)
    s = tl.zeros([], dtype)
    for start in range(0, V, BLOCK_V):
        mask = start + cols < V
        z = tl.load(z_row + start + cols, mask=mask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)
    tl.store(LOSS_ptr + row, (lse - tl.load(z_row + t)) * scale)
    for start in range(0, V, BLOCK_V):
        mask = start + cols < V
        p = tl.exp(tl.load(z_row + start + cols, mask=mask, other=0.0) - lse)
        g = (p - tl.where(start + cols == t, 1.0, 0.0)) * scale
        tl.store(z_row + start + cols, g, mask=mask)
'''
RIGHT_SCALE = "scale = tl.where(y != -100, tl.full([], 1.0, dtype) / n, 0.0).to(dtype)"
RIGHT_G = "g = (p - tl.where(start + cols == t, 1.0, 0.0)) * scale"
CE_GRAD_BUGS = {  # name: (the right line, its buggy edit, the class both checks must give)
    "no_1_over_n": (RIGHT_SCALE, "scale = tl.where(y != -100, tl.full([], 1.0, dtype), 0.0).to(dtype)", "scale"),
    "no_onehot": (RIGHT_G, "g = p * scale", "wrong-values"),
    "ignored_rows_not_zeroed": (RIGHT_SCALE, "scale = tl.full([], 1.0, dtype) / n", "wrong-values"),
    "sign": (RIGHT_G, "g = (tl.where(start + cols == t, 1.0, 0.0) - p) * scale", "sign"),
    # out-of-bounds: named by the sanitizer; on a GPU (nothing recorded) the sentinels name it (test below)
    "unmasked_store": ("tl.store(z_row + start + cols, g, mask=mask)", "tl.store(z_row + start + cols, g)",
                       "out-of-bounds"),
    "inv_n_in_float32": (RIGHT_SCALE, "scale = tl.where(y != -100, tl.full([], 1.0, tl.float32) / n, 0.0)",
                         "wrong-values"),
    "stub": ("    row = tl.program_id(0)", "    raise NotImplementedError('course.todo()')\n    row = tl.program_id(0)",
             "not-implemented"),
}


def _kernel(tmp_path, name: str, source: str):
    """The ce_grad_kernel of ``source``, loaded from a file of its own."""
    import importlib.util

    path = tmp_path / f"ce_grad_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"ce_grad_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ce_grad_kernel


def visible_ce_grad(kernel) -> None:
    ce_grad.ce_grad_kernel(kernel)


CE_GRAD_CHECKS = [hidden.ce_grad_kernel, ce_grad.ce_grad_kernel]


def _bug(tmp_path, name: str):
    right, wrong, _ = CE_GRAD_BUGS[name]
    assert CE_GRAD_KERNEL.count(right) == 1, name
    return _kernel(tmp_path, name, CE_GRAD_KERNEL.replace(right, wrong))


def test_a_right_kernel_passes_both_checks(tmp_path, seeded, capsys):
    kernel = _kernel(tmp_path, "right", CE_GRAD_KERNEL)
    for check in CE_GRAD_CHECKS:
        check(kernel)
    assert capsys.readouterr().out.startswith("✓ ce_grad_kernel passes the visible checks")


@pytest.mark.parametrize("name", CE_GRAD_BUGS)
def test_each_kernel_bug_gets_its_class_from_both_checks(tmp_path, name):
    kernel = _bug(tmp_path, name)
    for check in CE_GRAD_CHECKS:
        assert diagnosis(check, kernel) == CE_GRAD_BUGS[name][2], (name, check.__module__)


def test_the_kernel_bugs_are_named_not_generic(tmp_path):
    words = {"no_onehot": "target's own logit", "ignored_rows_not_zeroed": "ignore_index",
             "unmasked_store": "ce_grad_kernel stores to Z_ptr", "inv_n_in_float32": "float32 precision"}
    for name, phrase in words.items():
        failure = failure_of(visible_ce_grad, _bug(tmp_path, name))
        assert phrase in failure.sentence and not failure.generic, (name, failure.sentence)
    assert failure_of(visible_ce_grad, _bug(tmp_path, "ignored_rows_not_zeroed")).hint == 2


def test_without_the_sanitizer_an_unmasked_store_is_named_by_the_sentinels(tmp_path, unsanitized):
    kernel = _bug(tmp_path, "unmasked_store")
    for check in CE_GRAD_CHECKS:
        failure = failure_of(check, kernel)
        assert failure.cls == "wrong-values" and "past the end" in failure.sentence, (check.__module__, str(failure))


def test_the_gradcheck_fails_a_gradient_that_is_not_the_losss_derivative(tmp_path):
    """The gradcheck passes the right kernel and fails one whose gradient (the softmax alone) is not the
    derivative of the loss it writes."""
    tiny = ce_grad.visible_cases()[1]
    right = _kernel(tmp_path, "right_for_gradcheck", CE_GRAD_KERNEL)
    assert ce_grad.gradcheck(right, tiny)
    wrong = _bug(tmp_path, "no_onehot")
    assert not ce_grad.gradcheck(wrong, tiny)


def test_the_kernel_check_is_fast(tmp_path):
    kernel = _kernel(tmp_path, "timed", CE_GRAD_KERNEL)
    visible_ce_grad(kernel)  # warms the interpreter's caches
    start = time.perf_counter()
    visible_ce_grad(kernel)
    assert time.perf_counter() - start < 10.0

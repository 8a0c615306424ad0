"""Visible checks for 07_fused_linear_cross_entropy: the LM head's loss and gradients, dense
(``linear_ce_backward``) and walked by token chunks (``chunked_linear_ce``), and the log-sum-exp of its logits
walked by vocabulary blocks (``vocab_blocked_lse``).

loss = the mean of CE(h Wᵀ, target) over the counted tokens (a target of ignore_index, −100, is left out of the
sum and the count), for h (T, d), W (V, d). References are torch's own; each named bug is autograd of a forward
with that one bug in it, so it names the bug without spelling out the derivation. On a case where T·V is at least
``MEMORY_RATIO`` steps' worth of logits, a walk that allocates more than one step's logits plus the sizes of h and
W is ``materialized-logits``; a library log-sum-exp inside the vocabulary walk is ``delegated-to-library``.

Limitations: h is (T, d), one sequence of tokens; a (B, T, d) batch is flattened by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from .. import witness
from ..diagnose import (
    TRANSPOSED,
    Alternative,
    Case,
    GradingFailure,
    distinct_from,
    randn,
    seeded,
    transposed_view,
    vjp,
)
from ..spec import NO_LIBRARY_BACKWARD, BatchAxis, Exercise, Refuses, among, visible

F64 = torch.float64
IGNORE = -100  # the target of a token that takes no part in the loss (F.cross_entropy's ignore_index)
TOL = 1e-9  # relative error allowed in float64: chunks and blocks only change the order of the sums
SEED = 20240707  # fixed: the visible checks show the same numbers on every run
MEMORY_RATIO = 16  # the memory rule applies where T·V is at least this many chunks' (blocks') worth of logits
HEAD_OUTPUTS = ("loss", "dh", "dW")
HEAD_OF = ("", "h", "W")  # what each output has the shape of ("": the loss is a scalar)


# ---------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Shape:
    """One case's sizes: T tokens, V classes, d features; ``size`` is the chunk (or block) handed in, if any."""

    label: str
    T: int
    V: int
    d: int
    size: int = 0
    ignored: int = 0  # tokens whose target is ignore_index
    transposed: bool = False  # h and W handed in as transposed (non-contiguous) views
    logits: float = 0.0  # > 0: h scaled so that the largest |logit| is this (exp overflows float64 above ~709.8)


def counted(target: torch.Tensor) -> int:
    """How many tokens take part in the mean: those whose target is not ignore_index."""
    return int((target != IGNORE).sum())


def head_case(gen: torch.Generator, shape: Shape, size_name: str = "", with_target: bool = True) -> Case:
    """(h, W, target) for ``shape`` — without the target for the log-sum-exp — then the chunk or block when the
    exercise takes one: logits of order 1 (or stretched to ±shape.logits), the last class among the targets,
    ``shape.ignored`` tokens at random places set to ignore_index (never all of them)."""
    T, V, d = shape.T, shape.V, shape.d
    if not 0 <= shape.ignored < T:
        raise ValueError(f"ignored = {shape.ignored} must leave at least one of T = {T} tokens counted")
    h = randn(gen, T, d)  # (T, d)
    W = randn(gen, V, d) / d ** 0.5  # (V, d): logits h Wᵀ of order 1
    if shape.logits:
        h = h * (shape.logits / (h @ W.T).abs().max())
    target = torch.randint(0, V, (T,), generator=gen)  # (T,) class ids
    target[torch.randint(0, T, (1,), generator=gen)] = V - 1  # the last class, where an off-by-one hides
    target[torch.randperm(T, generator=gen)[: shape.ignored]] = IGNORE
    if shape.transposed:
        h, W = transposed_view(h), transposed_view(W)
    notes = [shape.label, size_name and f"{size_name} = {shape.size}",
             shape.ignored and f"{shape.ignored} of the targets ignore_index (−100)",
             shape.logits and f"logits up to ±{shape.logits:g}", shape.transposed and f"h and W {TRANSPOSED}"]
    tensors = f"h {tuple(h.shape)}, W {tuple(W.shape)}" + (f", target {tuple(target.shape)}" if with_target else "")
    args = (h, W, target) if with_target else (h, W)
    args += (shape.size,) if size_name else ()
    return Case(f"{tensors}; " + ", ".join(filter(None, notes)), args, batch=shape.T)


# ---------------------------------------------------------------------------
# References: torch's own autograd and logsumexp


def _autograd(forward: Callable, h: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(forward(h, W), its gradient for h, for W), by autograd on fresh leaves."""
    leaves = [h.detach().clone().requires_grad_(True), W.detach().clone().requires_grad_(True)]
    with torch.enable_grad():
        loss = forward(*leaves)
        dh, dW = torch.autograd.grad(loss, leaves)
    return loss.detach(), dh, dW


def _ce_sum(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The summed cross-entropy of the counted tokens of h (ignored ones add 0)."""
    return F.cross_entropy(h @ W.T, target, ignore_index=IGNORE, reduction="sum")


def head_reference(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, *size) -> tuple[torch.Tensor, ...]:
    """(loss, dh, dW) by autograd of F.cross_entropy(h @ W.T, target, ignore_index=-100); a chunk changes nothing."""
    return _autograd(lambda h, W: F.cross_entropy(h @ W.T, target, ignore_index=IGNORE), h, W)


def lse_reference(h: torch.Tensor, W: torch.Tensor, block: int) -> torch.Tensor:
    """(T,) the log-sum-exp of each row of the logits h Wᵀ; a block changes nothing."""
    return torch.logsumexp(h @ W.T, dim=-1)


# ---------------------------------------------------------------------------
# The bugs worth naming, each computed on the case


def _named(right: Sequence[torch.Tensor], found: dict[str, list[Alternative]]) -> dict[str, list[Alternative]]:
    """Only the alternatives that differ from the right answer here: the others name no bug on this case."""
    return {out: distinct_from(alts, r) for (out, alts), r in zip(found.items(), right)}


def _add(found: dict[str, list[Alternative]], cls: str, sentence: str, values: Sequence[torch.Tensor],
         outputs: Sequence[str] = HEAD_OUTPUTS, topic: str | None = None) -> None:
    """One named bug for each of ``outputs`` (``values`` in HEAD_OUTPUTS order); ``{out}`` in ``sentence`` names it."""
    for out, value in zip(HEAD_OUTPUTS, values):
        if out in outputs:
            found[out].append(Alternative(cls, sentence.format(out=out), value, topic))


def head_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """The mean's bugs: a sum for the mean, the mean over every token, ignored tokens given a gradient."""
    h, W, target = case.args[:3]
    T, n = len(target), counted(target)
    right = head_reference(h, W, target)
    found: dict[str, list[Alternative]] = {out: [] for out in HEAD_OUTPUTS}
    _add(found, "scale", f"{{out}} is the sum over the tokens, not their mean: it is {n} times the right answer, "
         f"and {n} is how many tokens count here.", [n * r for r in right])
    if n < T:
        ignored = target == IGNORE
        _add(found, "scale", f"{{out}} is {n}/{T} of the right answer: it divides by all T = {T} tokens, but the "
             f"{T - n} whose target is ignore_index (−100) take no part in the mean — not in the sum, and not in "
             f"the count (n = {n} here).", [r * n / T for r in right], topic="ignored")
        as_class_0 = target.masked_fill(ignored, 0)
        _add(found, "wrong-values", "{out} treats the tokens whose target is ignore_index (−100) as if their "
             "target were class 0: those tokens take no part in the loss at all.",
             _autograd(lambda h, W: _ce_sum(h, W, as_class_0) / n, h, W), topic="ignored")
        _add(found, "wrong-values", "{out} gives the tokens whose target is ignore_index (−100) a gradient: their "
             "loss is left out, so nothing flows back from them — their rows of the logits' gradient are zero.",
             _autograd(lambda h, W: (_ce_sum(h, W, target) + torch.logsumexp(h[ignored] @ W.T, -1).sum()) / n,
                       h, W), outputs=("dh", "dW"), topic="ignored")
    V, d = W.shape
    if V == d:  # square: W and Wᵀ have the same shape, and the gradient through the wrong one fits
        dz = vjp(lambda z: F.cross_entropy(z, target, ignore_index=IGNORE), (h @ W.T,), None)[0]  # (T, V)
        _add(found, "transpose", "dh goes back through W the wrong way round, as if the logits were h W rather "
             "than h Wᵀ: with the shapes written down only one placement gives (T, d) — it only fit because V = d.",
             [right[0], vjp(lambda h: h @ W, (h,), dz)[0], right[2]], outputs=("dh",))
    return _named(right, found)


def chunk_starts(T: int, chunk: int) -> list[int]:
    """Where each chunk of ``chunk`` tokens starts; the last one may be shorter."""
    return list(range(0, T, chunk))


def chunk_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """The mean's bugs, then the walk's: one chunk's share kept alone, a mean per chunk."""
    h, W, target, chunk = case.args
    T, n = len(target), counted(target)
    found = head_alternatives(case)
    starts = chunk_starts(T, chunk) if isinstance(chunk, int) and chunk > 0 else []
    if len(starts) < 2:
        return found
    k = len(starts)
    for which, s in (("last", starts[-1]), ("first", starts[0])):
        kept = slice(s, s + chunk)  # the one chunk this bug keeps
        part = _autograd(lambda h, W: _ce_sum(h[kept], W, target[kept]) / n, h, W)
        _add(found, "batch-reduction", f"loss is the {which} chunk's share alone: right while all T tokens fit in "
             f"one chunk, wrong here, where {k} chunks of {chunk} cover T = {T}; every chunk's tokens are part of "
             "the one loss.", part, outputs=("loss",), topic="chunks")
        _add(found, "wrong-values", f"dh holds only the {which} chunk's rows, the others zero: each chunk's "
             "tokens have their own rows of dh, and every chunk must fill its own.", part, outputs=("dh",),
             topic="chunks")
        _add(found, "batch-reduction", f"dW holds the {which} chunk's contribution alone: right while all T tokens "
             f"fit in one chunk, wrong here, where {k} chunks of {chunk} cover T = {T}. Every token of every chunk "
             "contributes to dW, so no chunk's share may be lost.", part,
             outputs=("dW",), topic="chunks")
    pieces = [(slice(s, s + chunk), counted(target[s:s + chunk])) for s in starts]

    def mean_per_chunk(h, W):  # chunks without a counted token have no mean, and are left out
        return sum(_ce_sum(h[rows], W, target[rows]) / m for rows, m in pieces if m)

    per_chunk = _autograd(mean_per_chunk, h, W)
    _add(found, "wrong-values", "{out} adds up a mean per chunk: the loss is one mean over the counted tokens of "
         "all chunks together, so each chunk's share is divided by the same count.", per_chunk, topic="chunks")
    chunks_with_tokens = sum(1 for _, m in pieces if m)
    _add(found, "wrong-values", "{out} averages the chunks' means: chunks hold different numbers of counted tokens "
         "(the last one is shorter), so a mean of means weighs their tokens unequally.",
         [v / chunks_with_tokens for v in per_chunk], topic="chunks")
    return _named(head_reference(h, W, target), found)


def lse_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """Blocks combined the wrong way: one block alone, or the blocks' log-sum-exps added or maxed."""
    h, W, block = case.args
    z = h @ W.T  # (T, V), built here by the checker, never by the student
    right = torch.logsumexp(z, dim=-1)
    alts = [Alternative("wrong-values", "lse is each row's largest logit: the rest of the row's exponentials are "
                        "missing from it.", z.amax(-1))]
    if isinstance(block, int) and 0 < block < z.shape[-1]:
        parts = torch.stack([b.logsumexp(-1) for b in z.split(block, dim=-1)])  # (blocks, T)
        n = parts.shape[0]
        alts += [Alternative("wrong-values", f"lse covers the {which} vocabulary block alone: all {n} blocks' classes "
                             "belong in each row's sum.", parts[i], "blocks") for which, i in (("last", -1), ("first", 0))]
        alts += [
            Alternative("wrong-values", "lse adds the blocks' log-sum-exps: a log of a sum is not the sum of logs, "
                        "so what a block carries to the next has to combine as exponentials do.", parts.sum(0),
                        "blocks"),
            Alternative("wrong-values", "lse is the largest of the blocks' log-sum-exps: every block adds to the sum "
                        "under the log, not only the biggest.", parts.amax(0), "blocks"),
        ]
    return {"lse": distinct_from(alts, right)}


# ---------------------------------------------------------------------------
# What the walked functions must not allocate


def _logits_sized(args: tuple) -> bool:
    """A call with so many logits (T×V) that the operating system's count tells them apart (course.witness)."""
    h, W = (args + (None, None))[:2]
    return (isinstance(h, torch.Tensor) and isinstance(W, torch.Tensor) and h.dim() == 2 and W.dim() == 2
            and witness.large_enough(h.shape[0] * max(W.shape), h.element_size()))


def check_no_logits(name: str, calls: Sequence, cases: Sequence[Case]) -> None:
    """``materialized-logits`` when, where T·V is at least MEMORY_RATIO steps' logits (chunk·V or T·block), a call
    allocated more than one step's logits plus dh (T·d) and dW (V·d): an honest walk's largest tensor is one of
    those, and two halves of T are several times their sum."""
    for (args, rec), case in zip(calls, cases):
        h, W, *_, size = args
        if not isinstance(size, int) or size < 1:
            continue
        T, d, V = h.shape[0], h.shape[1], W.shape[0]  # tokens, features, classes
        chunked = name == "chunked_linear_ce"
        step = size * V if chunked else T * size  # one chunk's (block's) logits
        if T * V < MEMORY_RATIO * step:
            continue
        allowed = step + T * d + V * d
        big = (sorted((a for a in rec.allocations if a.numel > allowed), key=lambda a: -a.numel)  # biggest first
               or witness.touched_over(rec.touched, T * V, h.element_size()))
        if not big:
            continue
        what, unit = ("chunk", f"{size}×{V}") if chunked else ("block", f"{T}×{size}")
        worst = big[0]
        made = (f"a {'×'.join(map(str, worst.shape)) or 'scalar'} tensor ({worst.op})" if worst.dtype is not None  # measured here
                else f"{worst.numel:,} elements at once ({worst.op})")  # measured where the call ran: no shape
        if worst.op == witness.TOUCHED:
            why = (f"a large part of the T×V = {T * V:,} logits, where one {what} of them ({unit} = {step:,}) is what "
                   "the walk may hold at a time: the logits were all in memory together, whether made at once, in "
                   "pieces alive together, or written into a buffer made before the call.")
        elif worst.numel >= T * V:
            why = (f"{worst.numel:,} elements, at least T×V = {T * V:,}, as big as all the logits. Walking by {what} is "
                   f"meant to hold one {what} of them at a time ({unit}): at T = 8192 and V = 128,256 the full logits "
                   "are 1.05 G numbers, 4.2 GB in fp32.")
        else:
            why = (f"{worst.numel:,} elements, {worst.numel / step:.1f} times one {what} of logits ({unit} = {step:,}). "
                   f"The walk may hold one {what} of logits at a time, so that nothing it allocates outgrows that "
                   f"plus the sizes of h and W (T×d + V×d): {allowed:,} elements here. A walk that takes more than "
                   f"`{what}` {'tokens' if chunked else 'classes'} at a time brings the memory back as T grows.")
        raise GradingFailure(
            "materialized-logits",
            f"{name} gives the right values, but at T = {T} tokens, V = {V} classes and {what} = {size} it allocated "
            f"{made}: {why}",
            f"allocated: {'; '.join(str(a) for a in big[:3])}\ninputs: {case.label}",
        )


# torch's own log-sum-exp, logaddexp and softmax kernels, as the dispatcher names them in the notebook and as the
# profiler names them in the grader's re-check (which also lists the composite op that called the kernel).
LIBRARY_LSE = ("aten.logsumexp", "aten.special_logsumexp", "aten.logaddexp", "aten.logaddexp2", "aten.logcumsumexp",
               "aten.softmax", "aten._softmax", "aten._safe_softmax", "aten.log_softmax", "aten._log_softmax")


# torch's combining does the stabilised combining for the caller (each with its own max): the exercise, here.
NO_LIBRARY_LSE = Refuses(among(*LIBRARY_LSE), "delegated-to-library",
                         "{name} gives the right values, but it ran torch's own {ops}, which does the stabilised "
                         "combining for you. Here that combining is the exercise: carry each row's running max and its "
                         "running sum from block to block yourself, with exp, max and sum, and rescale the sum when the "
                         "max grows.")


# ---------------------------------------------------------------------------
# The exercises: ``size`` names the argument that sets the walk ("chunk", "block", or "" for the dense one). A
# failure no bug explains, right for contiguous inputs and wrong for a transposed view, is the layout; right for
# one token and wrong for the first case of several, the tokens (once a case of several passed, the sum over them
# is there: say no more); vocab_blocked_lse's rows stand alone.


TOKENS = "every token must contribute — to the loss, to the count and to dW — not only the first one."
_HEAD = dict(reference=head_reference, outputs=HEAD_OUTPUTS, of=HEAD_OF, tol=TOL, counted=_logits_sized,
             refine=BatchAxis(TOKENS, layout=True, until_contiguous=True))
EXERCISES = {ex.name: ex for ex in (
    Exercise(name="linear_ce_backward", draw=head_case, alternatives=head_alternatives,
             properties=(NO_LIBRARY_BACKWARD,), **_HEAD),
    Exercise(name="chunked_linear_ce", draw=partial(head_case, size_name="chunk"), alternatives=chunk_alternatives,
             properties=(NO_LIBRARY_BACKWARD, check_no_logits), **_HEAD),
    Exercise(name="vocab_blocked_lse", draw=partial(head_case, size_name="block", with_target=False),
             reference=lse_reference, outputs=("lse",), of=("h without its last axis",), tol=TOL,
             alternatives=lse_alternatives, properties=(check_no_logits, NO_LIBRARY_LSE), counted=_logits_sized,
             refine=BatchAxis("", layout=True)),
)}


# ---------------------------------------------------------------------------
# The visible shapes: batch 1 first, the transposed case after the contiguous ones, the memory case last


HEAD_SHAPES = [
    Shape("batch 1", T=1, V=5, d=3),  # one token: a missing 1/n cannot show yet
    Shape("batch 7", T=7, V=11, d=5),  # the mean over 7 tokens, and dW summed over them
    Shape("batch 7, V = d", T=7, V=6, d=6),  # square W: a transposed dW keeps its shape
    Shape("batch 7", T=7, V=9, d=5, ignored=2),  # the mean over the 5 counted tokens
    Shape("batch 6", T=6, V=7, d=5, ignored=1, transposed=True),
    Shape("batch 5", T=5, V=9, d=3, logits=1000.0),  # exp of the raw logits overflows
]
CHUNK_SHAPES = [
    Shape("batch 1", T=1, V=5, d=3, size=2),  # one token, a chunk longer than the sequence
    Shape("batch 7", T=7, V=10, d=3, size=3),  # chunks of 3, 3 and 1: the last one shorter
    Shape("batch 7, V = d", T=7, V=5, d=5, size=2),  # square W: a transposed dW keeps its shape
    Shape("batch 7", T=7, V=9, d=3, size=4, ignored=3),  # chunks count different numbers of tokens
    Shape("batch 9", T=9, V=7, d=5, size=4, ignored=1, transposed=True),
    Shape("batch 6", T=6, V=7, d=3, size=4, logits=1000.0),  # exp of the raw logits overflows
    # 400 tokens = 16.7 chunks of 24: the memory rule. The largest tensor allowed is one chunk's logits plus h's
    # and W's sizes, 6,168 + 4,400 + 2,827 = 13,395 elements; a walk in two halves of T makes 51,400 (3.8 times),
    # and the full logits 102,800. 13,395 float64 numbers (107 KB) also stand clear of what Python itself allocates
    # during a call, which the grader's re-check counts too (course.witness).
    Shape("long sequence", T=400, V=257, d=11, size=24, ignored=5),
]
LSE_SHAPES = [
    Shape("batch 1", T=1, V=7, d=3, size=3),  # blocks of 3, 3 and 1
    Shape("batch 7", T=7, V=11, d=5, size=4),
    Shape("batch 6", T=6, V=9, d=5, size=2, transposed=True),
    Shape("batch 5", T=5, V=13, d=3, size=4, logits=1000.0),  # a running max that grows from block to block
    # 347 classes = 16.5 blocks of 21: the memory rule. Allowed: 6,321 + 2,709 + 3,123 = 12,153 elements; a walk
    # in two halves of the vocabulary makes 52,374.
    Shape("long vocabulary", T=301, V=347, d=9, size=21),
]


def _visible(name: str, seed: int, shapes: list[Shape], passes: str) -> Callable:
    return visible(EXERCISES[name], lambda: EXERCISES[name].cases(seeded(SEED + seed), shapes), passes)


def _no_logits(shape: Shape) -> str:
    return f", and no T×V tensor at T = {shape.T}, V = {shape.V}"


linear_ce_backward = _visible("linear_ce_backward", 0, HEAD_SHAPES, "batch 1, batch 7, V = d, ignored targets, "
                              "transposed views, logits up to ±1000")
chunked_linear_ce = _visible("chunked_linear_ce", 1, CHUNK_SHAPES, "batch 1, batch 7, chunks that do not divide T, "
                             "ignored targets, transposed views, logits up to ±1000" + _no_logits(CHUNK_SHAPES[-1]))
vocab_blocked_lse = _visible("vocab_blocked_lse", 2, LSE_SHAPES, "batch 1, batch 7, blocks that do not divide V, "
                             "transposed views, logits up to ±1000" + _no_logits(LSE_SHAPES[-1]))

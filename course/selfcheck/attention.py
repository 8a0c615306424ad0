"""Visible checks for 05_attention_recompute: manual attention, the recompute pair, the D kernel and FlashAttention's kernels.

Inputs are float64, batch 1 first, then batch 7, with T never equal to the head dim d (so a transposed T×T product
cannot hide behind matching shapes), T not a multiple of the blocks, and transposed views; the reference is torch's
scaled_dot_product_attention and its autograd. Besides the values: one tile or O(T·d) at a time in Parts C and D,
nothing T×T saved or allocated in E and F. The named bugs live here so that the hidden checks
(``autograder.check.attention``) give the same words; those add the kernels' own loop bugs, whose simulation here
would spell out the loops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .. import witness
from ..diagnose import Case, as_outputs, call_student, diagnose, randn, run_cases, seeded
from ..gradcheck import directional_derivative
from ..kernel_spec import (
    SENTINEL,
    Float32Only,
    FunctionSpec,
    Gradcheck,
    Guarded,
    KernelSpec,
    Launch,
    ReadsPastEnd,
    RightOnFirstRows,
    Wrong,
)
from ..memory import AllocationRecorder, TokenRecorder, tensors_in
from ..spec import Runner, visible
from ..triton_check import launch, namespace_of, pow2_at_least
from ..vocabulary import Alternative, GradingFailure

F32, F64 = torch.float32, torch.float64
SEED = 505
MEMORY_T = 256  # the visible property case: a (B, 64, T) strip is 4 tiles, T² = 65,536 elements
MEMORY_D = 3  # its head dim: small, so that O(T·d) stays below a 16-row strip (3·T·d < 16·T)
PROPERTY_MIN_T = 200  # cases with T at least this get the memory checks (the hidden ones draw T in [200, 256))
MAX_BLOCK = 64  # the largest BLOCK_Q / BLOCK_K the tile bound counts: Part C allows at most 64
TD_TENSORS = 3  # one allocation may hold this many (B, T, d) tensors' elements (a stack of dq, dk, dv)
GRADS = ("dq", "dk", "dv")
OF = ("q", "k", "v")


# ---------------------------------------------------------------------------
# Inputs: a generator and a table of shapes. A size is a number, or a (low, high) range to draw one from.


Size = int | tuple[int, int]


class AttentionShape(NamedTuple):  # q, k, v and ō of shape (B, T, d); transposed: views of (B, d, T) tensors
    B: int
    T: Size
    d: Size
    note: str = ""
    transposed: bool = False


class DeltaShape(NamedTuple):  # O and Ō of shape (n_rows, head_dim), launched in dtype with BLOCK_M rows a program
    n_rows: Size
    head_dim: Size
    dtype: torch.dtype
    block_m: int


class FlashShape(NamedTuple):  # q, k, v and ō of shape (BH, T, d) for a FlashAttention kernel; its blocks and layout
    BH: int
    T: Size
    d: Size
    block_m: int
    block_n: int
    transposed: bool = False


def _size(gen: torch.Generator, n: Size, avoid: tuple[int, ...] = ()) -> int:
    """``n`` itself; from a (low, high) range, a size not a power of two, not a multiple of 64, not in ``avoid``."""
    if isinstance(n, int):
        return n
    while True:
        drawn = int(torch.randint(*n, (1,), generator=gen))
        if drawn & (drawn - 1) and drawn % 64 and drawn not in avoid:
            return drawn


def _sizes(gen: torch.Generator, T: Size, d: Size) -> tuple[int, int]:
    """(T, d), d first: a drawn T is never equal to d, so a transposed T×T product cannot hide behind the shapes."""
    d = _size(gen, d)
    return _size(gen, T, avoid=(d,)), d


def attention_case(gen: torch.Generator, B: int, T: int, d: int, note: str = "", transposed: bool = False) -> Case:
    """q, k, v and an upstream gradient ō, all (B, T, d) float64, as one Case.

    ``transposed``: each is the transpose of a (B, d, T) tensor — the right shape, not contiguous.
    """
    if transposed:
        q, k, v, do = (randn(gen, B, d, T).mT for _ in range(4))
        note = ", ".join(filter(None, [note, "transposed (non-contiguous) inputs"]))
    else:
        q, k, v, do = (randn(gen, B, T, d) for _ in range(4))
    label = f"q, k, v, ō of shape ({B}, {T}, {d}); batch {B}" + (f", {note}" if note else "")
    return Case(label, (q, k, v, do), batch=B)


def attention_cases(gen: torch.Generator, shapes: Sequence[AttentionShape]) -> list[Case]:
    """One Case per shape, in order (batch 1 first)."""
    return [attention_case(gen, s.B, *_sizes(gen, s.T, s.d), s.note, s.transposed) for s in shapes]


def delta_cases(gen: torch.Generator, shapes: Sequence[DeltaShape]) -> list[DeltaCase]:
    """One launch of the D kernel per shape; n_rows is never a multiple of BLOCK_M, so the last block is ragged."""
    cases = []
    for s in shapes:
        n = _size(gen, s.n_rows)
        while n % s.block_m == 0:
            n += 1
        d = _size(gen, s.head_dim)
        cases.append(DeltaCase(randn(gen, n, d), randn(gen, n, d), s.dtype, s.block_m))
    return cases


def flash_cases(gen: torch.Generator, shapes: Sequence[FlashShape]) -> list[FlashCase]:
    """One launch of a FlashAttention kernel per shape; T is never a multiple of either block."""
    cases = []
    for s in shapes:
        T, d = _sizes(gen, s.T, s.d)
        while T % min(s.block_m, s.block_n) == 0:
            T += 1
        cases.append(FlashCase(*(randn(gen, s.BH, T, d) for _ in range(4)), s.block_m, s.block_n, s.transposed))
    return cases


# The visible checks' shapes. Batch 1 first, then batch 7 (prime); T never equal to the head dim d.
SMALL = (  # Parts A and B
    AttentionShape(1, 6, 4),  # batch 1
    AttentionShape(1, 11, 3, transposed=True),  # batch 1, T not a power of two, non-contiguous
    AttentionShape(7, 9, 5),  # batch 7 (prime)
)
BLOCKWISE = (  # Parts C to F: T below a block of 64, past it, and large enough for the memory checks
    AttentionShape(1, 11, 3, "T below one block"),  # batch 1
    AttentionShape(1, 70, 6, "a second, short block of keys and queries", transposed=True),  # T = 64 + 6
    AttentionShape(7, 37, 5),  # batch 7 (prime)
    AttentionShape(2, MEMORY_T, MEMORY_D, "a (B, 64, T) strip would be 4 tiles"),  # the memory checks run here
)
DELTA = (  # n_rows not a multiple of BLOCK_M; head dims not powers of two; float32 and float64
    DeltaShape(13, 5, F32, 16),  # a single, partial block
    DeltaShape(37, 12, F32, 16),  # three blocks, the last one ragged
    DeltaShape(37, 12, F64, 16),  # the same in float64: a float32 accumulator shows
    DeltaShape(91, 20, F64, 32),
)
FLASH = (
    FlashShape(1, 21, 5, 16, 16),  # one slab; T = 16 + 5; d = 5 padded to 16 lanes
    FlashShape(3, 37, 12, 16, 32, transposed=True),  # BLOCK_M ≠ BLOCK_N; token axis stride 1
)
GRADCHECK = AttentionShape(1, 19, 3)  # T = 19 appears in no value case


# ---------------------------------------------------------------------------
# The reference: torch's attention and its autograd, in float64


def attention_forward(q, k, v):
    """(o, L): torch's scaled_dot_product_attention, and the log-sum-exp of each query row's scores q kᵀ/√d, (B, T)."""
    q, k, v = (t.to(F64) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v), torch.logsumexp(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)


def attention_reference(q, k, v, do, dL=None):
    """(o, L, dq, dk, dv): the forward and, by autograd, the gradients of q, k, v for upstream ō (and L̄, if given)."""
    leaves = [t.detach().to(F64).requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        o, L = attention_forward(*leaves)
        outputs, upstream = ((o,), (do,)) if dL is None else ((o, L), (do, dL))
        dq, dk, dv = torch.autograd.grad(outputs, leaves, [g.to(F64) for g in upstream])
    return o.detach(), L.detach(), dq, dk, dv


def delta_reference(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """D = rowsum(Ō ⊙ O), float64."""
    return (o.to(F64) * do.to(F64)).sum(dim=-1)


# ---------------------------------------------------------------------------
# Named bugs: each sentence names the bug and why, never the fixed line.


def softmax_pieces(q, k, v, do):
    """The score scale c, the forward's P, P̄ = Ō Vᵀ and the row sums of P̄ ⊙ P; float64."""
    q, k, v, do = (t.to(F64) for t in (q, k, v, do))
    c = q.shape[-1] ** -0.5  # the score scale 1/√d
    P = torch.softmax(c * torch.einsum("bie,bje->bij", q, k), dim=-1)
    P_bar = torch.einsum("bie,bje->bij", do, v)
    rows = torch.einsum("bij,bij->bi", P_bar, P)
    return c, P, P_bar, rows


def output_alternatives(q, k, v) -> dict[str, list[Alternative]]:
    """Named wrong versions of o and lse."""
    q, k, v = (t.to(F64) for t in (q, k, v))
    c = q.shape[-1] ** -0.5  # the score scale 1/√d
    scores = torch.einsum("bie,bje->bij", q, k)
    m = (c * scores).amax(dim=-1)
    ell = torch.exp(c * scores - m[..., None]).sum(dim=-1)
    o_right = torch.softmax(c * scores, dim=-1) @ v
    return {
        "o": [
            Alternative("scale", "o is attention over unscaled scores: the 1/√d of S is missing, so every softmax "
                        "is sharper than the forward's.", torch.softmax(scores, dim=-1) @ v),
            Alternative("wrong-values", "o is the accumulated Σ exp(S − m)·V never divided by its row sum ℓ: the "
                        "weights of a row do not add up to 1.", o_right * ell[..., None]),
        ],
        "lse": [
            Alternative("scale", "lse is the log-sum-exp of unscaled scores: the 1/√d is missing from the S it sums "
                        "over.", torch.logsumexp(scores, dim=-1)),
            Alternative("wrong-values", "lse is the row max m alone: the row sum ℓ taken under that max never enters "
                        "it.", m),
            Alternative("wrong-values", "lse is log ℓ alone: ℓ was summed relative to the row max m, and that max is "
                        "missing from L.", torch.log(ell)),
        ],
    }


def gradient_alternatives(q, k, v, do) -> dict[str, list[Alternative]]:
    """Named wrong versions of (dq, dk, dv)."""
    dq, dk, dv = attention_reference(q, k, v, do)[2:]
    c, P, P_bar, rows = softmax_pieces(q, k, v, do)
    q, k, do = q.to(F64), k.to(F64), do.to(F64)
    dS = P * (P_bar - rows[..., None])
    no_rowsum = P * P_bar
    wrong_axis = P * (P_bar - rows[..., None, :])
    missing_c = "is √d times too large: the forward scales the scores by 1/√d, and that scale is missing from it."
    twice_c = "carries the 1/√d scale twice: the forward applies it once."
    rowsum = ("is what the softmax step gives without its row scalar: every score of a row moves every probability "
              "of that row through the normalisation, and that coupling is missing.")
    axis = ("subtracts the softmax's row scalar along the wrong axis: it is one number per query row, but it was "
            "broadcast down the columns instead of across its own row.")
    order = "holds the gradient of {other}: the three gradients come back in the wrong order."
    return {
        "dq": [
            Alternative("scale", f"dq {missing_c}", dq / c),
            Alternative("scale", f"dq {twice_c}", dq * c),
            Alternative("transpose", "dq matches a product with S̄ transposed: the rows of S̄ belong to queries and its "
                        "columns to keys, and dq needs one row per query.", c * dS.mT @ k),
            Alternative("wrong-values", f"dq {rowsum}", c * no_rowsum @ k),
            Alternative("broadcast-axis", f"dq {axis}", c * wrong_axis @ k),
            Alternative("wrong-values", order.format(other="k"), dk),
            Alternative("wrong-values", order.format(other="v"), dv),
        ],
        "dk": [
            Alternative("scale", f"dk {missing_c}", dk / c),
            Alternative("scale", f"dk {twice_c}", dk * c),
            Alternative("transpose", "dk matches a product with S̄ untransposed: the roles of queries and keys are "
                        "swapped (the shapes agree only because S̄ is square).", c * dS @ q),
            Alternative("wrong-values", f"dk {rowsum}", c * no_rowsum.mT @ q),
            Alternative("broadcast-axis", f"dk {axis}", c * wrong_axis.mT @ q),
            Alternative("wrong-values", order.format(other="q"), dq),
        ],
        "dv": [
            Alternative("transpose", "dv matches P Ō with P untransposed: the rows of P belong to queries and the rows "
                        "of V to keys.", P @ do),
            Alternative("wrong-values", order.format(other="q"), dq),
        ],
    }


# ---------------------------------------------------------------------------
# Properties: one tile at a time (Parts C and D); nothing T×T saved or allocated (Parts E and F)


def _dims(shape) -> str:
    return "×".join(str(s) for s in shape)


def check_quadratic(name: str, case: Case, packed: Sequence[torch.Tensor], y: torch.Tensor,
                    recorders: Sequence[AllocationRecorder], what: str) -> None:
    """``saved-quadratic-tensor`` when the forward saved, or kept on ctx, a tensor of ≥ T² elements, or when
    anything recorded while ``what`` ran holds that many."""
    T, label, node = case.args[0].shape[-2], case.label, y.grad_fn
    limit = T * T
    found = [f"a saved {_dims(t.shape)} tensor" for t in packed if t.numel() >= limit]
    for key, value in (vars(node).items() if hasattr(node, "__dict__") else []):
        where = key if key == witness.HELD else f"ctx.{key}"  # the memory a forward still held (course.witness)
        found += [f"{where}, {_dims(t.shape)}" for t in tensors_in(value, 3) if t.numel() >= limit]
    if found:
        raise GradingFailure(
            "saved-quadratic-tensor",
            f"{name} gives the right values, but its forward keeps {found[0]} for the backward: at T = {T} that is "
            f"at least T² = {limit:,} elements, held from the forward until the backward runs — the memory this "
            "part exists to remove.",
            f"kept for the backward: {'; '.join(found[:3])}\ninputs: {label}",
        )
    big = [a for rec in recorders for a in rec.allocations if a.numel >= limit]
    if big:
        raise GradingFailure(
            "saved-quadratic-tensor",
            f"{name} gives the right values, but while {what} ran at T = {T} it allocated a tensor of at least "
            f"T² = {limit:,} elements ({big[0]}): a T×T tensor in the backward costs the memory that saving only "
            "L was meant to remove.",
            f"allocated: {'; '.join(str(a) for a in big[:3])}\ninputs: {label}",
        )


def notebook_blocks(fn) -> tuple[int, int, str]:
    """(BLOCK_Q, BLOCK_K, what was read) from the namespace ``fn`` was defined in: the tile a Part C/D answer may
    allocate. A missing or larger block counts as 64."""
    namespace = namespace_of(fn)
    counted, notes = [], []
    for name in ("BLOCK_Q", "BLOCK_K"):
        value = namespace.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            counted.append(min(value, MAX_BLOCK))
            notes.append(f"{name} = {value}" + (f", counted as {MAX_BLOCK}" if value > MAX_BLOCK else ""))
        else:
            counted.append(MAX_BLOCK)
            notes.append(f"no {name} in the notebook, counted as {MAX_BLOCK}")
    return counted[0], counted[1], "; ".join(notes)


def _kind_of(shape: tuple[int, ...], T: int) -> str:
    """Say what an oversized allocation is, from its shape."""
    spans = sum(1 for s in shape[1:] if s >= T) if len(shape) >= 2 else 0
    if spans >= 2:
        return "a T×T matrix, the size of all of S"
    if spans == 1:
        return f"a strip, one of whose sides spans all T = {T} tokens"
    return "more than a tile"


class _TiledCalls:
    """Wrap a function so that each call on a property case (T ≥ PROPERTY_MIN_T) runs under a TokenRecorder whose
    query side and key side ``sides(args)`` names; ``calls`` keeps (arguments, recorder, what it returned).

    A case so long that a B×T×T tensor is one the operating system's count tells apart (``course.witness``) runs
    under a plain AllocationRecorder instead, its memory counted where the grader's re-check runs it: ``counted``."""

    def __init__(self, sides: Callable[[tuple], tuple[tuple, tuple]]):
        self.sides = sides
        self.calls: list[tuple[tuple, TokenRecorder, object]] = []
        self.counted: list[tuple[tuple, AllocationRecorder]] = []

    def __call__(self, fn: Callable) -> Callable:
        def recorded(*args, **kwargs):
            first = args[0] if args else None
            if not (isinstance(first, torch.Tensor) and first.ndim == 3 and first.shape[1] >= PROPERTY_MIN_T):
                return fn(*args, **kwargs)
            B, T = first.shape[:2]
            if witness.large_enough(B * T * T, first.element_size()):
                rec = AllocationRecorder(ignore=(args, kwargs))
                self.counted.append((args, rec))
                with witness.counted_by_os(), rec:
                    return fn(*args, **kwargs)
            rec = TokenRecorder(*self.sides(args), ignore=(args, kwargs))
            with rec:
                out = fn(*args, **kwargs)
            self.calls.append((args, rec, out))  # its results, kept alive: their storages are told apart after the call
            return out

        return recorded


def _across_tiles(tiles, B: int, d: int, block_q: int, block_k: int):
    """The first allocation computed from both sides whose axis is longer than a tile allows, as
    (allocation, axis, extent, "key" or "query", query rows, key rows); None if there is none.

    An axis longer than the query rows the tensor came from cannot index queries: it runs along the keys, and may
    hold at most BLOCK_K of them. An axis longer than the key rows it came from runs along the queries (at most
    BLOCK_Q) — asked only of tensors whose last axis is not the head dim, since a (B, T, d) result for all queries
    (o, or a key block's share of dq) is O(T·d), not a tile. The call's own results are exempt: o and lse are
    computed from every row of both sides and hold T query rows by definition.

    ``tiles``: ``TokenRecorder.tiles`` — (allocation, (query rows, key rows), whether it is a result's memory), as
    recorded where the call ran: in the notebook, or in the grader's value worker (the same rule on both sides)."""
    for a, (nq, nk), returned in tiles:
        if not (nq and nk) or a.dtype is None or returned:
            continue
        axes = list(enumerate(a.shape))
        if len(axes) >= 2 and axes[0][1] == B:
            axes = axes[1:]  # the batch axis
        per_token = len(a.shape) >= 2 and a.shape[-1] == d
        for axis, extent in axes:
            if extent > block_k and extent > nq:
                return a, axis, extent, "key", nq, nk
            if not per_token and extent > block_q and extent > nk:
                return a, axis, extent, "query", nq, nk
    return None


def _check_blockwise(name: str, fn, cases: Sequence[Case], part: str, reference: Callable,
                     sides: Callable[[tuple], tuple[tuple, tuple]], **run) -> None:
    """``run_cases``; then, on each call whose first argument is a (B, T, d) tensor with T ≥ PROPERTY_MIN_T:
    ``saved-quadratic-tensor`` when it allocated something bigger than one tile and bigger than O(T·d), and
    ``untiled`` when a tensor computed from queries and keys is longer than a tile along either axis."""
    recorded = _TiledCalls(sides)
    run_cases(name, recorded(fn) if callable(fn) else fn, cases, reference, **run)
    block_q, block_k, note = notebook_blocks(fn)
    labels = {id(c.args[0]): c.label for c in cases}
    for args, rec in recorded.counted:  # the memory of all S, however it was held (course.witness)
        B, T, d = args[0].shape
        over = witness.touched_over(rec.touched, B * T * T, args[0].element_size())
        big = over or [a for a in rec.allocations if a.numel >= B * T * T]
        if big:
            raise GradingFailure(
                "saved-quadratic-tensor",
                f"{name} gives the right values, but at T = {T} it had {big[0].numel:,} elements in memory while it "
                f"ran, a large part of the B·T² = {B * T * T:,} scores of S: all of S held at once, whether made in one "
                f"tensor, in pieces alive together, or written into a buffer made before the call. {part} works one "
                "tile of S at a time beside tensors of O(T·d).",
                f"measured: {big[0]}\ninputs: {labels.get(id(args[0]), f'q, k, v of shape ({B}, {T}, {d})')}",
            )
    for args, rec, out in recorded.calls:
        B, T, d = args[0].shape
        label = labels.get(id(args[0]), f"q, k, v of shape ({B}, {T}, {d})")
        tile = B * block_q * block_k
        linear = TD_TENSORS * B * T * d
        big = sorted((a for a in rec.allocations if a.numel > max(tile, linear)), key=lambda a: -a.numel)
        if big:
            worst = big[0]
            raise GradingFailure(
                "saved-quadratic-tensor",
                f"{name} gives the right values, but at T = {T} it allocated a {_dims(worst.shape)} tensor ({worst.op}), "
                f"{_kind_of(worst.shape, T)}: {worst.numel / tile:.3g} times one {B}×{block_q}×{block_k} tile "
                f"(B × BLOCK_Q × BLOCK_K). {part} works one tile of S at a time beside tensors of O(T·d): anything wider "
                "grows with T, and on a GPU it no longer fits in the on-chip memory a tile lives in.",
                f"allowed: one tile, B·BLOCK_Q·BLOCK_K = {tile:,} elements ({note}), or {TD_TENSORS}·B·T·d = "
                f"{linear:,} elements\nallocated: {'; '.join(str(a) for a in big[:3])}\ninputs: {label}",
            )
        found = _across_tiles(rec.tiles(out), B, d, block_q, block_k)  # outside the student's call: a course helper
        if found:
            a, axis, extent, side, nq, nk = found
            block, limit, came_from = (("BLOCK_K", block_k, _count(nq, "query", "queries")) if side == "key"
                                       else ("BLOCK_Q", block_q, _count(nk, "key", "keys")))
            plural = "keys" if side == "key" else "queries"
            raise GradingFailure(
                "untiled",
                f"{name} gives the right values, but at T = {T} it allocated a {_dims(a.shape)} tensor ({a.op}) "
                f"computed from {_count(nq, 'query row', 'query rows')} and {_count(nk, 'key row', 'key rows')}: its "
                f"axis {axis} holds {extent} entries, more than the {came_from} it came from, so it runs along the "
                f"{plural} — {extent} {plural} at once, where one tile holds {block} = {limit}. {part} walks the "
                f"{plural} in tiles, so that nothing it holds grows with T: a row or a strip of scores against every "
                f"{side} is what a tile loop exists to avoid.",
                f"allowed: at most {block_q} queries (BLOCK_Q) by {block_k} keys (BLOCK_K) in any tensor computed from "
                f"both ({note})\nallocated: {a}\ninputs: {label}",
            )


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


# ---------------------------------------------------------------------------
# The two blockwise functions


def check_forward_lse(fn, cases: Sequence[Case]) -> None:
    """``fn(q, k, v) -> (o, lse)`` against attention and the log-sum-exp; one tile at a time on the large cases."""
    _check_blockwise("attention_forward_lse", fn, [Case(c.label, c.args[:3], c.batch) for c in cases], "Part C",
                     attention_forward, lambda args: (args[:1], args[1:3]), outputs=("o", "lse"),
                     of=("q", "q without its last axis"),
                     alternatives=lambda case: output_alternatives(*case.args))


def backward_case(case: Case) -> Case:
    """(q, k, v, o, lse, ō) for attention_backward_recompute, from a (q, k, v, ō) case."""
    q, k, v, do = case.args
    return Case(case.label, (q, k, v, *attention_forward(q, k, v), do), case.batch)


def check_delta_from_o(fn, case: Case) -> None:
    """``untiled`` when the backward's result does not move with ``o``: its row scalar D was not formed from O.

    In the backward, o enters through D alone. A backward that sums D from tiles (or rows) of P̄ ⊙ P gives the
    right gradients whatever o it is handed; one that forms D from O before its key loop gives other gradients for
    another o. So the call is made again with o changed, and the right gradients coming back are the tell."""
    q, k, v, o, lse, do = case.args
    gen = torch.Generator().manual_seed(SEED)
    moved = o + torch.randn(o.shape, generator=gen, dtype=o.dtype)
    got = as_outputs("attention_backward_recompute", call_student("attention_backward_recompute", fn, q, k, v, moved,
                                                                  lse, do), GRADS)
    expected = attention_reference(q, k, v, do)[2:]
    if all(diagnose(out, g, e) is None for out, g, e in zip(GRADS, got, expected)):
        B, T, d = q.shape
        raise GradingFailure(
            "untiled",
            "attention_backward_recompute gives the right gradients even when it is handed another o: its row scalar "
            "D never reads O, so it was summed from P̄ ⊙ P — T products per row, which needs every tile of a row of P "
            "before the first tile of S̄ can be finished (a whole row, or a second pass over all the tiles). D is "
            "formed before the key loop, from tensors the backward holds whole.",
            f"called again with o + N(0, 1) noise: dq, dk and dv did not change\ninputs: {case.label}", topic="row-scalar")


def check_backward_recompute(fn, cases: Sequence[Case]) -> None:
    """``fn(q, k, v, o, lse, do) -> (dq, dk, dv)`` against autograd; one tile at a time on the large cases."""
    _check_blockwise("attention_backward_recompute", fn, cases, "Part D",
                     lambda q, k, v, o, lse, do: attention_reference(q, k, v, do)[2:],
                     lambda args: ((args[0], *args[3:6]), args[1:3]), outputs=GRADS, of=OF,
                     alternatives=lambda case: gradient_alternatives(*case.args[:3], case.args[5]))
    for case in cases:
        if case.args[0].shape[1] >= PROPERTY_MIN_T:
            check_delta_from_o(fn, case)


# ---------------------------------------------------------------------------
# autograd.Functions and the functions that apply them


HAND_WRITTEN = "autograd would differentiate the forward for you, and the point of the exercise is a backward derived by hand."
BATCH_MIXED = ("something mixes the batch axis into the products: a transpose or a sum crosses from one batch entry "
               "into another, which a single batch entry never shows.")


def _function_references(case: Case) -> tuple[dict, dict]:
    o, _, *grads = attention_reference(*case.args)
    return {"o": o}, dict(zip(GRADS, grads))


def _function_alternatives(case: Case) -> dict[str, list[Alternative]]:
    q, k, v, do = case.args
    return {**output_alternatives(q, k, v), **gradient_alternatives(q, k, v, do)}


def _function_spec(name: str, **watched) -> FunctionSpec:
    """An attention Function on (q, k, v, ō) cases: o, then dq, dk, dv through autograd for ō, batch 1 first."""
    return FunctionSpec(
        name=name, args=OF, leaves=lambda case: tuple(t.clone().requires_grad_(True) for t in case.args[:3]),
        reference=_function_references, alternatives=_function_alternatives, of_each=dict(zip(("o", *GRADS), ("q", *OF))),
        no_history="what forward returns is not the output autograd tracks, so no backward can ever run.",
        hand_written=HAND_WRITTEN, upstream=lambda case: [("", case.args[3])], layout_why="", tol=lambda case: 1e-7,
        batch_why=BATCH_MIXED, returned=True, **watched)


MANUAL = _function_spec("ManualAttention")
RECOMPUTE = _function_spec(  # watched for T×T memory: it saves only L
    "RecomputeAttention", helpers=(("attention_forward_lse", "Part C"), ("attention_backward_recompute", "Part D")),
    watch=lambda case: case.args[0].shape[-2] >= PROPERTY_MIN_T, memory=check_quadratic)


# ---------------------------------------------------------------------------
# The D kernel


@dataclass
class DeltaCase:
    """One launch of the D kernel: O and Ō of shape (n_rows, head_dim) as float64 values, run in ``dtype``."""

    o: torch.Tensor
    do: torch.Tensor
    dtype: torch.dtype
    block_m: int

    @property
    def label(self) -> str:
        n, d = self.o.shape
        return (f"n_rows = {n}, head_dim = {d}, BLOCK_M = {self.block_m}, BLOCK_D = {pow2_at_least(d)}, "
                f"{str(self.dtype).removeprefix('torch.')}")


def delta_alternatives(o: torch.Tensor, do: torch.Tensor) -> list[Alternative]:
    o, do = o.to(F64), do.to(F64)
    return [
        Alternative("wrong-values", "D is the row sum of O alone: Ō never enters it, so D "
                    "does not depend on the upstream gradient.", o.sum(dim=-1)),
        Alternative("wrong-values", "D is the row sum of Ō alone: O never enters it, so D "
                    "does not depend on the forward's output.", do.sum(dim=-1)),
    ]


def _launch_delta(kernel, case: DeltaCase, fill: float = math.nan) -> Launch:
    """Launch on views into wider buffers: ``fill`` past each row's head_dim, NaN in the rows past n_rows."""
    n, d = case.o.shape
    block_d = pow2_at_least(d)
    ins = [Guarded(x, (case.block_m + 1, block_d + 3 + 2 * i - d), fill, case.dtype) for i, x in enumerate((case.o, case.do))]
    for g in ins:
        g.buf[n:] = math.nan  # rows past n_rows
    out = Guarded((n,), (case.block_m + 2,), SENTINEL, case.dtype)
    (o, do), strides = (g.view for g in ins), [g.view.stride(0) for g in ins]
    grid = ((n + case.block_m - 1) // case.block_m,)
    touched = launch("attention_delta_kernel", lambda: kernel[grid](
        o, do, out.view, *strides, n, d, BLOCK_M=case.block_m, BLOCK_D=block_d), {"O_ptr": ins[0].buf, "DO_ptr": ins[1].buf})
    label = f"{case.label}; rows of O {strides[0]} apart, of Ō {strides[1]} apart"
    return Launch({"D": out.got()}, touched, ["Delta"] if out.spilled() else [], label)


NOT_JITTED = "without @triton.jit above its def it cannot be launched on a grid."


def _delta_past_end(spec: KernelSpec, case: DeltaCase, run: Launch) -> tuple[str, str]:
    n = case.o.shape[0]
    return (f"attention_delta_kernel writes past the end of D: the last program's block covers rows up to "
            f"{((n + case.block_m - 1) // case.block_m) * case.block_m - 1}, but there are only n_rows = {n}; the extra "
            "stores land on memory that belongs to something else.", f"entries ≥ {n} of Delta were overwritten")


def _delta_reads_past(wrong: Wrong, again: Launch) -> str:
    d = wrong.case.o.shape[1]
    store = " The store also writes past n_rows." if wrong.run.wrote or again.wrote else ""
    return (f"attention_delta_kernel reads past the end of each row: lanes {d}…{pow2_at_least(d) - 1} of the block are "
            f"not part of a row of head_dim = {d}, and what they read (NaN here, as memory after a row may hold "
            f"anything) reached D.{store}")


DELTA_KERNEL = KernelSpec(
    name="attention_delta_kernel", launch=_launch_delta, missing=NOT_JITTED,
    reference=lambda case: {"D": delta_reference(case.o, case.do)},
    alternatives=lambda case: {"D": delta_alternatives(case.o, case.do)},
    read_only="O and Ō are the forward's output and the upstream gradient, read-only for this kernel.",
    past_end=_delta_past_end, refinements=(
        ReadsPastEnd(0.0, _delta_reads_past, lambda wrong, _: f"columns ≥ {wrong.case.o.shape[1]} of O and Ō hold NaN here"),
        RightOnFirstRows(lambda case: case.block_m, lambda wrong: (
            f"D is right for the first block of {wrong.case.block_m} rows and wrong after it: every program works on "
            "the first block of rows instead of its own.")),
        RightOnFirstRows(1, lambda wrong: (
            "D is right on row 0 and wrong after it: the rows here sit inside wider buffers, so head_dim "
            f"({wrong.case.o.shape[1]}) is not the distance from one row to the next.")),
        Float32Only("part of the kernel computes in float32.")))


# ---------------------------------------------------------------------------
# FlashAttention's kernels: the forward's online softmax, and the dK/dV loop


@dataclass
class FlashCase:
    """One launch of a FlashAttention kernel: q, k, v, ō of shape (BH, T, d) as float64 values, its blocks, its layout
    (``transposed``: views of (BH, d, T) buffers, the token axis of stride 1; every tensor shares one set of strides)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor
    block_m: int
    block_n: int
    transposed: bool = False
    dtype = F64  # what the kernels run in: the values' own dtype

    @property
    def block_d(self) -> int:
        return max(16, pow2_at_least(self.q.shape[-1]))

    @property
    def blocks(self) -> dict[str, int]:
        """The kernels' block sizes, as their constexpr arguments."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_D": self.block_d}

    @property
    def label(self) -> str:
        BH, T, d = self.q.shape
        layout = ("transposed views, the token axis of stride 1" if self.transposed
                  else "row-major views into buffers padded past T and past d")
        blocks = ", ".join(f"{name} = {size}" for name, size in self.blocks.items())
        return f"q, k, v, ō of shape ({BH}, {T}, {d}); {blocks}; {layout}"


def _padded(case: FlashCase, values, fill: float, contiguous: bool = False) -> list[Guarded]:
    """(BH, T, d) views sharing one set of strides, into buffers whose padding past T and past d holds ``fill`` (a
    ``None`` value: a view left at ``fill``). The padding is wider than a block, so even an unmasked lane stays inside
    its own buffer. ``contiguous``: plain contiguous views instead, followed by two slabs of ``fill``."""
    extra = (2, 0, 0) if contiguous else (0, max(case.block_m, case.block_n) + 1, case.block_d - case.q.shape[-1] + 1)
    return [Guarded(case.q.shape if x is None else x, extra, fill, F64, case.transposed and not contiguous)
            for x in values]


def _flat(values, pad: int, fill: float) -> Guarded:
    """``values`` (a tensor, or a shape left at ``fill``) in a flat float64 buffer followed by ``pad`` entries of
    ``fill``; the view has their shape."""
    shape = values.shape if isinstance(values, torch.Tensor) else values
    g = Guarded(values.reshape(-1) if isinstance(values, torch.Tensor) else (math.prod(shape),), (pad,), fill, F64)
    g.view = g.view.view(shape)
    return g


def _launch_flash(name: str, kernel, case: FlashCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """Launch the kernel ``name`` on padded views: the forward writes (o, L); dK/dV, given L and D, writes (dk, dv)."""
    BH, T, d = case.q.shape
    pad = case.block_m + 1
    if name == "flash_fwd_kernel":
        ins = _padded(case, (case.q, case.k, case.v), fill, contiguous)
        outs = {"o": _padded(case, (None,), SENTINEL, contiguous)[0], "lse": _flat((BH, T), pad, SENTINEL)}
        block = case.block_m
    else:
        o, L = attention_forward(case.q, case.k, case.v)
        ins = _padded(case, (case.q, case.k, case.v, case.do), fill, contiguous) + [
            _flat(L, pad, fill), _flat(delta_reference(o, case.do), pad, fill)]
        outs = dict(zip(("dk", "dv"), _padded(case, (None, None), SENTINEL, contiguous)))
        block = case.block_n
    views = [g.view for g in (*ins, *outs.values())]
    blocks = case.blocks  # read before the launch: a course helper called inside the student's launch is refused
    touched = launch(name, lambda: kernel[((T + block - 1) // block, BH)](
        *views, *views[0].stride(), 1 / math.sqrt(d), T, d, **blocks),
        dict(zip(("Q_ptr", "K_ptr", "V_ptr", "DO_ptr", "L_ptr", "Delta_ptr"), (g.buf for g in ins))))
    wrote = [{"lse": "L"}.get(out, out.upper()) for out, g in outs.items() if g.spilled()]
    return Launch({out: g.got() for out, g in outs.items()}, touched, wrote, case.label)


def gradcheck_kernel(name: str, kernel, inputs: Sequence[torch.Tensor], block: int = 16, eps: float = 1e-6) -> bool:
    """A float64 gradcheck through a FlashAttention kernel, as torch.autograd.gradcheck's fast mode: along a random
    direction of each input, the derivative of ⟨ō, o⟩ (+ ⟨L̄, L⟩ for the forward) against the analytical one.
    Written out because on a mismatch torch computes the whole Jacobian to print it (hundreds of interpreted
    launches), and so that only the launches run as the student's code."""
    q, k, v = inputs
    gen = torch.Generator().manual_seed(SEED)
    w_o = torch.randn(q.shape, generator=gen, dtype=F64)
    w_L = torch.randn(q.shape[:2], generator=gen, dtype=F64) if name == "flash_fwd_kernel" else None
    directions = [torch.randn(x.shape, generator=gen, dtype=F64) for x in inputs]
    if name == "flash_fwd_kernel":
        analytical = attention_reference(q, k, v, w_o, w_L)[2:]

        def weighted(q, k, v) -> float:
            out = _launch_flash(name, kernel, FlashCase(q, k, v, None, block, block), 0.0, contiguous=True).got
            return float((out["o"] * w_o).sum() + (out["lse"] * w_L).sum())
    else:
        got = _launch_flash(name, kernel, FlashCase(q, k, v, w_o, block, block), 0.0, contiguous=True).got
        analytical = (None, got["dk"], got["dv"])  # q̄ is the reference's: not checked

        def weighted(q, k, v) -> float:
            return float((attention_forward(q, k, v)[0] * w_o).sum())

    def close(i: int) -> bool:  # the derivative along directions[i], estimated, against the analytical one
        along = directional_derivative(
            lambda x: weighted(*(x if j == i else y for j, y in enumerate(inputs))), inputs[i], directions[i], eps)
        exact = float((analytical[i] * directions[i]).sum())
        return abs(along - exact) <= 1e-5 + 1e-3 * abs(exact)

    return all(close(i) for i, grad in enumerate(analytical) if grad is not None)


def _flash_past_end(spec: KernelSpec, case: FlashCase, run: Launch) -> tuple[str, str]:
    outside, changed = (("output: the last query block", "changed past the end of") if spec.name == "flash_fwd_kernel"
                        else ("outputs: the last key block", "changed outside the (T, d) views"))
    return (f"{spec.name} writes outside its {outside} runs past T (and BLOCK_D past head_dim), and those stores land on "
            "memory that belongs to something else.", f"{changed}: {', '.join(run.wrote)}")


def _flash_reads_past(wrong: Wrong, again: Launch) -> str:
    return (f"{wrong.spec.name} reads lanes that are not part of the tensors: the last block runs past T (and BLOCK_D "
            "past head_dim), and what those lanes read — NaN here, as memory past a tensor may hold anything — reached "
            f"{'o' if wrong.spec.name == 'flash_fwd_kernel' else 'dk and dv'}.")


def _flash_spec(name: str, outputs: tuple[str, str], reference: Callable, alternatives: Callable, read_only: str,
                gradcheck_fails: str) -> KernelSpec:
    return KernelSpec(
        name=name, launch=partial(_launch_flash, name), missing=NOT_JITTED, alternatives=alternatives,
        reference=lambda case: dict(zip(outputs, reference(case))), read_only=read_only, past_end=_flash_past_end,
        refinements=(
            ReadsPastEnd(0.0, _flash_reads_past, lambda *_: "with 0 in the padding instead of NaN, every value is right",
                         only=("non-finite", "wrong-values")),
            ReadsPastEnd(0.0, lambda wrong, _: (
                f"{wrong.spec.name} is right on contiguous tensors and wrong on these: it walks rows, slabs or elements by "
                "distances of its own (head_dim, T·head_dim, 1) instead of the strides it is given, and here the tensors "
                "sit inside wider buffers, or transposed."), lambda *_: "with contiguous tensors, every value is right",
                only=("non-finite", "wrong-values"), variant=(("contiguous", True),)),
            Float32Only(f"part of {name} computes in float32 (an accumulator or a cast), which no float64 gradcheck "
                        "can pass.", classes=None, every=True)),
        gradcheck=partial(gradcheck_kernel, name), gradcheck_fails="the derivative along a random direction, estimated "
        f"from four steps as torch.autograd.gradcheck's fast mode does, disagrees with it: {gradcheck_fails}")


FLASH_FWD = _flash_spec(
    "flash_fwd_kernel", ("o", "lse"), lambda case: attention_forward(case.q, case.k, case.v),
    lambda case: output_alternatives(case.q, case.k, case.v), "q, k and v are read-only for the forward.",
    "the o and lse it computes do not move with q, k and v the way attention's do.")
FLASH_DKDV = _flash_spec(
    "flash_bwd_dkdv_kernel", ("dk", "dv"), lambda case: attention_reference(case.q, case.k, case.v, case.do)[3:],
    lambda case: gradient_alternatives(case.q, case.k, case.v, case.do), "only DK_ptr and DV_ptr are outputs.",
    "the dk and dv it returns are not the derivative of attention's forward.")


def flash_cases_and_gradcheck(gen: torch.Generator, shapes: Sequence[FlashShape], gradcheck: AttentionShape) -> list:
    """The launches of ``shapes``, then the float64 gradcheck through the kernel on q, k, v of ``gradcheck``."""
    cases, (T, d) = flash_cases(gen, shapes), _sizes(gen, gradcheck.T, gradcheck.d)
    qkv = tuple(randn(gen, gradcheck.B, T, d) for _ in range(3))
    return cases + [Gradcheck(qkv, f"q, k, v of shape {tuple(qkv[0].shape)}, contiguous")]


# Each exercise as a spec for spec.visible and the one hidden check (autograder.check.hidden).
SPECS = {spec.name: spec for spec in (
    MANUAL,
    Runner("manual_attention", lambda fn, cases: MANUAL.check_applied("manual_attention", fn, *cases, "Part A")),
    Runner("attention_forward_lse", check_forward_lse),
    Runner("attention_backward_recompute", lambda fn, cases: check_backward_recompute(fn, list(map(backward_case, cases)))),
    RECOMPUTE,
    Runner("recompute_attention", lambda fn, cases: RECOMPUTE.check_applied("recompute_attention", fn, *cases, "Part E")),
    DELTA_KERNEL, FLASH_FWD, FLASH_DKDV)}


# ---------------------------------------------------------------------------
# The visible checks: the shapes above, a fixed seed per set of inputs


def _cases(salt: int, shapes: Sequence[AttentionShape] = SMALL) -> list[Case]:
    return attention_cases(seeded(SEED + salt), shapes)


def _flash(salt: int) -> list:
    return flash_cases(seeded(SEED + salt), FLASH) + flash_cases_and_gradcheck(seeded(SEED + salt + 1), (), GRADCHECK)


TILE = f"nothing bigger than one tile or O(T·d) allocated at T = {MEMORY_T}"
ManualAttention = visible(SPECS["ManualAttention"], lambda: _cases(1),
                          "o, dq, dk, dv at batch 1 and 7, T ≠ d, transposed inputs, no autograd in backward")
manual_attention = visible(SPECS["manual_attention"], lambda: (_cases(2), _cases(1)),
                           "o, dq, dk, dv at batch 1 and 7, through ManualAttention")
attention_forward_lse = visible(SPECS["attention_forward_lse"], lambda: _cases(3, BLOCKWISE),
                                f"o and lse at batch 1 and 7, T = 11, 37, 70, transposed inputs, and {TILE}")
attention_backward_recompute = visible(SPECS["attention_backward_recompute"], lambda: _cases(4, BLOCKWISE),
                                       f"dq, dk, dv at batch 1 and 7, T = 11, 37, 70, transposed inputs, and {TILE}")
RecomputeAttention = visible(SPECS["RecomputeAttention"], lambda: _cases(5, BLOCKWISE), "o, dq, dk, dv at batch 1 and 7; "
                             f"nothing T×T saved or allocated at T = {MEMORY_T}; no autograd in backward")
recompute_attention = visible(SPECS["recompute_attention"], lambda: (_cases(6, BLOCKWISE), _cases(5, BLOCKWISE)),
                              f"o, dq, dk, dv at batch 1 and 7, through RecomputeAttention; nothing T×T saved or allocated "
                              f"at T = {MEMORY_T}")
attention_delta_kernel = visible(DELTA_KERNEL, lambda: delta_cases(seeded(SEED + 7), DELTA), "n_rows 13, 37, 91 with "
                                 "BLOCK_M 16 and 32; head dims 5, 12, 20; float32 and float64; NaN padding; nothing "
                                 "written past n_rows")
FLASH_PASSED = ("{out} for T = 21, 37 with blocks of 16 and 32, head dims 5 and 12, row-major and transposed layouts padded "
                "with NaN, nothing written outside {out}; float64 gradcheck")
flash_fwd_kernel = visible(FLASH_FWD, partial(_flash, 8), FLASH_PASSED.format(out="o and L"))
flash_bwd_dkdv_kernel = visible(FLASH_DKDV, partial(_flash, 10), FLASH_PASSED.format(out="dk and dv"))

"""Visible checks for 10_attention_as_trained: causal, grouped-query and packed attention as Triton kernels.

Each kernel is launched as the notebook's launchers launch it: slab tensors (B·H, T, d) for queries and
(B·H_kv, T, d) for keys and values sharing one set of strides, L and D contiguous; here the slabs are views inside
buffers padded with NaN past T and past d (outputs: a sentinel; K̄ and V̄ zero inside, the sentinel outside), and
one case lays the token axis at stride 1. T is never a multiple of a block; blocks of 16 and 32 on either side.
References: torch's causal ``scaled_dot_product_attention`` with ``enable_gqa`` and its autograd, and the same run
document by document for packed sequences; the named bugs come from one masked softmax with another mask.

Besides the values, each program's loads are read from the sanitizer's records: a program that loads a tile of
keys wholly above its block's diagonal (or queries wholly before its keys, or keys wholly in another document)
walks tiles its mask hides entirely: ``dense-walk``. On a GPU nothing is recorded, and only the values speak.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from .. import witness
from ..diagnose import GradingFailure, randn, seeded
from ..gradcheck import directional_derivative
from ..kernel_spec import F32, F64, SENTINEL, TOL, Float32Only, Gradcheck, Guarded, KernelSpec, Launch, ReadsPastEnd, Wrong
from ..sanitizer import sanitize
from ..spec import visible
from ..triton_check import device, launch, pow2_at_least
from ..vocabulary import Alternative

SEED = 1010
FWD, DQ, DKDV, VARLEN = "causal_fwd_kernel", "causal_bwd_dq_kernel", "causal_bwd_dkdv_kernel", "varlen_fwd_kernel"
TF32 = 2e-3  # float32 on a GPU: tl.dot rounds its inputs to TF32 by default


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _acc(dtype: torch.dtype) -> torch.dtype:
    return F64 if dtype == F64 else F32


def tolerance(case) -> float:
    return TF32 if case.dtype == F32 and device().type == "cuda" else TOL[case.dtype]


# ---------------------------------------------------------------------------
# Attention under a mask, in float64: the reference's pieces and every named bug's values


def forward_under(q, k, v, seen: torch.Tensor, norm: torch.Tensor | None = None):
    """(o, L) of slabs q (S, T, d), k and v (S, T, d) already expanded to q's slabs, with query i seeing key j where
    ``seen[..., i, j]``; ``norm``: the keys the softmax's denominator sums over, when not the seen ones."""
    s = q @ k.mT / math.sqrt(q.shape[-1])
    L = torch.logsumexp(s.masked_fill(~(seen if norm is None else norm), -math.inf), -1)
    p = torch.exp(s - L[..., None]).masked_fill(~seen, 0.0)
    return p @ v, L


def backward_under(q, k, v, do, L, D, seen: torch.Tensor):
    """(dq, dk, dv) per query slab, P rebuilt from the given L under ``seen`` (k and v expanded to q's slabs), with the
    given D: autograd differentiates each step (course/ spells no VJP a notebook asks for). P = exp(S − L) with L
    held fixed has the slope P in S, so the softmax's step is P's VJP for the cotangent P̄ − D."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    p = torch.exp(q @ k.mT * q.shape[-1] ** -0.5 - L[..., None]).masked_fill(~seen, 0.0)
    p_held = p.detach().requires_grad_(True)
    dp, dv = torch.autograd.grad(p_held @ v, (p_held, v), do)
    dq, dk = torch.autograd.grad(p, (q, k), dp - D[..., None])
    return dq, dk, dv


def _group_sum(t: torch.Tensor, group: int) -> torch.Tensor:
    return t.reshape(-1, group, *t.shape[1:]).sum(1)


# ---------------------------------------------------------------------------
# Causal cases: Parts A, B and C


@dataclass(frozen=True)
class CausalCase:
    """q and ō (B, H, T, d), k and v (B, H_kv, T, d) as float64 values (already rounded to ``dtype``)."""

    note: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor
    dtype: torch.dtype
    block_m: int
    block_n: int
    transposed: bool = False  # the token axis of stride 1

    @property
    def group(self) -> int:
        return self.q.shape[1] // self.k.shape[1]

    @property
    def T(self) -> int:
        return self.q.shape[2]

    @property
    def blocks(self) -> dict[str, int]:
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_D": max(16, pow2_at_least(self.q.shape[-1]))}

    @property
    def label(self) -> str:
        B, H, T, d = self.q.shape
        layout = "the token axis of stride 1" if self.transposed else "row-major views padded past T and past d"
        return (f"{self.note}: q, ō ({B}, {H}, {T}, {d}), k, v ({B}, {self.k.shape[1]}, {T}, {d}) (G = {self.group}), "
                f"{str(self.dtype).removeprefix('torch.')}; BLOCK_M = {self.block_m}, BLOCK_N = {self.block_n}; "
                f"{layout}")

    def slabs(self, t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1, *t.shape[-2:])

    def expanded(self, t: torch.Tensor) -> torch.Tensor:
        """K or V slabs repeated for the query slabs: query slab bh reads slab bh // G."""
        return self.slabs(t).repeat_interleave(self.group, 0)


def causal(T: int, offset: int = 0) -> torch.Tensor:
    """Query i sees key j when j ≤ i + offset."""
    i = torch.arange(T)
    return i[None, :] <= i[:, None] + offset


def causal_reference(case: CausalCase) -> dict[str, torch.Tensor]:
    """o, L, dq, dk, dv as slabs, from torch's causal attention (enable_gqa) and its autograd, float64."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (case.q, case.k, case.v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), case.do)
    s = case.slabs(case.q) @ case.expanded(case.k).mT / math.sqrt(case.q.shape[-1])
    L = torch.logsumexp(s.masked_fill(~causal(case.T), -math.inf), -1)
    return {n: case.slabs(t.detach()) for n, t in (("o", o), ("dq", dq), ("dk", dk), ("dv", dv))} | {"L": L}


def _tiles_reach(case: CausalCase, clamp: bool = True) -> torch.Tensor:
    """Per query row, the end of the keys a walk over whole tiles of BLOCK_N up to its block's last query visits;
    ``clamp``: only up to T (the loads' mask), else the tile's own end (its lanes past T load 0)."""
    rows = torch.arange(case.T)
    ends = (rows // case.block_m * case.block_m + case.block_m).clamp(max=case.T)
    reach = _cdiv_t(ends, case.block_n) * case.block_n
    return reach.clamp(max=case.T) if clamp else reach


def _cdiv_t(a: torch.Tensor, b: int) -> torch.Tensor:
    return (a + b - 1) // b


def _grid(T: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Query rows (T, 1) and key columns (1, width)."""
    return torch.arange(T)[:, None], torch.arange(T if width is None else width)[None, :]


def _skips(case: CausalCase) -> list[tuple[str, torch.Tensor]]:
    """(why, mask) for key walks that skip a tile holding keys some row sees."""
    rows, keys = _grid(case.T)
    start = rows // case.block_m * case.block_m
    found = [("the walk stops before the diagonal's tile (at the block's first query): the tile the diagonal "
              "crosses holds each row's own key and the ones just before it", keys < start)]
    if case.block_m > case.block_n:
        found.append((f"the walk ends one tile of BLOCK_N = {case.block_n} past the block's first query, but the "
                      f"block's BLOCK_M = {case.block_m} queries reach further: the last tiles before the block's last "
                      "query hold keys its later rows see", keys < _cdiv_t(start + 1, case.block_n) * case.block_n))
    return [(why, causal(case.T) & mask) for why, mask in found]


def _topic(sentence: str) -> str:
    return "walk" if "skips a tile" in sentence else "diagonal"


def fwd_alternatives(case: CausalCase) -> dict[str, list[Alternative]]:
    """The named bugs' o and L. Keys are padded with zeros to the last tile's end: a walk whose mask misses the
    lanes past T gives them the score 0 (their masked loads give k = 0), and each adds to ℓ."""
    T, width = case.T, _cdiv_t(torch.tensor(case.T), case.block_n).item() * case.block_n
    q = case.slabs(case.q)
    k, v = (F.pad(case.expanded(t), (0, 0, 0, width - T)) for t in (case.k, case.v))
    rows, keys = _grid(T, width)
    right, visited = keys <= rows, keys < _tiles_reach(case, clamp=False)[:, None]
    named = [("applies the causal mask after the softmax: the denominator ℓ sums the keys past the diagonal in "
              "the tiles it visits (the lanes past T too), then those keys are dropped from the output; on the "
              "diagonal tile the mask goes on the scores, before the max and the exponential.", right, visited),
             ("applies the causal mask after the softmax: the denominator ℓ sums every key past the diagonal; the "
              "mask goes on the scores, before the max and the exponential.", right, torch.ones_like(right)),
             ("lets each query see one key past the diagonal (j ≤ i + 1): query i sees key j only when j ≤ i.",
              (keys <= rows + 1) & visited, None),
             ("leaves the mask off the tiles the diagonal crosses: their keys past each row's own position are "
              "seen.", visited, None)]
    named += [(f"skips a tile that holds visible keys: {why}.", F.pad(mask, (0, width - T)), None)
              for why, mask in _skips(case)]
    found: dict[str, list[Alternative]] = {"o": [], "L": []}
    for sentence, seen, norm in named:
        o, L = forward_under(q, k, v, seen, norm)
        for out, value in (("o", o), ("L", L)):
            found[out].append(Alternative("wrong-values", f"{out} {sentence}", value, _topic(sentence)))
    return found


def _backward_masks(case: CausalCase, name: str) -> list[tuple[str, torch.Tensor]]:
    """(why, mask) of P rebuilt wrongly, within the tiles the kernel ``name``'s walk visits."""
    rows, keys = _grid(case.T)
    tiles = keys < _tiles_reach(case)[:, None]
    if name == DKDV:  # the query walk starts at the block holding query start_n
        walked = rows >= keys // case.block_n * case.block_n // case.block_m * case.block_m
        late = rows >= (keys // case.block_n * case.block_n // case.block_m + 1) * case.block_m
        skipped = [("the query walk starts one block late, past the block holding query start_n, whose queries "
                    "see the block's first keys", causal(case.T) & late)]
    else:
        walked, skipped = tiles, _skips(case)
    masks = [("sees one key past the diagonal (j ≤ i + 1) when it rebuilds P: query i sees key j only when j ≤ i.",
              causal(case.T, 1) & walked),
             ("misses the diagonal (j < i) when it rebuilds P: query i sees its own key too.", causal(case.T, -1)),
             ("rebuilds P without the causal mask on the tiles the diagonal crosses: exp(S − L) is not 0 past the "
              "diagonal by itself; P is 0 wherever the forward masked.", tiles & walked)]
    return masks + [(f"skips a tile that holds visible keys: {why}.", mask) for why, mask in skipped]


def _given(case: CausalCase) -> tuple[torch.Tensor, torch.Tensor]:
    """L and D as the backward kernels receive them (float64 here)."""
    ref = causal_reference(case)
    return ref["L"], (case.slabs(case.do) * ref["o"]).sum(-1)


def dq_alternatives(case: CausalCase) -> dict[str, list[Alternative]]:
    q, k, v, do = case.slabs(case.q), case.expanded(case.k), case.expanded(case.v), case.slabs(case.do)
    L, D = _given(case)
    return {"dq": [Alternative("wrong-values", f"dq {sentence}", backward_under(q, k, v, do, L, D, mask)[0],
                               _topic(sentence)) for sentence, mask in _backward_masks(case, DQ)]}


def _one_head(share: torch.Tensor, group: int, head: int) -> torch.Tensor:
    return share.reshape(-1, group, *share.shape[1:])[:, head]


def dkdv_alternatives(case: CausalCase) -> dict[str, list[Alternative]]:
    q, k, v, do, G = case.slabs(case.q), case.expanded(case.k), case.expanded(case.v), case.slabs(case.do), case.group
    L, D = _given(case)
    found: dict[str, list[Alternative]] = {"dk": [], "dv": []}
    for sentence, mask in _backward_masks(case, DKDV):
        _, dk, dv = backward_under(q, k, v, do, L, D, mask)
        for out, value in (("dk", dk), ("dv", dv)):
            found[out].append(Alternative("wrong-values", f"{out} {sentence}", _group_sum(value, G), _topic(sentence)))
    if G > 1:
        _, dk, dv = backward_under(q, k, v, do, L, D, causal(case.T))
        for out, share in (("dk", dk), ("dv", dv)):
            found[out].append(Alternative(
                "batch-reduction", f"{out} holds the share of the group's first query head only: the G = {G} query "
                "heads of a group all read one K/V head, so its gradient is the sum of their G shares.",
                _one_head(share, G, 0)))
            found[out] += [Alternative(
                "race", f"{out} holds the share of query head {h} of each group only: the group's programs stored "
                "their shares where they must add them (or one program must sum the group), and the last store won.",
                _one_head(share, G, h)) for h in range(1, G)]
    return found


def _slab_buffers(case, shapes_or_values, fill: float, dtype: torch.dtype, contiguous: bool, zero=False) -> list:
    """Guarded slab tensors sharing one set of strides: padded past the token axis by more than a block and past d
    (or, ``contiguous``, two whole slabs after them); ``zero``: zeros inside (K̄ and V̄)."""
    d = shapes_or_values[0].shape[-1] if isinstance(shapes_or_values[0], torch.Tensor) else shapes_or_values[0][-1]
    extra = (2, 0, 0) if contiguous else (0, max(case.block_m, case.block_n) + 1, case.blocks["BLOCK_D"] - d + 1)
    flip = case.transposed and not contiguous
    return [Guarded(torch.zeros(x) if zero else x, extra, fill, dtype, flip) for x in shapes_or_values]


def _rows(values, pad: int, fill: float, dtype: torch.dtype) -> Guarded:
    """A contiguous (S, T) tensor (L, D) in a flat buffer with ``pad`` entries of ``fill`` after it."""
    shape = values.shape if isinstance(values, torch.Tensor) else values
    g = Guarded(values.reshape(-1) if isinstance(values, torch.Tensor) else (math.prod(shape),), (pad,), fill, dtype)
    g.view = g.view.view(shape)
    return g


def launch_causal(name: str, kernel, case: CausalCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """One launch as the notebook's causal_forward / causal_backward makes it, on guarded slabs."""
    q, k, v, do = (case.slabs(t) for t in (case.q, case.k, case.v, case.do))
    S, T, d = q.shape
    acc, pad = _acc(case.dtype), case.block_m + case.block_n + 1
    if name == FWD:
        ins = _slab_buffers(case, [q, k, v], fill, case.dtype, contiguous)
        o, = _slab_buffers(case, [q.shape], SENTINEL, case.dtype, contiguous)
        outs, grid = {"o": o, "L": _rows((S, T), pad, SENTINEL, acc)}, (_cdiv(T, case.block_m), S)
        names = ("Q_ptr", "K_ptr", "V_ptr")
    else:
        L, D = _given(case)
        ins = _slab_buffers(case, [q, k, v, do], fill, case.dtype, contiguous) + [
            _rows(L, pad, fill, acc), _rows(D, pad, fill, acc)]
        names = ("Q_ptr", "K_ptr", "V_ptr", "DO_ptr", "L_ptr", "Delta_ptr")
        if name == DQ:
            dq, = _slab_buffers(case, [q.shape], SENTINEL, case.dtype, contiguous)
            outs, grid = {"dq": dq}, (_cdiv(T, case.block_m), S)
        else:
            dk, dv = _slab_buffers(case, [k.shape, k.shape], SENTINEL, acc, contiguous, zero=True)
            outs, grid = {"dk": dk, "dv": dv}, (_cdiv(T, case.block_n), S)
    views = [g.view for g in (*ins, *outs.values())]
    blocks = case.blocks  # read before the launch: a course helper called inside the student's launch is refused
    touched = launch(name, lambda: kernel[grid](*views, *views[0].stride(), 1 / math.sqrt(d), T, d, case.group,
                                                **blocks), dict(zip(names, (g.buf for g in ins))))
    wrote = [out for out, g in outs.items() if g.spilled()]
    return Launch({out: g.got() for out, g in outs.items()}, touched, wrote, case.label)


# ---------------------------------------------------------------------------
# Packed documents: Part D


@dataclass(frozen=True)
class VarlenCase:
    """q (H, total, d), k and v (H_kv, total, d) as float64 values; document b holds tokens cu[b] … cu[b+1] − 1."""

    note: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cu: tuple[int, ...]
    dtype: torch.dtype
    block_m: int
    block_n: int
    transposed: bool = False

    @property
    def group(self) -> int:
        return self.q.shape[0] // self.k.shape[0]

    @property
    def lengths(self) -> list[int]:
        return [b - a for a, b in zip(self.cu, self.cu[1:])]

    blocks = CausalCase.blocks
    slabs = CausalCase.slabs

    @property
    def label(self) -> str:
        H, total, d = self.q.shape
        layout = "the token axis of stride 1" if self.transposed else "row-major views padded past total and past d"
        return (f"{self.note}: q ({H}, {total}, {d}), k, v ({self.k.shape[0]}, {total}, {d}) (G = {self.group}), "
                f"cu_seqlens = {list(self.cu)}, {str(self.dtype).removeprefix('torch.')}; BLOCK_M = {self.block_m}, "
                f"BLOCK_N = {self.block_n}; {layout}")


def documents(case: VarlenCase, offset: int = 0) -> torch.Tensor:
    """(total, total): token i sees token j when both lie in one document and j ≤ i + offset."""
    doc = torch.repeat_interleave(torch.arange(len(case.lengths)), torch.tensor(case.lengths))
    return (doc[:, None] == doc[None, :]) & causal(case.q.shape[1], offset)


def varlen_reference(case: VarlenCase) -> dict[str, torch.Tensor]:
    """o and L by causal attention (enable_gqa) run document by document."""
    os, Ls = [], []
    for a, b in zip(case.cu, case.cu[1:]):
        q, k, v = (t[None, :, a:b] for t in (case.q, case.k, case.v))
        os.append(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)[0])
        s = q[0] @ k[0].repeat_interleave(case.group, 0).mT / math.sqrt(case.q.shape[-1])
        Ls.append(torch.logsumexp(s.masked_fill(~causal(b - a), -math.inf), -1))
    return {"o": torch.cat(os, 1), "L": torch.cat(Ls, 1)}


def _off_by_one(case: VarlenCase) -> tuple[torch.Tensor, torch.Tensor]:
    """o and L with j ≤ i + 1 inside each document, over the tiles its walk visits: the lane of the key one past a
    document's last token loads as 0 (the load's mask stops at the document's end), so it scores 0."""
    os, Ls = [], []
    for a, n in zip(case.cu, case.lengths):
        width = _cdiv(n, case.block_n) * case.block_n
        q = case.q[:, a:a + n]
        k, v = (F.pad(t[:, a:a + n].repeat_interleave(case.group, 0), (0, 0, 0, width - n)) for t in (case.k, case.v))
        rows, keys = _grid(n, width)
        reach = _cdiv_t((rows // case.block_m * case.block_m + case.block_m).clamp(max=n), case.block_n)
        o, L = forward_under(q, k, v, (keys <= rows + 1) & (keys < reach * case.block_n))
        os.append(o)
        Ls.append(L)
    return torch.cat(os, 1), torch.cat(Ls, 1)


def varlen_alternatives(case: VarlenCase) -> dict[str, list[Alternative]]:
    q, total = case.q, case.q.shape[1]
    k, v = (t.repeat_interleave(case.group, 0) for t in (case.k, case.v))
    named = [("ignores the documents' boundaries: a query sees the keys of the documents before its own. Each "
              "document starts at cu_seqlens[b]; its queries see its keys only.", forward_under(q, k, v, causal(total)),
              "boundary"),
             ("lets each query see one key past the diagonal (j ≤ i + 1): query i sees key j only when j ≤ i.",
              _off_by_one(case), "diagonal")]
    found: dict[str, list[Alternative]] = {"o": [], "L": []}
    for sentence, values, topic in named:
        for out, value in zip(("o", "L"), values):
            found[out].append(Alternative("wrong-values", f"{out} {sentence}", value, topic))
    return found


def launch_varlen(kernel, case: VarlenCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """One launch as the notebook's varlen_forward makes it: (heads, total, d) slabs, cu_seqlens int32."""
    H, total, d = case.q.shape
    acc = _acc(case.dtype)
    ins = _slab_buffers(case, [case.q, case.k, case.v], fill, case.dtype, contiguous)
    o, = _slab_buffers(case, [case.q.shape], SENTINEL, case.dtype, contiguous)
    outs = {"o": o, "L": _rows((H, total), case.block_m + 1, SENTINEL, acc)}
    cu = torch.tensor(case.cu, dtype=torch.int32, device=device())
    views = [g.view for g in (*ins, *outs.values())]
    blocks, grid = case.blocks, (_cdiv(max(case.lengths), case.block_m), H, len(case.lengths))
    touched = launch(VARLEN, lambda: kernel[grid](*views, cu, *views[0].stride(), 1 / math.sqrt(d), total, d,
                                                  case.group, **blocks),
                     {"Q_ptr": ins[0].buf, "K_ptr": ins[1].buf, "V_ptr": ins[2].buf, "CU_ptr": cu})
    wrote = [out for out, g in outs.items() if g.spilled()]
    return Launch({out: g.got() for out, g in outs.items()}, touched, wrote, case.label)


# ---------------------------------------------------------------------------
# The dense-walk property: which tiles each program loaded, from the sanitizer's records


def _loaded_rows(record, tensor: str, T: int, d: int):
    """(program ids, token rows) of every element of ``tensor`` a program loaded; None when not recorded."""
    touched = record.touched.get(tensor)
    if touched is None or not record.programs:
        return None
    program, flat = touched["load"]
    ids = np.asarray(record.programs, dtype=np.int64)[program]
    return ids, (flat // d) % T


def _reach(start: np.ndarray, case) -> np.ndarray:
    """Past the last key a block of queries from ``start`` may load: the end of the tile holding its last query."""
    return -(-(start + case.block_m) // case.block_n) * case.block_n


def _first(far: np.ndarray) -> int | None:
    bad = np.nonzero(far)[0]
    return None if bad.size == 0 else int(bad[0])


def causal_walk(name: str, case: CausalCase, record) -> str | None:
    """Whether some program loaded a tile its causal mask hides entirely, said as a sentence."""
    tensor = "Q_ptr" if name == DKDV else "K_ptr"
    loaded = _loaded_rows(record, tensor, case.T, case.q.shape[-1])
    if loaded is None:
        return None
    ids, rows = loaded
    if name == DKDV:  # queries before the block's first key see none of its keys: a whole tile of them is wasted
        start = ids[:, 0] * case.block_n
        i = _first(rows < start // case.block_m * case.block_m)
        if i is None:
            return None
        return (f"{name}'s program {tuple(int(x) for x in ids[i])} (keys {start[i]}…) loaded query {rows[i]}, in a "
                f"tile of BLOCK_M = {case.block_m} queries that all come before its first key: none of them sees any "
                "of its keys. The mask made the values right, but the walk should start at the block holding query "
                "start_n and skip what lies before.")
    start = ids[:, 0] * case.block_m
    i = _first(rows >= _reach(start, case))
    if i is None:
        return None
    return (f"{name}'s program {tuple(int(x) for x in ids[i])} (queries {start[i]}…{start[i] + case.block_m - 1}) "
            f"loaded key {rows[i]}, in a tile of BLOCK_N = {case.block_n} keys wholly above its diagonal: none of "
            "its queries sees them. The mask made the values right, but the walk should stop at the block's last "
            "query and never visit tiles the causal mask hides entirely.")


def varlen_walk(case: VarlenCase, record) -> str | None:
    loaded = _loaded_rows(record, "K_ptr", case.q.shape[1], case.q.shape[-1])
    if loaded is None:
        return None
    ids, rows = loaded
    first = np.asarray(case.cu, dtype=np.int64)[ids[:, 2]]
    pos, start = rows - first, ids[:, 0] * case.block_m
    # a tile aligned to the document's start or to the packed row's: either way, one wholly outside what it sees
    i = _first((pos <= -case.block_n) | (pos >= _reach(start, case) + case.block_n - 1))
    if i is None:
        return None
    where = "in another document" if pos[i] < 0 or rows[i] >= case.cu[ids[i, 2] + 1] else "above its diagonal"
    return (f"{VARLEN}'s program {tuple(int(x) for x in ids[i])} (document {ids[i, 2]}, its queries {start[i]}… "
            f"from the document's start) loaded key token {rows[i]}, in a tile of BLOCK_N = {case.block_n} keys "
            f"wholly {where}: none of its queries sees them. The mask made the values right, but the walk should "
            "cover the document's own keys up to the block's last query, and nothing else.")


@dataclass(frozen=True, kw_only=True)
class WalkedSpec(KernelSpec):
    """A KernelSpec whose right launch must also walk only the tiles its mask leaves something in: ``walk(case,
    record)`` reads the sanitizer's record of the case's launch and says what it visited needlessly."""

    walk: Callable | None = None

    def check_case(self, kernel, case) -> None:
        # Launched in the grader's worker (the trusted re-check), the launch's loads come back here as a launch.
        with sanitize() as report, witness.asking_loads():
            # Report is a dataclass compared by value, and sanitize() leaves by list.remove: marked, this report
            # is never equal to the one call_student opens inside it, so each block removes its own.
            report.received.append(None)
            super().check_case(kernel, case)
        sentence = self.walk(case, report.launches[0]) if report.launches and self.walk else None
        if sentence:
            raise GradingFailure("dense-walk", sentence, f"inputs: {case.label}")


# ---------------------------------------------------------------------------
# Refinements and the gradcheck


def _no_key(wrong: Wrong) -> GradingFailure | None:
    """NaN exactly on the rows that would see no key under j < i (first rows) or with the diagonal tile skipped."""
    if wrong.failure.cls != "non-finite" or wrong.spec.name not in (FWD, VARLEN):
        return None
    got = wrong.run.got[wrong.out]
    bad = ~torch.isfinite(got)
    rows = set(torch.nonzero(bad.reshape(*bad.shape[:2], -1).any(-1))[:, 1].tolist())
    firsts = set(wrong.case.cu[:-1]) if isinstance(wrong.case, VarlenCase) else {0}
    if rows == firsts:
        topic, sentence = "diagonal", ("the first query of each sequence sees no key, so its softmax is 0/0: query i sees key j when j ≤ "
                    "i — its own key included; a mask j < i leaves query 0 nothing.")
    elif isinstance(wrong.case, CausalCase) and rows == set(range(min(wrong.case.block_m, wrong.case.T))):
        topic, sentence = "walk", ("the first block of queries sees no key, so its softmax is 0/0: the walk skips the tile the "
                    "diagonal crosses, which holds each row's own key.")
    else:
        return None
    return GradingFailure("non-finite", f"{wrong.out} is NaN on rows {sorted(rows)}: {sentence}", wrong.mismatch(),
                          topic)


def _past_end(spec: KernelSpec, case, run: Launch) -> tuple[str, str]:
    return (f"{spec.name} writes outside its outputs: the last block runs past the sequence (and BLOCK_D past "
            "head_dim), and those stores land on memory that belongs to something else.",
            f"changed outside the views: {', '.join(run.wrote)}")


def _reads_past(wrong: Wrong, again: Launch) -> str:
    return (f"{wrong.spec.name} reads lanes that are not part of the tensors: the last block runs past the sequence "
            "(and BLOCK_D past head_dim), and what those lanes read — NaN here, as memory past a tensor may hold "
            f"anything — reached {wrong.out}.")


def _strides(wrong: Wrong, again: Launch) -> str:
    return (f"{wrong.spec.name} is right on contiguous slabs and wrong on these: it walks slabs, tokens or head-dim "
            "entries by distances of its own instead of the strides it is given, and here the slabs sit inside "
            "wider buffers, or with the token axis of stride 1.")


def causal_gradcheck(name: str, kernel, inputs: Sequence[torch.Tensor], eps: float = 1e-6) -> bool:
    """Fast-mode gradcheck through a kernel, along one random direction of each of q, k, v: the derivative of
    ⟨w, o⟩ + ⟨w_L, L⟩ through the forward kernel against autograd's, or the backward kernel's gradients against the
    derivative of ⟨ō, o⟩ through torch's attention."""
    gen = torch.Generator().manual_seed(SEED)
    w_o, w_L = randn(gen, *inputs[0].shape), randn(gen, *inputs[0].shape[:-1])
    directions = [randn(gen, *x.shape) for x in inputs]

    def case_of(*x) -> CausalCase:
        return CausalCase("gradcheck", *x, w_o, F64, 16, 16)

    def reference(*x) -> torch.Tensor:  # differentiable: the forward's masked softmax, in torch
        c = case_of(*x)
        o, L = forward_under(c.slabs(c.q), c.expanded(c.k), c.expanded(c.v), causal(c.T))
        return (o * c.slabs(w_o)).sum() + (L * w_L.reshape(L.shape)).sum() * (name == FWD)

    if name == FWD:
        leaves = [x.clone().requires_grad_(True) for x in inputs]
        grads = torch.autograd.grad(reference(*leaves), leaves)

        def weighted(*x) -> float:
            got = launch_causal(FWD, kernel, case_of(*x), 0.0, contiguous=True).got
            return float((got["o"].reshape(w_o.shape) * w_o).sum() + (got["L"].reshape(w_L.shape) * w_L).sum())
    else:
        got = launch_causal(name, kernel, case_of(*inputs), 0.0, contiguous=True).got
        grads = [got.get(out) for out in ("dq", "dk", "dv")]

        def weighted(*x) -> float:
            return float(reference(*x))
    for i, (g, u) in enumerate(zip(grads, directions)):
        if g is None:
            continue
        exact = float((g.reshape(u.shape) * u).sum())
        along = directional_derivative(lambda x: weighted(*(x if j == i else y for j, y in enumerate(inputs))),
                                       inputs[i], u, eps)
        if abs(along - exact) > 1e-5 + 1e-3 * abs(exact):
            return False
    return True


# ---------------------------------------------------------------------------
# The specs


REFINEMENTS = (
    _no_key,
    ReadsPastEnd(0.0, _reads_past, lambda *_: "with 0 in the padding instead of NaN, every value is right",
                 only=("non-finite", "wrong-values")),
    ReadsPastEnd(0.0, _strides, lambda *_: "with contiguous slabs, every value is right",
                 only=("non-finite", "wrong-values"), variant=(("contiguous", True),)),
    Float32Only("is right only to about float32 precision for float64 inputs: the sums, m, ℓ and the accumulators "
                "must be kept in acc_dtype (float64 for float64 inputs).", classes=None, topic="float32",
                generic=True))


def _causal_spec(name: str, outputs: tuple[str, ...], alternatives: Callable, read_only: str, fails: str) -> WalkedSpec:
    return WalkedSpec(
        name=name, launch=partial(launch_causal, name), alternatives=alternatives, tol=tolerance,
        reference=lambda case: {out: causal_reference(case)[out] for out in outputs}, read_only=read_only,
        past_end=_past_end, refinements=REFINEMENTS, gradcheck=partial(causal_gradcheck, name),
        gradcheck_fails="the derivative along a random direction, estimated from four steps as "
        f"torch.autograd.gradcheck's fast mode does, disagrees with it: {fails}", walk=partial(causal_walk, name))


FWD_SPEC = _causal_spec(FWD, ("o", "L"), fwd_alternatives, "q, k and v are read-only; write O and L.",
                        "the o and L it computes do not move with q, k and v the way causal attention's do.")
DQ_SPEC = _causal_spec(DQ, ("dq",), dq_alternatives, "only DQ_ptr is an output.",
                       "the dq it writes is not the derivative of causal attention.")
DKDV_SPEC = _causal_spec(DKDV, ("dk", "dv"), dkdv_alternatives, "only DK_ptr and DV_ptr are outputs.",
                         "the dk and dv it adds up are not the derivative of causal attention.")
VARLEN_SPEC = WalkedSpec(
    name=VARLEN, launch=launch_varlen, reference=varlen_reference, alternatives=varlen_alternatives, tol=tolerance,
    read_only="q, k, v and cu_seqlens are read-only; write O and L.", past_end=_past_end, refinements=REFINEMENTS,
    walk=varlen_walk)


# ---------------------------------------------------------------------------
# Cases


def _values(gen: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    x = randn(gen, *shape)
    return x.to(dtype).to(F64) if dtype != F64 else x


def causal_cases(gen: torch.Generator, rows: Sequence[tuple]) -> list:
    """A case per (note, B, H, H_kv, T, d, dtype, BLOCK_M, BLOCK_N[, transposed]); a gradcheck row is
    ("gradcheck", B, H, H_kv, T, d), run in float64 with blocks of 16."""
    cases = []
    for note, B, H, H_kv, T, d, *rest in rows:
        dtype = rest[0] if rest else F64
        q, do = _values(gen, dtype, B, H, T, d), _values(gen, dtype, B, H, T, d)
        k, v = _values(gen, dtype, B, H_kv, T, d), _values(gen, dtype, B, H_kv, T, d)
        if note == "gradcheck":
            cases.append(Gradcheck((q, k, v), f"q ({B}, {H}, {T}, {d}), k, v ({B}, {H_kv}, {T}, {d}), float64, "
                                              "contiguous, BLOCK_M = BLOCK_N = 16"))
        else:
            cases.append(CausalCase(note, q, k, v, do, *rest))
    return cases


def varlen_cases(gen: torch.Generator, rows: Sequence[tuple]) -> list[VarlenCase]:
    """A case per (note, H, H_kv, document lengths, d, dtype, BLOCK_M, BLOCK_N[, transposed])."""
    cases = []
    for note, H, H_kv, lengths, d, dtype, *rest in rows:
        total = sum(lengths)
        cu = tuple(int(x) for x in np.cumsum([0, *lengths]))
        q, k, v = (_values(gen, dtype, n, total, d) for n in (H, H_kv, H_kv))
        cases.append(VarlenCase(note, q, k, v, cu, dtype, *rest))
    return cases


# The visible checks: T a multiple of no block, G = 1 first, batch 1 first; blocks (16, 16), (32, 16), (16, 32).
VISIBLE_CAUSAL = [  # (note, B, H, H_kv, T, d, dtype, BLOCK_M, BLOCK_N[, transposed])
    ("batch 1, G = 1", 1, 1, 1, 21, 5, F64, 16, 16),
    ("G = 4, the token axis of stride 1", 1, 4, 1, 37, 12, F64, 32, 16, True),
    ("batch 2, G = 2", 2, 4, 2, 45, 8, F32, 16, 32),
    ("gradcheck", 1, 2, 1, 19, 3),
]
VISIBLE_VARLEN = [  # (note, H, H_kv, document lengths, d, dtype, BLOCK_M, BLOCK_N[, transposed])
    ("documents shorter than a block, a 1-token document", 2, 1, (5, 1, 34, 7), 6, F64, 16, 16),
    ("G = 4, the token axis of stride 1", 4, 1, (21, 1, 48), 5, F32, 32, 16, True),
    ("one K/V head per query head", 2, 2, (3, 50), 12, F64, 16, 32),
]
PASSED = ("T = 21, 37, 45 with blocks (16, 16), (32, 16), (16, 32), G = 1, 2 and 4, batch 1 and 2, float32 and "
          "float64, NaN-padded and transposed slabs; {what}")
causal_fwd_kernel = visible(FWD_SPEC, lambda: causal_cases(seeded(SEED + 1), VISIBLE_CAUSAL), PASSED.format(
    what="o and L, only the key tiles the mask leaves something in visited; a float64 gradcheck"))
causal_bwd_dq_kernel = visible(DQ_SPEC, lambda: causal_cases(seeded(SEED + 2), VISIBLE_CAUSAL), PASSED.format(
    what="dq, the key walk stopping at the diagonal; a float64 gradcheck"))
causal_bwd_dkdv_kernel = visible(DKDV_SPEC, lambda: causal_cases(seeded(SEED + 3), VISIBLE_CAUSAL), PASSED.format(
    what="dk and dv summed over each group, no race, the query walk starting at the diagonal; a float64 gradcheck"))
varlen_fwd_kernel = visible(VARLEN_SPEC, lambda: varlen_cases(seeded(SEED + 4), VISIBLE_VARLEN), (
    "packed documents of 1 to 50 tokens, boundaries inside tiles, G = 1, 2 and 4, float32 and float64, NaN-padded "
    "and transposed slabs, blocks (16, 16), (32, 16), (16, 32); o and L, nothing read from another document"))

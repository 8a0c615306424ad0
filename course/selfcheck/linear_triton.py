"""Visible checks for 09_matmul_backward_triton: the matmul backward as Triton kernels, and TritonLinear.

Each kernel is launched as the notebook's given launcher launches it (``BLOCK`` = 16 on every side, the rows of w̄'s
reduction cut into splits of ``rows_per_split``), on views inside wider buffers (``course.kernel_spec.Guarded``):
inputs padded with NaN, outputs with a sentinel that must stay; some inputs (and the atomic kernel's w̄) are
transposed views, so a kernel must use the strides it is given. Shapes divide no block. The references are float64
products of the same values: x̄ = ȳwᵀ, and for split s of the rows, the partial xₛᵀȳₛ (and Σ ȳₛ for b̄).

Two programs storing into one place (the splits of w̄ without atomics, b̄ written by every program of a column
block) are named ``race`` by the sanitizer every launch runs under; on a GPU, where nothing is recorded, the values
name what they can (a split's partial never written, a w̄ holding one split's sum) — b̄ stored alike by every program
shows in no value. A kernel right with one split and wrong with several is ``batch-reduction``. float32 is held to
1e-5 on the interpreter and to TF32's precision on a GPU, where ``tl.dot`` rounds float32 inputs to TF32 by default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..autograd_graph import kept_on_ctx
from ..diagnose import Alternative, GradingFailure, randn, seeded
from ..kernel_spec import (
    F16,
    F32,
    F64,
    SENTINEL,
    TOL,
    Float32Only,
    FunctionSpec,
    Gradcheck,
    Guarded,
    HalfSpacings,
    KernelSpec,
    Launch,
    ReadsPastEnd,
    Wrong,
)
from ..spec import visible
from ..triton_check import device, input_leaf, is_kernel, launch, namespace_of, relayed, unchanged, upstream_layouts

BLOCK = 16  # the notebook's BLOCK: every tile side (the interpreter's tl.dot needs 16 or more)
ROWS_PER_SPLIT = 64  # the notebook's rows of x per split of w̄'s reduction
SEED = 20240909
DX, SPLITK, ATOMIC = "linear_dx_kernel", "linear_dw_splitk_kernel", "linear_dw_atomic_kernel"
PARTS = {DX: "Part A", SPLITK: "Part B", ATOMIC: "Part C"}
TF32 = 2e-3  # float32 on a GPU: tl.dot rounds its inputs to TF32 (10 bits of mantissa) by default


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return F64 if dtype == F64 else F32


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tolerance(case) -> float:
    """Relative error allowed: exact up to summation order, TF32 products for float32 on a GPU."""
    return TF32 if case.dtype == F32 and device().type == "cuda" else TOL[case.dtype]


def _layout(names: Sequence[str]) -> str:
    return f"; {' and '.join(names)} {'a transposed view' if len(names) == 1 else 'transposed views'}" if names else ""


# ---------------------------------------------------------------------------
# linear_dx_kernel: x̄ = ȳwᵀ


@dataclass(frozen=True)
class DxCase:
    """ȳ (M, N) and w (K, N) as float64 values, run in ``dtype``; ``transposed``: which are transposed views."""

    note: str
    dy: torch.Tensor
    w: torch.Tensor
    dtype: torch.dtype
    transposed: tuple[str, ...] = ()
    statistic: str = ""

    @property
    def label(self) -> str:
        (M, N), K = self.dy.shape, self.w.shape[0]
        return (f"{self.note}: dy ({M}, {N}), w ({K}, {N}), {_name(self.dtype)}{_layout(self.transposed)}, "
                f"BLOCK = {BLOCK}")


def _run_dx(kernel, dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """The notebook's launch_dx into ``out``, any strides."""
    (M, N), K = dy.shape, w.shape[0]
    kernel[(_cdiv(M, BLOCK), _cdiv(K, BLOCK))](
        dy, w, out, M, N, K, *dy.stride(), *w.stride(), *out.stride(), BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK)


def launch_dx(kernel, case: DxCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """One launch: ȳ and w inside NaN-padded (``fill``) buffers, x̄ inside a sentinel-padded one; ``contiguous``:
    no transposed view, whatever the case says."""
    flipped = () if contiguous else case.transposed
    dy = Guarded(case.dy, (3, 5), fill, case.dtype, "dy" in flipped)
    w = Guarded(case.w, (2, 7), fill, case.dtype, "w" in flipped)
    dx = Guarded((case.dy.shape[0], case.w.shape[0]), (2, 3), SENTINEL, case.dtype)
    touched = launch(DX, lambda: _run_dx(kernel, dy.view, w.view, dx.view), {"DY_ptr": dy.buf, "W_ptr": w.buf})
    return Launch({"dx": dx.got()}, touched, ["dx"] if dx.spilled() else [], case.label)


def dx_alternatives(case: DxCase) -> dict[str, list[Alternative]]:
    dy, w = case.dy, case.w
    alts = [Alternative("wrong-values", f"dx sums only the first BLOCK_N = {BLOCK} columns of ȳ: the reduced axis N "
                        f"= {dy.shape[1]} takes {_cdiv(dy.shape[1], BLOCK)} steps of the loop, each adding its "
                        "block's products.", dy[:, :BLOCK] @ w[:, :BLOCK].T)] if dy.shape[1] > BLOCK else []
    if w.shape[0] == w.shape[1]:
        alts.append(Alternative("transpose", "dx is ȳw, not ȳwᵀ: the tile of w is read with its axes swapped — it "
                                "only ran because w is square here; write the shapes down: (M, N) times (N, K).",
                                dy @ w))
    return {"dx": alts}


def _past_end_dx(spec: KernelSpec, case: DxCase, run: Launch) -> tuple[str, str]:
    (M, _), K = case.dy.shape, case.w.shape[0]
    return (f"{DX} writes outside the {M} × {K} x̄: the last tiles along M and K are wider than what is left of x̄, "
            "and their store needs the mask too.", "")


def _reads_past(wrong: Wrong, again: Launch) -> str:
    return (f"{wrong.spec.name} reads past the edges of its inputs: the lanes of the last tiles that lie outside the "
            f"tensors (past M, N or K) read what is there — NaN here, as memory past a tensor may hold anything — "
            f"and it reached {wrong.out}; those loads need masks.")


def _edges(wrong: Wrong, again: Launch) -> str:
    return "right when the memory past the tensors holds zeros: the masked loads are the place to look"


READS_PAST = ReadsPastEnd(0.0, _reads_past, _edges)


def _layout_bug(wrong: Wrong, again: Launch) -> str:
    views = " and ".join(wrong.case.transposed)
    return (f"{wrong.spec.name} is right when its tensors lie row by row and wrong when {views} "
            f"{'is a transposed view' if len(wrong.case.transposed) == 1 else 'are transposed views'} of the same "
            "values: every address must come from the strides it is given, for both axes of each tensor.")


def _same_values(wrong: Wrong, again: Launch) -> str:
    return "right with the same values laid out row by row"


STRIDES = ReadsPastEnd(math.nan, _layout_bug, _same_values, variant=(("contiguous", True),))
FLOAT32 = Float32Only("is right only to about float32 precision for float64 inputs: the sums must be kept in "
                      "acc_dtype (float64 for float64 inputs), from the zeros of the accumulator to the store.",
                      classes=None, topic="float32", generic=True)


def dx_gradcheck(kernel, inputs: tuple[torch.Tensor, torch.Tensor]) -> bool:
    """torch.autograd.gradcheck (fast mode, float64) of the product the kernel writes, (a, b) ↦ abᵀ, with a backward
    that launches the same kernel on transposed views (strides, no copies): ā = ḡb = ḡ(bᵀ)ᵀ, b̄ = ḡᵀa = ḡᵀ(aᵀ)ᵀ."""

    def product(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        out = torch.empty(p.shape[0], q.shape[0], dtype=F64, device=device())
        launch(DX, lambda: _run_dx(kernel, p, q, out), {})
        return out

    class Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return product(a, b)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return product(g, b.t()), product(g.t(), a.t())

    leaves = tuple(t.to(device(), F64).requires_grad_(True) for t in inputs)
    return torch.autograd.gradcheck(Product.apply, leaves, fast_mode=True, raise_exception=False)


DX_SPEC = KernelSpec(
    name=DX, launch=launch_dx, reference=lambda case: {"dx": case.dy @ case.w.T}, alternatives=dx_alternatives,
    tol=tolerance, read_only="ȳ and w are read-only; store x̄ through DX_ptr.", past_end=_past_end_dx,
    refinements=(READS_PAST, STRIDES, FLOAT32),
    half=HalfSpacings(1.0, "the sum over N was held in float16 between the steps of the loop: each step's "
                      "rounding adds to the last"),
    gradcheck=dx_gradcheck, gradcheck_fails="launched on transposed views of the same values (as a backward "
                                            "launches it), the products it writes do not fit together.")


def dx_cases(gen: torch.Generator, rows: Sequence[tuple]) -> list:
    """A case per (note, M, N, K, dtype[, transposed]); float16 values rounded first; a gradcheck row is
    ("gradcheck", M, N, K)."""
    cases = []
    for note, M, N, K, *rest in rows:
        dy, w = randn(gen, M, N), randn(gen, K, N)
        if note == "gradcheck":
            cases.append(Gradcheck((dy, w), f"dy ({M}, {N}), w ({K}, {N}), float64"))
            continue
        dtype, *transposed = rest
        if dtype == F16:
            dy, w = dy.to(F16).to(F64), w.to(F16).to(F64)
        cases.append(DxCase(note, dy, w, dtype, tuple(transposed[0]) if transposed else ()))
    return cases


# ---------------------------------------------------------------------------
# linear_dw_splitk_kernel and linear_dw_atomic_kernel: w̄ = xᵀȳ over splits of the rows


@dataclass(frozen=True)
class DwCase:
    """x (M, K) and ȳ (M, N) as float64 values, run in ``dtype``, rows cut in splits of ``rows_per_split``;
    ``bias``: HAS_BIAS; ``after_single``: a case with a single split came before it (and passed)."""

    note: str
    x: torch.Tensor
    dy: torch.Tensor
    dtype: torch.dtype
    rows_per_split: int
    bias: bool = False
    transposed: tuple[str, ...] = ()
    after_single: bool = False

    @property
    def splits(self) -> int:
        return _cdiv(self.x.shape[0], self.rows_per_split)

    @property
    def label(self) -> str:
        (M, K), N = self.x.shape, self.dy.shape[1]
        bias = f", HAS_BIAS={self.bias}" if self.bias is not None else ""
        return (f"{self.note}: x ({M}, {K}), dy ({M}, {N}), {_name(self.dtype)}, rows_per_split = "
                f"{self.rows_per_split} ({self.splits} split{'s' * (self.splits > 1)}){bias}"
                f"{_layout(self.transposed)}, BLOCK = {BLOCK}")


def split_rows(case: DwCase, extended: bool = False) -> list[slice]:
    """The rows of each split; ``extended``: as far as the loop's last step of BLOCK_M rows reaches (within M)."""
    M, rps = case.x.shape[0], case.rows_per_split
    reach = _cdiv(rps, BLOCK) * BLOCK if extended else rps
    return [slice(s * rps, min(s * rps + reach, M)) for s in range(case.splits)]


def partials(case: DwCase, rows: Sequence[slice]) -> tuple[torch.Tensor, torch.Tensor]:
    """(SPLIT, K, N) and (SPLIT, N): xᵀȳ and Σ ȳ over each split's ``rows``."""
    return (torch.stack([case.x[r].T @ case.dy[r] for r in rows]),
            torch.stack([case.dy[r].sum(0) for r in rows]))


def _inputs(case: DwCase, fill: float, flipped: tuple[str, ...]) -> tuple[Guarded, Guarded]:
    return (Guarded(case.x, (3, 5), fill, case.dtype, "x" in flipped),
            Guarded(case.dy, (2, 7), fill, case.dtype, "dy" in flipped))


def launch_splitk(kernel, case: DwCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """One launch as launch_dw_partials makes it, into contiguous partials with a sentinel split after them."""
    (M, K), N, S = case.x.shape, case.dy.shape[1], case.splits
    x, dy = _inputs(case, fill, () if contiguous else case.transposed)
    pw = Guarded((S, K, N), (1, 0, 0), SENTINEL, _accumulator(case.dtype))  # padding along axis 0: still contiguous
    pb = Guarded((S, N), (1, 0), SENTINEL, _accumulator(case.dtype))
    touched = launch(SPLITK, lambda: kernel[(_cdiv(K, BLOCK), _cdiv(N, BLOCK), S)](
        x.view, dy.view, pw.view, pb.view, M, N, K, case.rows_per_split, *x.view.stride(), *dy.view.stride(),
        HAS_BIAS=case.bias, BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK), {"X_ptr": x.buf, "DY_ptr": dy.buf})
    got = {"pw": pw.got(), **({"pb": pb.got()} if case.bias else {})}
    wrote = [n for n, g in (("pw", pw), ("pb", pb)) if g.spilled()]
    if not case.bias and not unchanged(pb.buf, pb.before):
        wrote.append("pb with HAS_BIAS=False")
    return Launch(got, touched, wrote, case.label)


def launch_atomic(kernel, case: DwCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """One launch as launch_dw_atomic makes it: w̄ zero inside a sentinel-padded buffer, maybe a transposed view."""
    (M, K), N = case.x.shape, case.dy.shape[1]
    flipped = () if contiguous else case.transposed
    x, dy = _inputs(case, fill, flipped)
    dw = Guarded(torch.zeros(K, N), (3, 5), SENTINEL, _accumulator(case.dtype), "dw" in flipped)
    touched = launch(ATOMIC, lambda: kernel[(_cdiv(K, BLOCK), _cdiv(N, BLOCK), case.splits)](
        x.view, dy.view, dw.view, M, N, K, case.rows_per_split, *x.view.stride(), *dy.view.stride(),
        *dw.view.stride(), BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK), {"X_ptr": x.buf, "DY_ptr": dy.buf})
    return Launch({"dw": dw.got()}, touched, ["dw"] if dw.spilled() else [], case.label)


def _split_end(case: DwCase) -> str:
    return (f"the rows of split s stop at (s + 1)·rows_per_split, but the loop's last step of BLOCK_M = {BLOCK} rows "
            f"runs past it (rows_per_split = {case.rows_per_split} is no multiple of {BLOCK}) into the next split's "
            "rows, which that split counts too: those rows are counted twice.")


def _first_split(case: DwCase) -> str:
    return (f"every split sums the rows of the first split (rows 0…{case.rows_per_split - 1}) — right with a single "
            "split, wrong with several: split s owns the rows from s·rows_per_split.")


def splitk_alternatives(case: DwCase) -> dict[str, list[Alternative]]:
    if case.splits == 1:
        return {}
    (pw, pb), (pw0, pb0) = partials(case, split_rows(case, extended=True)), partials(case, split_rows(case)[:1])
    found: dict[str, list[Alternative]] = {}
    for out, extended, first in (("pw", pw, pw0), ("pb", pb, pb0)):
        found[out] = [Alternative("batch-reduction", f"{out}: {_first_split(case)}", first.expand_as(extended)),
                      Alternative("wrong-values", f"{out}: {_split_end(case)}", extended, "split-end")]
    return found


def atomic_alternatives(case: DwCase) -> dict[str, list[Alternative]]:
    if case.splits == 1:
        return {}
    each, _ = partials(case, split_rows(case))
    twice, _ = partials(case, split_rows(case, extended=True))
    stored = [Alternative("race", f"dw holds the partial sum of split {s} only: each split's programs stored their "
                          "sum where they must add it, and the last store won.", p) for s, p in enumerate(each)]
    return {"dw": [Alternative("batch-reduction", f"dw: {_first_split(case)}", case.splits * each[0]),
                   Alternative("wrong-values", f"dw: {_split_end(case)}", twice.sum(0), "split-end"), *stored]}


def one_split_only(wrong: Wrong) -> GradingFailure | None:
    """A wrong value no named bug explains, with several splits, once a single split passed: ``batch-reduction``."""
    case = wrong.case
    if not wrong.failure.generic or case.splits == 1 or not case.after_single:
        return None
    return GradingFailure("batch-reduction", f"{wrong.out} is right with a single split of the rows and wrong with "
                          f"{case.splits}: each split must sum its own rows, all of them, and no others.",
                          wrong.failure.where)


def _past_end_dw(spec: KernelSpec, case: DwCase, run: Launch) -> tuple[str, str]:
    K, N = case.x.shape[1], case.dy.shape[1]
    if "pb with HAS_BIAS=False" in run.wrote:
        return f"{SPLITK} wrote PB in a launch with HAS_BIAS=False: b̄'s partials are written only when asked.", ""
    what = f"the {case.splits} × {K} × {N} partials" if spec.name == SPLITK else f"the {K} × {N} w̄"
    return (f"{spec.name} writes outside {what} ({', '.join(run.wrote)}): the last tiles along K and N are wider than "
            "what is left, and their store needs the mask too.", "")


def _dw_spec(name: str, launcher, reference, alternatives, read_only: str, **extra) -> KernelSpec:
    return KernelSpec(name=name, launch=launcher, reference=reference, alternatives=alternatives, tol=tolerance,
                      read_only=read_only, past_end=_past_end_dw,
                      refinements=(READS_PAST, STRIDES, FLOAT32, one_split_only), **extra)


def _splitk_reference(case: DwCase) -> dict[str, torch.Tensor]:
    pw, pb = partials(case, split_rows(case))
    return {"pw": pw, **({"pb": pb} if case.bias else {})}


SPLITK_SPEC = _dw_spec(
    SPLITK, launch_splitk, _splitk_reference, splitk_alternatives, "x and ȳ are read-only; store the partials "
    "through PW_ptr and PB_ptr.", unwritten="here a row is a split's partial, and the programs of split s write "
    "all of partial s (of w̄, and of b̄ with HAS_BIAS).")
ATOMIC_SPEC = _dw_spec(ATOMIC, launch_atomic, lambda case: {"dw": case.x.T @ case.dy}, atomic_alternatives,
                       "x and ȳ are read-only; add into w̄ through DW_ptr.")


def dw_cases(gen: torch.Generator, rows: Sequence[tuple]) -> list[DwCase]:
    """A case per (note, M, K, N, dtype, rows_per_split, bias[, transposed]): standard normal x and ȳ."""
    cases = []
    for note, M, K, N, dtype, rps, bias, *transposed in rows:
        cases.append(DwCase(note, randn(gen, M, K), randn(gen, M, N), dtype, rps, bias,
                            tuple(transposed[0]) if transposed else (),
                            any(c.splits == 1 for c in cases)))
    return cases


# ---------------------------------------------------------------------------
# TritonLinear: y = xw + b, its backward by the kernels


@dataclass(frozen=True)
class LinearCase:
    """x (..., K), w (K, N), b (N,) and ȳ (..., N) as float64 values, run in ``dtype``."""

    note: str
    x: torch.Tensor
    w: torch.Tensor
    b: torch.Tensor
    dy: torch.Tensor
    dtype: torch.dtype

    @property
    def batch(self) -> int:
        """The splits of the backward's w̄ (ROWS_PER_SPLIT rows each): what a backward using one split gets right."""
        return _cdiv(math.prod(self.x.shape[:-1]), ROWS_PER_SPLIT)

    @property
    def label(self) -> str:
        K, N = self.w.shape
        return (f"{self.note}: x {tuple(self.x.shape)}, w ({K}, {N}), b ({N},), {_name(self.dtype)} "
                f"({self.batch} split{'s' * (self.batch > 1)} of {ROWS_PER_SPLIT} rows)")


def _linear_references(case: LinearCase) -> tuple[dict, dict]:
    K, N = case.w.shape
    x2, dy2 = case.x.reshape(-1, K), case.dy.reshape(-1, N)
    return {"y": case.x @ case.w + case.b}, {"dx": case.dy @ case.w.T, "dw": x2.T @ dy2, "db": dy2.sum(0)}


def _linear_alternatives(case: LinearCase) -> dict[str, list[Alternative]]:
    K, N = case.w.shape
    x2, dy2 = case.x.reshape(-1, K)[:ROWS_PER_SPLIT], case.dy.reshape(-1, N)[:ROWS_PER_SPLIT]
    if case.batch == 1:
        return {}
    first = (f"{{}} holds the partial of the first split only (rows 0…{ROWS_PER_SPLIT - 1}), not the sum of all "
             f"{case.batch} splits' partials: the second pass must add every one of them.")
    return {"dw": [Alternative("batch-reduction", first.format("dw"), x2.T @ dy2)],
            "db": [Alternative("batch-reduction", first.format("db"), dy2.sum(0))]}


def _check_saved(case: LinearCase, packed: list, leaves: tuple, y: torch.Tensor, label: str) -> None:
    """x and w saved through ctx.save_for_backward, and nothing of y's size."""
    x, w = leaves[0], leaves[1]
    stashed = kept_on_ctx(y.grad_fn)
    if stashed:
        raise GradingFailure(
            "wrong-values", f"TritonLinear keeps the tensor(s) {', '.join('ctx.' + k for k in stashed)} on ctx as "
            "attributes: autograd checks a tensor for in-place changes before the backward only when it went through "
            "ctx.save_for_backward.", f"inputs: {label}", "saved")

    def same(t: torch.Tensor, ref: torch.Tensor) -> bool:
        flat = t.detach().reshape(-1)
        return flat.numel() == ref.numel() and torch.equal(flat.to(ref.dtype), ref.detach().reshape(-1))

    kinds = ["x" if same(t, x) else "w" if same(t, w) else f"a {tuple(t.shape)} tensor" for t in packed]
    large = [k for k, t in zip(kinds, packed) if k.startswith("a ") and t.numel() >= y.numel()]
    if large:
        raise GradingFailure(
            "wrong-values", f"TritonLinear saves {', '.join(large)} for its backward, as large as y: the three "
            "gradients need x, w and ȳ only, and every saved tensor stays alive until the backward runs.",
            f"inputs: {label}", "saved")
    if not {"x", "w"} <= set(kinds):
        said = ", ".join(kinds) if kinds else "nothing"
        raise GradingFailure(
            "wrong-values", f"TritonLinear saves {said} with ctx.save_for_backward: the backward needs x (for w̄) and "
            "w (for x̄), saved through ctx.save_for_backward.", f"inputs: {label}", "saved")


def require_kernels(owner: str, cls) -> None:
    """Check the kernels ``owner`` launches (found by name where it was defined) before checking ``owner``."""
    namespace, gen = namespace_of(cls), seeded(SEED + 9)
    quick = [(DX_SPEC, dx_cases(gen, [("quick, square w", 18, 20, 20, F64)])),  # square: a swapped w reads transpose
             (SPLITK_SPEC, dw_cases(gen, [("quick", 40, 17, 18, F64, 24, True)]))]  # two splits, 24 rows each
    written = [(spec, namespace[spec.name], cases) for spec, cases in quick if is_kernel(namespace.get(spec.name))]
    for spec, kernel, cases in written:  # a name not defined yet is the Function's own check's business
        try:
            spec.check(kernel, cases)
        except GradingFailure as failure:
            raise relayed(failure, f"{owner} launches {spec.name}", PARTS[spec.name]) from None


TRITON_LINEAR = FunctionSpec(
    name="TritonLinear", args=("x", "w", "b"),
    leaves=lambda case: tuple(input_leaf(t, case.dtype) for t in (case.x, case.w, case.b)),
    reference=_linear_references, alternatives=_linear_alternatives, of_each={"y": "x", "dx": "x", "dw": "w", "db": "b"},
    no_history="return the y that forward creates, and call it as TritonLinear.apply(x, w, b).",
    hand_written="the backward here is the kernels you wrote in Parts A and B — the point of the exercise is a "
    "backward written by hand.",
    upstream=lambda case: upstream_layouts(case.dy.to(device(), case.dtype), case.dy.shape),
    layout_why="autograd may hand backward a non-contiguous ȳ (from a transpose, or an expand after .sum()): the "
    "kernels take any strides, but a view of ȳ with its leading axes merged is only possible for some layouts.",
    saved=_check_saved, pieces=require_kernels, tol=tolerance, batch_why=f"w̄ and b̄ sum over every row of x, and "
    f"the rows come in splits of {ROWS_PER_SPLIT} (the batch here counts splits): every split's partial counts.")


def linear_cases(gen: torch.Generator, rows: Sequence[tuple]) -> list:
    """A case per (note, shape of x, N, dtype), standard normal values; a gradcheck row is ("gradcheck", shape, N)."""
    cases = []
    for note, shape, N, *dtype in rows:
        K = shape[-1]
        x, w, b, dy = randn(gen, *shape), randn(gen, K, N), randn(gen, N), randn(gen, *shape[:-1], N)
        cases.append(Gradcheck((x, w, b), f"x {tuple(shape)}, w ({K}, {N}), b ({N},), float64")
                     if note == "gradcheck" else LinearCase(note, x, w, b, dy, dtype[0]))
    return cases


# ---------------------------------------------------------------------------
# The visible checks: fixed shapes that divide no block, a fixed seed per exercise

VISIBLE_DX = [
    ("batch 1, square w", 1, 23, 23, F32),
    ("shapes dividing no block", 37, 29, 21, F32),
    ("shapes dividing no block", 37, 29, 21, F64),
    ("strided w", 20, 35, 18, F64, ("w",)),
    ("strided dy", 33, 19, 26, F32, ("dy",)),
    ("square w", 9, 24, 24, F64),
    ("float16, a long loop over N", 8, 300, 20, F16),
    ("gradcheck", 3, 5, 4),
]
VISIBLE_SPLITK = [  # (note, M, K, N, dtype, rows_per_split, HAS_BIAS[, transposed])
    ("a single split", 40, 19, 23, F32, 64, False),
    ("a single split", 50, 17, 21, F64, 64, True),
    ("several splits", 100, 21, 18, F32, 40, True),
    ("several splits, strided x", 90, 19, 20, F64, 24, False, ("x",)),
    ("square w̄", 70, 20, 20, F64, 40, True, ("dy",)),
]
VISIBLE_ATOMIC = [
    ("a single split, square w̄", 30, 19, 19, F32, 64, None),
    ("several splits", 100, 21, 18, F64, 40, None, ("dw",)),
    ("several splits", 70, 20, 23, F32, 24, None, ("x",)),
]
VISIBLE_LINEAR = [  # (note, shape of x, N, dtype): one split first, then several
    ("batch 1", (1, 19), 23, F64),
    ("one split", (37, 19), 23, F32),
    ("3-D x", (2, 5, 21), 17, F64),
    ("several splits", (150, 19), 13, F64),
    ("several splits, 3-D x", (3, 30, 17), 22, F32),
    ("gradcheck", (2, 3), 2),
]

linear_dx_kernel = visible(DX_SPEC, lambda: dx_cases(seeded(SEED + 1), VISIBLE_DX), (
    "batch 1, shapes dividing no block in NaN-padded buffers, transposed w and ȳ, square w, float32 and float64, "
    "float16 within one rounding, a float64 gradcheck"))
linear_dw_splitk_kernel = visible(SPLITK_SPEC, lambda: dw_cases(seeded(SEED + 2), VISIBLE_SPLITK), (
    "one split then several, splits no multiple of BLOCK_M, with and without b̄, strided inputs, float32 and float64"))
linear_dw_atomic_kernel = visible(ATOMIC_SPEC, lambda: dw_cases(seeded(SEED + 3), VISIBLE_ATOMIC), (
    "one split then several, splits no multiple of BLOCK_M, a strided w̄ and x, float32 and float64"))
TritonLinear = visible(TRITON_LINEAR, lambda: linear_cases(seeded(SEED + 4), VISIBLE_LINEAR), (
    "2-D and 3-D x, one split then several, float32 and float64, ȳ contiguous or a transposed view, saves x and w, "
    "a float64 gradcheck"))

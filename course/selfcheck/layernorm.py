"""Visible checks for 04_layernorm: small fixed inputs, the same diagnoses as the grader.

Each PyTorch exercise is one :class:`course.spec.Exercise` (``row_exercise``); the kernel is a
:class:`course.kernel_spec.KernelSpec`, ``TritonLayerNorm`` a :class:`course.kernel_spec.FunctionSpec` whose
:class:`~course.kernel_spec.Step` cases check the kernel it launches first, and ``triton_layernorm`` a
:class:`course.spec.Runner`. The hidden checks (``autograder.check.layernorm``) run the same specs on their own
shapes and random inputs, adding only the bugs that would name a formula (docs/design.md, "A lesson is a spec").
This module holds no kernel and no backward: every reference is autograd's (through
``torch.nn.functional.layer_norm``), each named wrong answer is built from autograd's right one, and a diagnosis
names the bug and says why, never printing the fixed code or the formula. Beyond values, a wrong per-row output is
told apart from a missing sum over the batch (``Rows.refine``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..diagnose import (
    TRANSPOSED,
    Alternative,
    Case,
    GradingFailure,
    Passed,
    as_outputs,
    batch_refined,
    call_student,
    diagnose,
    labelled,
    layout_refined,
    relative_error,
    require_callable,
    seeded,
    transposed_view,
    vjp,
)
from ..kernel_spec import SENTINEL, FunctionSpec, Guarded, KernelSpec, Launch, Step, Wrong, on_host
from ..spec import Exercise, Runner, Spread, visible
from ..triton_check import (
    check_wrapper_forward,
    device,
    input_leaf,
    launch,
    namespace_of,
    pow2_at_least,
    relayed,
    run_student,
    upstream_layouts,
)

F16, F32, F64 = torch.float16, torch.float32, torch.float64
EPS = 1e-5  # LayerNorm's ε unless a case says otherwise
RMS_EPS = 1e-6  # the ε that the rrms handed to rmsnorm_backward was computed with
TRITON_TOL = {F32: 1e-5, F64: 1e-9}  # relative error allowed in the Triton parts, per dtype
SEED = 404


def build(make: Callable, gen: torch.Generator, table: Sequence[tuple]) -> list:
    """``make(gen, *row)`` for each row of ``table``, in order; a dict last in a row holds keyword arguments."""
    return [Spread(make)(gen, row) for row in table]


# ---------------------------------------------------------------------------
# Inputs and statistics


def spread_rows(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """float64 x whose rows have means far from 0 and standard deviations between 1.5 and 3.

    With rstd far from 1 a missing factor rstd changes every gradient visibly.
    """
    lead = (*shape[:-1], 1)
    scale = 1.5 + 1.5 * torch.rand(lead, generator=gen, dtype=F64)
    offset = 1.0 + torch.rand(lead, generator=gen, dtype=F64)
    sign = torch.where(torch.rand(lead, generator=gen, dtype=F64) < 0.5, -1.0, 1.0).to(F64)
    return sign * offset + scale * torch.randn(shape, generator=gen, dtype=F64)


def weight(gen: torch.Generator, n: int) -> torch.Tensor:
    """A per-feature scale far from all ones, so a forgotten γ shows."""
    return 1.0 + 0.7 * torch.randn(n, generator=gen, dtype=F64)


def row_stats(x: torch.Tensor, eps: float = EPS, correction: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """μ and 1/√(σ² + ε) of each row, shaped x.shape[:-1]; ``correction=1`` gives the unbiased σ²."""
    return x.mean(dim=-1), 1.0 / torch.sqrt(x.var(dim=-1, correction=correction) + eps)


def normalised(x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """x̂ = (x − μ)·rstd with one μ and rstd per row."""
    return (x - mean[..., None]) * rstd[..., None]


def shape_label(shape: Sequence[int], rows: int, note: str = "") -> str:
    what = f"batch {rows}" if len(shape) == 2 else f"{len(shape)}-D, {rows} rows"
    return f"x {tuple(shape)}, {what}" + (f", {note}" if note else "")


# ---------------------------------------------------------------------------
# Running cases: values, then whether rows leak into each other


@dataclass(frozen=True)
class Rows:
    """How a row-wise exercise's arguments and outputs are laid out: "row" is (..., N), one row per leading index;
    "stat" is (...,), one number per row; "param" is (N,), shared by every row. Its refinement tells a wrong
    per-row output from a missing sum over the batch (:func:`rows_leak`), and a broadcasting error says which
    per-row quantity lost its axis."""

    outputs: tuple[str, ...]
    arg_kinds: tuple[str, ...]
    out_kinds: tuple[str, ...]

    def refine(self, failure: GradingFailure, out: str, case: Case, got, expected, passed: Passed) -> GradingFailure:
        kind = self.out_kinds[self.outputs.index(out)]
        if layout := layout_refined(failure, out, case, passed, passed.name):
            return layout

        if passed.batch1 and case.batch > 1 and (failure.generic or failure.cls == "scale"):
            if kind in ("row", "stat") and rows_leak(self, passed, case, got):
                return GradingFailure(
                    "broadcast-axis",
                    f"{out} is right at batch 1 and wrong at batch {case.batch}, and one row's {out} changes when "
                    "the other rows change: a per-row quantity (a mean over the row, c1, c2, rstd) was reduced over "
                    "the wrong axis or broadcast across rows instead of along its own row.", failure.where)
            if kind == "param":
                return batch_refined(failure, out, case.batch, True, PARAMETER_SUM)
        return failure

    def on_error(self, failure: GradingFailure, case: Case, passed: Passed) -> GradingFailure:
        if "must match the size of tensor" not in failure.sentence:
            return labelled(failure, case.label)
        shape = case.args[0].shape  # x's, or ȳ's: the same
        return GradingFailure(
            "broadcast-axis",
            f"{passed.name} raised a broadcasting error at {case.batch} row(s) of N = {shape[-1]}: a per-row "
            f"quantity of shape x.shape[:-1] = {tuple(shape[:-1])} was combined with rows of N without the "
            "size-1 last axis that makes it broadcast along its own row.",
            "\n".join(p for p in (failure.sentence, failure.where, f"inputs: {case.label}") if p))


def row_exercise(name: str, outputs: tuple[str, ...], of: tuple[str, ...], arg_kinds: tuple[str, ...],
                 out_kinds: tuple[str, ...], make: Callable[..., Case], **fields) -> Exercise:
    """A row-wise PyTorch exercise, its cases ``make(gen, *shape, **options)`` per row of a table."""
    rows = Rows(outputs, arg_kinds, out_kinds)
    return Exercise(name=name, outputs=outputs, of=of, draw=Spread(make), refine=rows.refine, on_error=rows.on_error,
                    **fields)


PARAMETER_SUM = ("the parameter is shared by every row, so its gradient is a sum over every row — one is missing or "
                 "done in the wrong place.")


def _rows_of(t: torch.Tensor, kind: str, perm: torch.Tensor) -> torch.Tensor:
    """``t`` with its rows reordered by ``perm`` (parameters are left alone)."""
    if kind == "row":
        return t.reshape(-1, t.shape[-1])[perm].reshape(t.shape)
    if kind == "stat":
        return t.reshape(-1)[perm].reshape(t.shape)
    return t


def rows_leak(rows: Rows, passed: Passed, case: Case, got: tuple) -> bool:
    """Whether shuffling the rows of the inputs does more to the student's per-row outputs than shuffle them."""
    perm = torch.roll(torch.arange(case.batch), 1)
    args = tuple(_rows_of(a, k, perm) if isinstance(a, torch.Tensor) else a for a, k in zip(case.args, rows.arg_kinds))
    try:  # run inside run_cases, which silences warnings
        shuffled = as_outputs(passed.name, call_student(passed.name, passed.student, *args, **case.kwargs), rows.outputs)
    except GradingFailure:
        return False
    N = case.args[0].shape[-1]
    for kind, g, s in zip(rows.out_kinds, got, shuffled):
        if kind not in ("row", "stat") or not isinstance(g, torch.Tensor) or not isinstance(s, torch.Tensor):
            continue
        per_row = N if kind == "row" else 1
        if g.shape != s.shape or g.numel() != case.batch * per_row or (kind == "row" and g.shape[-1] != N):
            continue  # laid out in some other way: the value comparison has said what it can
        if relative_error(s, _rows_of(g, kind, perm)) > 1e-9:
            return True
    return False


def param_alternatives(out: str, param: str, case: Case, per_row: torch.Tensor) -> list[Alternative]:
    """Named wrong reductions of a parameter gradient whose contribution from each row is ``per_row`` (..., N)."""
    N = per_row.shape[-1]
    alts = [Alternative(
        "broadcast-axis",
        f"{out} is summed along each row (over the N features), shape x.shape[:-1]: {param} is shared by the rows, "
        "not by the features of a row.",
        per_row.sum(dim=-1))]
    if case.batch > 1:
        alts.append(Alternative(
            "batch-reduction",
            f"{out} keeps one row per example, shape {tuple(per_row.shape)}: {param} was used by every row, and "
            f"its gradient has {param}'s shape, ({N},).",
            per_row))
        flat = per_row.reshape(-1, N)
        for which, row in (("first", flat[0]), ("last", flat[-1])):
            alts.append(Alternative(
                "batch-reduction",
                f"{out} comes from the {which} row alone: {param} was used by every row, and every row contributes "
                "to its gradient.", row))
    return alts


def row_scalar_alternatives(dx: torch.Tensor, xhat: torch.Tensor, dxhat: torch.Tensor, scale: torch.Tensor,
                            names: str, with_c2: bool) -> list[Alternative]:
    """dx with its row scalars taken the wrong way, built from the right dx: each differs from it by
    x̂·(c1 − c1') (+ (c2 − c2')) times the per-row ``scale`` (rstd or rrms).

    ``dxhat`` is the gradient reaching x̂. The row scalars are reduced over a leading axis (keepdim) instead
    of the last, or over the last without keepdim (which broadcasts across rows when the row count equals N).
    """

    # The right row scalars, read off the right dx rather than written down: per row, dx̂ − dx/scale is
    # x̂·c1 (+ c2), so c1 (and c2) are the least-squares line through it against x̂.
    r = dxhat - dx / scale[..., None]
    if with_c2:
        x_c, r_c = xhat - xhat.mean(dim=-1, keepdim=True), r - r.mean(dim=-1, keepdim=True)
        c1 = (x_c * r_c).sum(dim=-1, keepdim=True) / (x_c * x_c).sum(dim=-1, keepdim=True)
        c2 = r.mean(dim=-1, keepdim=True) - c1 * xhat.mean(dim=-1, keepdim=True)
    else:
        c1, c2 = (xhat * r).sum(dim=-1, keepdim=True) / (xhat * xhat).sum(dim=-1, keepdim=True), 0.0

    def shifted(c1w, c2w):
        delta = xhat * (c1 - c1w) + ((c2 - c2w) if with_c2 else 0.0)
        return dx + delta * scale[..., None]

    alts = []
    for d in range(xhat.ndim - 1):
        alts.append(Alternative(
            "broadcast-axis", f"{names} reduced over axis {d}, across rows, instead of along each row: there is "
            "one per row.",
            shifted((xhat * dxhat).mean(dim=d, keepdim=True), dxhat.mean(dim=d, keepdim=True))))
    if xhat.ndim >= 2 and xhat.shape[-2] == xhat.shape[-1]:
        alts.append(Alternative(
            "broadcast-axis", f"{names} reduced along the row without keeping {'their' if with_c2 else 'its'} last axis: shape "
            "x.shape[:-1] lines up with the features, so row i's scalar is applied to column i of every row.",
            shifted((xhat * dxhat).mean(dim=-1), dxhat.mean(dim=-1))))
    return alts


# ---------------------------------------------------------------------------
# layernorm_forward


def forward_reference(x, gamma, beta, eps=EPS):
    """(y, μ, rstd) from torch.nn.functional.layer_norm and the definitions."""
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return (y, *row_stats(x, eps))


def forward_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """Named wrong versions of (y, mean, rstd)."""
    x, gamma, beta = case.args
    eps = case.kwargs.get("eps", EPS)
    mean, rstd = row_stats(x, eps)
    xc = x - mean[..., None]
    var = x.var(dim=-1, correction=0)
    wrong_rstd = [  # (why, the rstd it gives): each is wrong in y and in rstd alike
        ("σ² divides by N − 1 (torch.var's default, the unbiased estimate); LayerNorm's σ² is the biased one, a mean "
         "over the N features.", 1.0 / torch.sqrt(x.var(dim=-1, correction=1) + eps)),
        ("ε is added outside the square root; LayerNorm's ε is added to the variance, where it keeps rstd finite for "
         "a constant row.", 1.0 / (torch.sqrt(var) + eps)),
    ]
    if eps != EPS:
        for used, ignored in ((f"ε = {EPS:g}", EPS), ("no ε at all", 0.0)):
            wrong_rstd.append((f"layernorm_forward ignores its eps argument: it was called with eps={eps:g} and used "
                               f"{used}.", 1.0 / torch.sqrt(var + ignored)))
    alts = {
        "y": [Alternative("wrong-values", why, xc * r[..., None] * gamma + beta) for why, r in wrong_rstd],
        "mean": [],
        "rstd": [Alternative("wrong-values", why, r) for why, r in wrong_rstd],
    }
    alts["rstd"] += [
        Alternative("wrong-values", "rstd is the standard deviation itself; the forward saves its reciprocal, the "
                    "number the backward multiplies by.", torch.sqrt(var + eps)),
        Alternative("wrong-values", "rstd is the variance (+ ε), not the reciprocal of the standard deviation.", var + eps),
    ]
    alts["y"] += [
        Alternative("wrong-values", "y is x̂ without γ and β: the per-feature scale and shift are missing.",
                    xc * rstd[..., None]),
        Alternative("wrong-values", "y has γ and β swapped: γ scales x̂, β is added.", xc * rstd[..., None] * beta + gamma),
    ]
    if case.batch > 1:
        flat = x.reshape(-1)
        m_all, v_all = flat.mean(), flat.var(correction=0)
        alts["y"].append(Alternative(
            "broadcast-axis", "μ and σ² are taken over the whole tensor; LayerNorm normalises each row on its own.",
            (x - m_all) / torch.sqrt(v_all + eps) * gamma + beta))
        for d in range(x.ndim - 1):
            m_d = x.mean(dim=d, keepdim=True)
            v_d = x.var(dim=d, correction=0, keepdim=True)
            alts["y"].append(Alternative(
                "broadcast-axis", f"μ and σ² are reduced over axis {d} (across rows) instead of along each row.",
                (x - m_d) / torch.sqrt(v_d + eps) * gamma + beta))
    lead = tuple(x.shape[:-1])
    for out, value in (("mean", mean), ("rstd", rstd)):
        alts[out].append(Alternative(
            "shape", f"{out} keeps a size-1 last axis, shape {(*lead, 1)}: the contract is one number per row, shaped "
            f"like x without its last dim, {lead}.", value[..., None]))
        if x.ndim > 2:
            alts[out].append(Alternative(
                "shape", f"{out} is flat, shape ({value.numel()},): the contract keeps x's leading shape, {lead} (one "
                "number per row, x.shape[:-1]).", value.reshape(-1)))
    return alts


def forward_case(gen: torch.Generator, *shape: int, eps: float | None = None, note: str = "",
                 transposed: bool = False) -> Case:
    x = spread_rows(gen, *shape)
    N = shape[-1]
    gamma, beta = weight(gen, N), 0.5 * torch.randn(N, generator=gen, dtype=F64)
    rows = math.prod(shape[:-1])
    kwargs = {} if eps is None else {"eps": eps}
    if transposed:
        x, note = transposed_view(x), TRANSPOSED
    label = shape_label(shape, rows, note or (f"eps={eps:g}" if eps is not None else ""))
    return Case(label, (x, gamma, beta), batch=rows, kwargs=kwargs)


FORWARD = row_exercise("layernorm_forward", ("y", "mean", "rstd"), ("x", "x without its last dim", "x without its last dim"),
                       ("row", "param", "param"), ("row", "stat", "stat"), forward_case,
                       reference=forward_reference, alternatives=forward_alternatives)
FORWARD_SHAPES = [
    (1, 5),  # batch 1, N not a power of two
    (7, 13),  # batch 7 (prime)
    (2, 3, 11),  # 3-D: mean and rstd are (2, 3)
    (7, 6, {"eps": 0.1}),  # a large eps, so an ignored one shows
    (2, 5, 9, {"transposed": True}),  # rows not contiguous: a .view(-1, N) of x fails
]


layernorm_forward = visible(FORWARD, lambda: FORWARD.cases(seeded(SEED + 1), FORWARD_SHAPES), "batch 1 and 7, "
                            "3-D x, a transposed view, eps honoured; mean and rstd shaped x.shape[:-1]")


# ---------------------------------------------------------------------------
# layernorm_backward


def backward_reference(dy, x, gamma, mean, rstd):
    """(x̄, γ̄, β̄) by autograd through torch.nn.functional.layer_norm with ε = 1e-5."""
    layer_norm = lambda x, g, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, EPS)  # noqa: E731
    return vjp(layer_norm, (x, gamma, torch.zeros_like(gamma)), dy)


MISSING_RSTD = ("dx is missing a factor rstd: x̂ = (x − μ)·rstd, and every path from x̂ back to x goes through that "
                "multiply.")


def backward_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """Named wrong versions, built from autograd's answer (no formula here)."""
    dy, x, gamma, mean, rstd = case.args
    dx, _, _ = backward_reference(dy, x, gamma, mean, rstd)
    dx_no_gamma, _, _ = backward_reference(dy, x, torch.ones_like(gamma), mean, rstd)
    xhat = normalised(x, mean, rstd)
    return {
        "dx": [
            Alternative("wrong-values", MISSING_RSTD, dx / rstd[..., None]),
            Alternative("wrong-values", "dx ignores γ: γ multiplies x̂ in the forward, so the gradient that reaches x̂ "
                        "is not ȳ itself.", dx_no_gamma),
            *row_scalar_alternatives(dx, xhat, gamma * dy, rstd, "c1 and c2 are", with_c2=True),
        ],
        "dgamma": [
            Alternative("wrong-values", "dgamma is built from x itself, but γ multiplies x̂, the normalised x.",
                        (dy * x).reshape(-1, x.shape[-1]).sum(dim=0)),
            *param_alternatives("dgamma", "γ", case, dy * xhat),
        ],
        "dbeta": param_alternatives("dbeta", "β", case, dy),
    }


def _gradient_case(gen: torch.Generator, shape: Sequence[int], saved: Callable, note: str = "",
                  transposed: bool = False) -> Case:
    """(ȳ, x, γ, *saved(x)) for a backward: rows spread far from mean 0 and spread 1; x and ȳ may be transposed views."""
    x = spread_rows(gen, *shape)
    gamma = weight(gen, shape[-1])
    dy = torch.randn(tuple(shape), generator=gen, dtype=F64)
    stats = saved(x)  # from the contiguous x: the statistics are the same values either way
    rows = math.prod(shape[:-1])
    if transposed:
        dy, x, note = transposed_view(dy), transposed_view(x), f"x and dy {TRANSPOSED}"
    return Case(shape_label(shape, rows, note), (dy, x, gamma, *stats), batch=rows)


def backward_case(gen: torch.Generator, *shape: int, note: str = "", transposed: bool = False) -> Case:
    """(ȳ, x, γ, μ, rstd) for layernorm_backward."""
    return _gradient_case(gen, shape, row_stats, note, transposed)


BACKWARD = row_exercise("layernorm_backward", ("dx", "dgamma", "dbeta"), ("x", "gamma", "beta"),
                        ("row", "row", "param", "stat", "stat"), ("row", "param", "param"), backward_case,
                        reference=backward_reference, alternatives=backward_alternatives, recheck_shape=True)
BACKWARD_SHAPES = [
    (1, 5),  # batch 1
    (7, 7, {"note": "N = 7 rows: a row scalar broadcast across rows keeps its shape"}),
    (7, 13),  # batch 7, N not a power of two
    (2, 3, 11),  # 3-D: γ̄ sums over both leading axes
    (2, 5, 9, {"transposed": True}),  # rows not contiguous: a .view(-1, N) fails
]


layernorm_backward = visible(BACKWARD, lambda: BACKWARD.cases(seeded(SEED + 2), BACKWARD_SHAPES),
                             "batch 1 and 7, a square case, 3-D x, transposed views")


# ---------------------------------------------------------------------------
# rmsnorm_backward


def rms_reference(dy, x, g, rrms):
    """(x̄, ḡ) by autograd through y = x · rrms ⊙ g, rrms = 1/√(mean(x²) + ε)."""
    return vjp(lambda x, g: x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + RMS_EPS) * g, (x, g), dy)


def rms_alternatives(case: Case) -> dict[str, list[Alternative]]:
    dy, x, g, rrms = case.args
    dx, _ = rms_reference(dy, x, g, rrms)
    dx_no_g, _ = rms_reference(dy, x, torch.ones_like(g), rrms)
    xhat = x * rrms[..., None]
    c2 = (g * dy).mean(dim=-1, keepdim=True)
    return {
        "dx": [
            Alternative("wrong-values", "dx is missing a factor rrms: x̂ = x·rrms, and every path from x̂ back to x "
                        "goes through that multiply.", dx / rrms[..., None]),
            Alternative("wrong-values", "dx ignores g: g multiplies x̂ in the forward, so the gradient that reaches x̂ "
                        "is not ȳ itself.", dx_no_g),
            Alternative("wrong-values", "dx still has LayerNorm's c2 term: that term came from the mean μ, and RMSNorm "
                        "subtracts no mean.", dx - c2 * rrms[..., None]),
            *row_scalar_alternatives(dx, xhat, g * dy, rrms, "c1 is", with_c2=False),
        ],
        "dg": [
            Alternative("wrong-values", "dg is built from x itself, but g multiplies x̂ = x·rrms.",
                        (dy * x).reshape(-1, x.shape[-1]).sum(dim=0)),
            *param_alternatives("dg", "g", case, dy * xhat),
        ],
    }


def rms_case(gen: torch.Generator, *shape: int, note: str = "", transposed: bool = False) -> Case:
    """(ȳ, x, g, rrms) for rmsnorm_backward."""
    return _gradient_case(gen, shape, lambda x: (1.0 / torch.sqrt((x * x).mean(dim=-1) + RMS_EPS),), note, transposed)


RMS = row_exercise("rmsnorm_backward", ("dx", "dg"), ("x", "g"), ("row", "row", "param", "stat"), ("row", "param"),
                   rms_case, reference=rms_reference, alternatives=rms_alternatives, recheck_shape=True)
RMS_SHAPES = [
    (1, 6),  # batch 1
    (7, 7, {"note": "N = 7 rows: a row scalar broadcast across rows keeps its shape"}),
    (7, 11),  # batch 7, N not a power of two
    (2, 3, 9),  # 3-D
    (2, 5, 10, {"transposed": True}),  # rows not contiguous: a .view(-1, N) fails
]


rmsnorm_backward = visible(RMS, lambda: RMS.cases(seeded(SEED + 3), RMS_SHAPES),
                           "batch 1 and 7, a square case, 3-D x, transposed views")


# ---------------------------------------------------------------------------
# layernorm_bwd_kernel, launched by the check

KERNEL = "layernorm_bwd_kernel"


@dataclass
class KernelCase:
    """One launch: float64 values, the dtype to run in, how many programs share the rows, the block."""

    dy: torch.Tensor  # (n_rows, N)
    x: torch.Tensor  # (n_rows, N)
    gamma: torch.Tensor  # (N,)
    dtype: torch.dtype
    programs: int
    block: int | None = None  # BLOCK; None: the power of two that holds the whole row

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.x.shape)

    @property
    def block_size(self) -> int:
        return self.block or pow2_at_least(self.shape[1])

    @property
    def blocks_per_row(self) -> int:
        return -(-self.shape[1] // self.block_size)

    @property
    def rows_per_program(self) -> int:
        return -(-self.shape[0] // self.programs)

    @property
    def label(self) -> str:
        rows, n = self.shape
        groups = [min(self.rows_per_program, rows - p * self.rows_per_program) for p in range(self.programs)]
        return (f"{rows} row(s) of n_cols = {n}, BLOCK = {self.block_size} ({self.blocks_per_row} block(s) per row), "
                f"{str(self.dtype).removeprefix('torch.')}; "
                f"{self.programs} program(s), rows_per_program = {self.rows_per_program} (groups of {groups})")


def kernel_case(gen: torch.Generator, rows: int, n: int, programs: int, dtype=F64, block: int | None = None) -> KernelCase:
    return KernelCase(torch.randn(rows, n, generator=gen, dtype=F64), spread_rows(gen, rows, n), weight(gen, n), dtype,
                      programs, block)


def launch_kernel(kernel, case: KernelCase, fill: float = math.nan) -> Launch:
    """Launch ``kernel`` on ``case`` with ``fill`` after every input and a sentinel after every output: x̄ and the
    two partial buffers in float64, once it is known that the launch wrote every row of x̄ and nothing past the
    end of an output (refused here, before any value: a loop past the last row also reads NaN into the sums)."""
    rows, n = case.shape
    rpp, block = case.rows_per_program, case.block_size
    pad_block = max(block, pow2_at_least(n))  # room past the end for a block, or for a whole row held as one
    tail = -(-pad_block // n)  # the same in rows; a loop may also run a whole group past the last row
    mean, rstd = row_stats(case.x.to(case.dtype).to(F64))
    ins = {p: Guarded(t, extra, fill, case.dtype) for p, t, extra in (
        ("DY_ptr", case.dy, (rpp + tail, 0)), ("X_ptr", case.x, (rpp + tail, 0)), ("W_ptr", case.gamma, (pad_block,)),
        ("Mean_ptr", mean, (rpp,)), ("Rstd_ptr", rstd, (rpp,)))}
    outs = {p: Guarded(t, (extra, 0), SENTINEL, case.dtype) for p, t, extra in (
        ("DX_ptr", (rows, n), rpp + tail), ("DW_partial_ptr", torch.zeros(case.programs, n), tail),
        ("DB_partial_ptr", torch.zeros(case.programs, n), tail))}
    views = [g.view for g in (*ins.values(), *outs.values())]
    touched = launch(KERNEL, lambda: kernel[(case.programs,)](*views, rows, n, rpp, BLOCK=block),
                     {p: g.buf for p, g in ins.items()})
    got = {out: g.got() for out, g in zip(("dx", "DW_partial", "DB_partial"), outs.values())}
    unwritten = [r for r in range(rows) if bool((got["dx"][r] == SENTINEL).all())]
    if unwritten and not touched:
        raise GradingFailure(
            "wrong-values",
            f"{KERNEL} never wrote x̄ for row(s) {unwritten}: every row belongs to one program's group, and "
            "that program must write all of its rows.", f"inputs: {case.label}")
    spilled = [p for p, g in outs.items() if g.spilled()]
    if spilled and not touched:
        raise GradingFailure(
            "wrong-values",
            f"{KERNEL} writes past the end of {', '.join(spilled)}: a store wrote the lanes past the end of a "
            "row, or the last program ran past the last row (its group can be shorter than rows_per_program).",
            f"inputs: {case.label}")
    return Launch(got, touched, [], case.label)


def per_program(per_row: torch.Tensor, case: KernelCase, pick: Callable) -> torch.Tensor:
    """(programs, N): row p is ``pick`` of program p's rows of ``per_row`` (zeros for a program with no rows)."""
    rpp = case.rows_per_program
    groups = [per_row[p * rpp:(p + 1) * rpp] for p in range(case.programs)]
    return torch.stack([pick(group) if len(group) else torch.zeros_like(per_row[0]) for group in groups])


def _kernel_terms(case: KernelCase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x̄, ȳ ⊙ x̂, ȳ) per row, from the values the kernel sees (rounded to ``case.dtype``), in float64."""
    dy, x, gamma = (t.to(case.dtype).to(F64) for t in (case.dy, case.x, case.gamma))
    mean, rstd = row_stats(x)
    return backward_reference(dy, x, gamma, mean, rstd)[0], dy * normalised(x, mean, rstd), dy


def kernel_reference(case: KernelCase) -> dict[str, torch.Tensor]:
    dx, dw, db = _kernel_terms(case)
    return {"dx": dx, "DW_partial": per_program(dw, case, lambda group: group.sum(dim=0)),
            "DB_partial": per_program(db, case, lambda group: group.sum(dim=0))}


def kernel_alternatives(case: KernelCase) -> dict[str, list[Alternative]]:
    """A missing rstd in x̄; a partial buffer holding one row of each program's group instead of their sum."""
    dx, dw, db = _kernel_terms(case)
    rstd = row_stats(case.x.to(case.dtype).to(F64))[1]
    alts = {"dx": [Alternative("wrong-values", MISSING_RSTD, dx / rstd[:, None])], "DW_partial": [], "DB_partial": []}
    for buffer, per_row in (("DW_partial", dw), ("DB_partial", db)) if case.rows_per_program > 1 else ():
        alts[buffer] += [
            Alternative(
                "batch-reduction",
                f"row p of {buffer} holds only the last row of program p: each row of the group overwrites it instead "
                "of adding to what the rows before it left there.",
                per_program(per_row, case, lambda group: group[-1])),
            Alternative(
                "batch-reduction",
                f"row p of {buffer} holds only the first row of program p: the other rows of the group are missing "
                "from it.",
                per_program(per_row, case, lambda group: group[0])),
        ]
    return alts


# The case tables run rows of one block first, and batch 1 with N a power of two first: a refinement below reads a
# later case's failure in the light of those having passed.


def across_blocks(wrong: Wrong) -> GradingFailure | None:
    """Rows of several blocks, after rows of one block passed: the walk over the row's blocks is what is wrong."""
    case = wrong.case
    if case.blocks_per_row == 1:
        return None
    return GradingFailure(
        "wrong-values",
        f"{KERNEL} is right when a row fits in one block and wrong when a row of {case.shape[1]} spans "
        f"{case.blocks_per_row} blocks of BLOCK = {case.block_size}: it treats a block as if it were the whole "
        "row — every block must count in the row's sums, and every block of x̄ and of the partial sums must "
        "be written.",
        wrong.failure.where or f"inputs: {case.label}")


def past_n_cols(wrong: Wrong) -> GradingFailure | None:
    """One row on one program leaves nothing but the lanes past n_cols to go wrong after a power-of-two N passed."""
    (rows, n), block = wrong.case.shape, pow2_at_least(wrong.case.shape[1])
    if rows != 1 or n == block or wrong.case.blocks_per_row != 1:
        return None
    return GradingFailure(
        "wrong-values",
        f"{KERNEL} is right when N is a power of two (N = BLOCK) and wrong for N = {n} < BLOCK = {block}: the "
        f"{block - n} lanes past the end of each row leak into the row sums or the stores.",
        wrong.failure.where or f"inputs: {wrong.case.label}")


KERNEL_SPEC = KernelSpec(
    name=KERNEL, launch=launch_kernel, reference=kernel_reference, alternatives=kernel_alternatives,
    tol=lambda case: TRITON_TOL[case.dtype], refinements=(across_blocks, past_n_cols),
    read_only="inputs are read-only, and x̄ and the partial sums have buffers of their own.",
    past_end=lambda spec, case, run: ("", ""))  # launch_kernel refuses a store past the end itself, first


def require_tested_kernel(owner: str, namespace: dict, cases: Sequence[KernelCase]) -> None:
    """Check the kernel that ``owner`` launches first, so that a kernel bug is named as one."""
    if KERNEL not in namespace:
        raise GradingFailure(
            "error", f"{owner} launches {KERNEL}, but no {KERNEL} is defined beside it: keep the kernel, with its "
            "given name and signature, in the TritonLayerNorm cell and run that cell.")
    try:
        KERNEL_SPEC.check(namespace[KERNEL], cases)
    except GradingFailure as failure:
        if owner == "TritonLayerNorm":
            raise
        raise relayed(failure, f"{owner} launches {KERNEL}", "Part D") from None


# ---------------------------------------------------------------------------
# TritonLayerNorm and triton_layernorm: inputs and the reference


@dataclass
class TritonCase:
    """Inputs for TritonLayerNorm and triton_layernorm: x of any shape, γ, β, ȳ (float64 values) run in ``dtype``."""

    x: torch.Tensor
    gamma: torch.Tensor
    beta: torch.Tensor
    dy: torch.Tensor
    dtype: torch.dtype
    eps: float | None = None  # None: triton_layernorm is called without eps (the default, 1e-5)
    transposed: bool = False
    note: str = ""

    @property
    def epsilon(self) -> float:
        return EPS if self.eps is None else self.eps

    @property
    def label(self) -> str:
        parts = (f"x {tuple(self.x.shape)}", str(self.dtype).removeprefix("torch."), TRANSPOSED if self.transposed else "",
                 "" if self.eps is None else f"eps={self.eps:g}", self.note)
        return ", ".join(part for part in parts if part)


def triton_case(gen: torch.Generator, shape: tuple[int, ...], dtype=F64, *, eps=None, transposed=False, note="") -> TritonCase:
    x = spread_rows(gen, *shape)
    n = shape[-1]
    return TritonCase(x, weight(gen, n), 0.5 * torch.randn(n, generator=gen, dtype=F64),
                      torch.randn(shape, generator=gen, dtype=F64), dtype, eps, transposed, note)


def layernorm_reference(x, gamma, beta, dy, eps=EPS):
    """y and (x̄, γ̄, β̄) by autograd through torch.nn.functional.layer_norm, in float64."""
    x, gamma, beta = (t.detach().to(F64).clone().requires_grad_(True) for t in (x, gamma, beta))
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return (y.detach(), *torch.autograd.grad(y, (x, gamma, beta), dy.to(F64)))


def _rounded(case: TritonCase) -> tuple[torch.Tensor, ...]:
    """x, γ, β, ȳ as the student's code sees them (rounded to ``case.dtype``), in float64."""
    return tuple(t.to(case.dtype).to(F64) for t in (case.x, case.gamma, case.beta, case.dy))


def _gradient_failure(grads, expected, tol: float, label: str) -> GradingFailure | None:
    """The first of x̄, γ̄, β̄ that differs from ``expected``, diagnosed; None when all three are right."""
    failures = (diagnose(out, on_host(got), want, tol=tol, case=label, of=of)
                for out, of, got, want in zip(("dx", "dgamma", "dbeta"), ("x", "gamma", "beta"), grads, expected))
    return next((failure for failure in failures if failure is not None), None)


def _check_saved(case: TritonCase, packed: list, leaves: tuple, y, label: str) -> None:
    """Refuse a saved x̂ or y: two numbers per row (μ, rstd) rebuild x̂ from x."""
    x = leaves[0]
    if x.shape[0] < 2:
        return  # at batch 1 a row of x̂ has the size of γ; judged above batch 1
    x64, g64, b64, dy64 = _rounded(case)
    xhat = normalised(x64, *row_stats(x64, case.epsilon))
    y = layernorm_reference(x64, g64, b64, dy64, case.epsilon)[0]

    def is_(t, ref):
        return t.numel() == ref.numel() and torch.allclose(t.detach().reshape(-1).to("cpu", F64), ref.reshape(-1),
                                                           rtol=1e-5, atol=1e-6)

    for t in packed:
        if not isinstance(t, torch.Tensor) or t.numel() != x.numel():
            continue
        for what, ref in (("x̂", xhat), ("y", y)):
            if is_(t, ref) and not is_(t, x.detach().to("cpu", F64)):
                raise GradingFailure(
                    "wrong-values",
                    f"TritonLayerNorm's forward saves {what} for the backward: a second activation-sized tensor "
                    f"({x.shape[0]}×{x.shape[1]}) kept alive until the backward, where x and two numbers per row "
                    "rebuild it.", f"inputs: {label}")


def _check_raw(case: TritonCase, returned, label: str) -> None:
    """Refuse a γ̄ or β̄ that backward returned as the (programs, N) buffer, which autograd would have summed silently."""
    raw = returned if isinstance(returned, (tuple, list)) else ()
    expected = layernorm_reference(*_rounded(case), case.epsilon)[2:]
    for out, got, want in zip(("dgamma", "dbeta"), [*raw, None, None, None][1:], expected):
        if not isinstance(got, torch.Tensor) or got.ndim != 2 or got.shape[-1] != want.shape[-1]:
            continue
        if relative_error(got.detach().to("cpu", F64).sum(dim=0), want) <= TRITON_TOL[case.dtype]:
            raise GradingFailure(
                "batch-reduction",
                f"backward returns {out} as the ({got.shape[0]}, {got.shape[1]}) buffer of partial sums, one row per "
                "program: the second pass is missing. Autograd would quietly reduce it to the parameter's shape, so "
                "training would not notice.",
                f"{out} has shape {tuple(got.shape)}; it must be ({want.shape[-1]},)\ninputs: {label}")


# ---------------------------------------------------------------------------
# Half precision: the sums over rows must not be held in float16
#
# The rule is checked by what it does to the numbers, not by the dtype of a buffer: a float16 buffer that
# receives one float32 total per program, rounded once, is as good as a float32 one, and a float32 buffer the
# kernel ignores is no better than none. A case is built so that a running sum rounded to float16 after every
# row shows: one row in ``period`` has ȳ = 64, the rows between have ȳ ≈ 0.025. Once a program's total holds a
# large row, float16 keeps it to about 1/32, and the small shares that follow round away. Held in float32 and
# rounded once to float16, each entry of γ̄ and β̄ is off by at most one rounding, HALF_U relative to its size,
# so at most HALF_U times the sum of the magnitudes of its terms; measured 0.6–1.0 of that on six seeds, against
# 9–12 for float16 partial buffers (rows 128, N 8, four programs).

HALF_U = 2.0 ** -11  # float16's unit roundoff: the relative error of one rounding to float16
HALF_ROUNDINGS = 2  # the error allowed, in units of HALF_U times the sum of the terms' magnitudes


def half_case(gen: torch.Generator, rows: int, n: int, period: int = 16) -> TritonCase:
    """float16 inputs where a sum over rows held in float16 loses the small rows: ȳ = 64 on every ``period``-th
    row and about 0.025 elsewhere, and x close to one pattern in every row, so that each column of ȳ ⊙ x̂ keeps its
    sign down the rows and no cancellation hides the loss."""
    pattern = torch.linspace(-1.8, 1.8, n, dtype=F64)[torch.randperm(n, generator=gen)]
    x = 3.0 + pattern + 0.05 * torch.randn(rows, n, generator=gen, dtype=F64)
    gamma = 1.0 + 0.1 * torch.randn(n, generator=gen, dtype=F64)
    small = 0.02 + 0.01 * torch.rand(rows, 1, generator=gen, dtype=F64)
    large = (torch.arange(rows) % period == 0)[:, None]
    dy = torch.where(large, 64.0, small) * (1.0 + 0.01 * torch.randn(rows, n, generator=gen, dtype=F64))
    return TritonCase(x, gamma, torch.zeros(n, dtype=F64), dy, F16,
                      note=f"one row in {period} with ȳ = 64, the others ȳ ≈ 0.025")


def check_half_accumulation(name: str, apply: Callable, case: TritonCase) -> None:
    """``apply(x, gamma, beta, eps)`` on float16 ``case``: γ̄ and β̄ within HALF_ROUNDINGS roundings of the float64
    reference from the same float16 values, relative to the sum of the magnitudes of their terms over the rows."""
    x64, g64, b64, dy64 = _rounded(case)
    _, dx_ref, dgamma_ref, dbeta_ref = layernorm_reference(x64, g64, b64, dy64, case.epsilon)
    mean, rstd = row_stats(x64, case.epsilon)
    terms = {"dgamma": (dy64 * normalised(x64, mean, rstd)).abs().sum(dim=0), "dbeta": dy64.abs().sum(dim=0)}
    x, gamma, beta = (input_leaf(t, F16) for t in (case.x, case.gamma, case.beta))
    y = run_student(name, apply, x, gamma, beta, case.epsilon)
    dy = case.dy.to(device(), F16)  # outside the student's call: course helpers there count as delegation
    grads = run_student(name, lambda: torch.autograd.grad(y, (x, gamma, beta), dy))
    label = f"{case.label}, {x.shape[0]} rows of N = {x.shape[1]}"
    failure = _gradient_failure(grads, (dx_ref, dgamma_ref, dbeta_ref), 1e-2, label)  # gross errors first
    if failure is not None:
        raise failure
    for out, got, want in zip(("dgamma", "dbeta"), grads[1:], (dgamma_ref, dbeta_ref)):
        err = (on_host(got).to(F64) - want).abs() / terms[out]  # in units of the terms' magnitudes
        worst = int(err.argmax())
        if err[worst] > HALF_ROUNDINGS * HALF_U:
            raise GradingFailure(
                "half-accumulation",
                f"{name} is right in float32 and float64, but in float16 its {out} is off by "
                f"{err[worst].item() / HALF_U:.1f} float16 roundings (at most {HALF_ROUNDINGS} are allowed, measured "
                "relative to the sum of the magnitudes of the terms): a sum over the rows was held in float16. "
                "After a row with a large ȳ the running total is large, and float16 rounds away the small shares of "
                "the rows that follow; held in float32 and rounded once at the end, they count.",
                f"{out}[{worst}]: expected {want[worst].item():.6g}, got {on_host(got)[worst].item():.6g}; "
                f"the terms' magnitudes sum to {terms[out][worst].item():.6g}\ninputs: {label}")


def _class_reference(case: TritonCase) -> tuple[dict, dict]:
    y, dx, dgamma, dbeta = layernorm_reference(*_rounded(case), case.epsilon)
    return {"y": y}, {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}


TRITON_LAYERNORM = FunctionSpec(
    name="TritonLayerNorm", args=("x", "gamma", "beta", "eps"), reference=_class_reference,
    leaves=lambda case: tuple(input_leaf(t, case.dtype) for t in (case.x, case.gamma, case.beta)),
    extra=lambda case: (case.epsilon,), no_history="return the y that forward creates.",
    hand_written="the point of the exercise is a backward written by hand, in layernorm_bwd_kernel.",
    upstream=lambda case: upstream_layouts(case.dy.to(device(), case.dtype), case.x.shape),
    layout_why="autograd may hand backward a non-contiguous ȳ, and the kernel steps through rows as if they were "
    "contiguous.", saved=_check_saved, raw=_check_raw, tol=lambda case: TRITON_TOL[case.dtype])


def class_cases(gen: torch.Generator, shapes: Sequence[tuple], kernel_shapes: Sequence[tuple],
                long_row_shapes: Sequence[tuple] = (), half_shape: tuple[int, int] | None = None) -> list:
    """The kernel first (on ``kernel_shapes``); then the class through autograd (``shapes``, rows of
    ``triton_case``); then the kernel on rows longer than its block (``long_row_shapes``); last, float16 inputs of
    ``half_shape`` (rows, N) that show a sum over rows held in float16. Drawn from ``gen`` in that order."""
    name = TRITON_LAYERNORM.name
    cases = build(triton_case, gen, shapes)
    kernel_cases = build(kernel_case, gen, kernel_shapes)
    long_row_cases = build(kernel_case, gen, long_row_shapes)
    half = half_case(gen, *half_shape) if half_shape else None

    def kernel_check(more: Sequence[KernelCase]) -> Step:
        return Step(lambda guarded: require_tested_kernel(name, namespace_of(guarded), [*kernel_cases, *more]))

    return [kernel_check(()), *cases, *([kernel_check(long_row_cases)] if long_row_cases else []),
            *([Step(lambda guarded: check_half_accumulation(name, guarded.apply, half))] if half else [])]


VISIBLE_CLASS_CASES = [  # (shape[, dtype]) of x
    ((1, 6),),  # batch 1
    ((7, 13),),  # batch 7 on 3 programs: groups of 3, 3, 1
    ((7, 13), F32),
]
VISIBLE_KERNEL_CASES = [  # (rows, N, programs, dtype): one row first, N a power of two first; BLOCK holds the row
    (1, 8, 1, F64),
    (1, 5, 1, F64),
    (7, 13, 3, F64),  # groups of 3, 3, 1: a ragged last program
    (7, 13, 3, F32),
]
VISIBLE_LONG_ROW_CASES = [  # (rows, N, programs, dtype, BLOCK): rows longer than a block
    (1, 16, 1, F64, 4),  # four whole blocks
    (7, 13, 3, F64, 4),  # blocks of 4, 4, 4, 1 in every row, on a ragged last program
    (7, 13, 3, F32, 8),
]
VISIBLE_HALF_SHAPE = (128, 8)  # float16 rows: 32 a program on MAX_PROGRAMS = 4, two large rows in each group

TritonLayerNorm = visible(
    TRITON_LAYERNORM, lambda: class_cases(seeded(SEED + 4), VISIBLE_CLASS_CASES, VISIBLE_KERNEL_CASES,
                                          VISIBLE_LONG_ROW_CASES, VISIBLE_HALF_SHAPE),
    "kernel on 1 and 3 programs with a ragged last group, rows in one block and in several; y, dx, dgamma, dbeta at "
    "batch 1 and 7, float32 and float64, a transposed ȳ; saves no x̂; no autograd in backward; float16 rows summed "
    "in float32")


# ---------------------------------------------------------------------------
# triton_layernorm


def function_cases(gen: torch.Generator, shapes: Sequence[tuple], kernel_shapes: Sequence[tuple]) -> list:
    """The kernel's cases (``kernel_shapes``, drawn first), then rows of ``triton_case``."""
    return [*build(kernel_case, gen, kernel_shapes), *build(triton_case, gen, shapes)]


def check_layernorm_function(fn, cases: Sequence) -> None:
    """``fn(x, gamma, beta[, eps])`` = LayerNorm over the last dim of any-rank x, forward and backward; the kernel it
    launches is checked first, on the cases that are :class:`KernelCase`."""
    name = "triton_layernorm"
    require_callable(name, fn)
    require_tested_kernel(name, namespace_of(fn), [case for case in cases if isinstance(case, KernelCase)])
    for case in (case for case in cases if isinstance(case, TritonCase)):
        tol = TRITON_TOL[case.dtype]
        x64, g64, b64, dy64 = _rounded(case)
        y_ref, *grads_ref = layernorm_reference(x64, g64, b64, dy64, case.epsilon)
        x = input_leaf(case.x, case.dtype, case.transposed)
        gamma, beta = (input_leaf(t, case.dtype) for t in (case.gamma, case.beta))
        kept = x.detach().clone()
        kwargs = {} if case.eps is None else {"eps": case.eps}
        y = run_student(name, fn, x, gamma, beta, **kwargs)
        alts = []
        if x.ndim != 2:
            alts.append(Alternative("shape", "y has the shape of the rows, (n_rows, N), not the shape of x.",
                                    y_ref.reshape(-1, x.shape[-1])))
        if case.eps is not None:
            alts.append(Alternative("wrong-values", f"{name} ignores its eps argument: it was called with "
                                    f"eps={case.eps:g} and used {EPS:g}.", layernorm_reference(x64, g64, b64, dy64, EPS)[0]))
        failure = diagnose("y", on_host(y), y_ref, tol=tol, alternatives=alts, case=case.label, of="x")
        check_wrapper_forward(
            name, failure, case.label, transposed=case.transposed, layout="the kernels step through rows as if they "
            "were contiguous, and a reshape keeps a strided view when it can.", x=x, kept=kept,
            in_place="a forward leaves its input as it was.", y=y, function="TritonLayerNorm",
            library="torch.nn.functional.layer_norm")
        dy = case.dy.to(device(), case.dtype)  # outside the student's call: course helpers there count as delegation
        grads = run_student(name, lambda: torch.autograd.grad(y, (x, gamma, beta), dy))
        failure = _gradient_failure(grads, grads_ref, tol, case.label)
        if failure is not None:
            raise failure


WRAPPER = Runner("triton_layernorm", check_layernorm_function)
VISIBLE_FUNCTION_CASES = [  # (shape[, dtype][, options]) of x
    ((11,), {"note": "1-D"}),
    ((1, 11), {"note": "batch 1"}),
    ((7, 11), {"note": "batch 7"}),
    ((2, 3, 11), F32, {"note": "3-D"}),
    ((7, 9), {"transposed": True}),
    ((7, 6), {"eps": 0.1}),
]
triton_layernorm = visible(WRAPPER, lambda: function_cases(seeded(SEED + 5), VISIBLE_FUNCTION_CASES,
                                                          VISIBLE_KERNEL_CASES[:3]),
                           "1-D, batch 1 and 7, 3-D, a transposed view, eps; float32 and float64; gradients of x, "
                           "gamma and beta")

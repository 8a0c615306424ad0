"""Visible checks for 03_triton_fused_softmax: the two kernels, ``TritonSoftmax`` and ``triton_softmax``.

Kernels run on rows inside NaN-padded buffers with a sentinel in the output's padding (``course.kernel_spec``).
Float16 rows come last, held to about one float16 rounding of the float64 answer from the same rounded inputs; a
kernel right in float32 but outside that in float16 is ``half-accumulation``. The interpreter's ``tl.sum`` of a
float16 block adds in float32 and rounds once, so what shows on the CPU is a statistic *held* in float16 (ℓ, or
the hub s that ȳ − s then cancels); bfloat16 is not run: the interpreter cannot. ``TritonSoftmax`` and
``triton_softmax`` first check the kernels they find by name in the student's namespace, so a kernel bug is
reported as that kernel's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch

from ..autograd_graph import kept_on_ctx
from ..diagnose import (
    Alternative,
    GradingFailure,
    diagnose,
    randn,
    require_callable,
    seeded,
    vjp,
)
from ..kernel_spec import (
    F16,
    SENTINEL,
    TOL,
    Float32Only,
    FunctionSpec,
    Gradcheck,
    HalfSpacings,
    KernelSpec,
    Launch,
    ReadsPastEnd,
    RightOnFirstRows,
    Wrong,
    launch_rows,
)
from ..spec import Runner, visible
from ..triton_check import (
    check_wrapper_forward,
    device,
    input_leaf,
    is_kernel,
    namespace_of,
    pow2_at_least,
    relayed,
    run_student,
    upstream_layouts,
)

F32, F64 = torch.float32, torch.float64
HALF_OFFSET = 10.0  # ȳ = 10 + N(0, 1) on the float16 backward cases: s ≈ 10, where float16's spacing is 2⁻⁷
SEED = 303


# ---------------------------------------------------------------------------
# References: torch's softmax and its autograd, in float64


def _autograd_forward(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(F64), dim=-1)


def _autograd_backward(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return vjp(lambda x: torch.softmax(x, dim=-1), (x.to(F64),), dy.to(F64))[0]


# ---------------------------------------------------------------------------
# Named bugs


def forward_alternatives(x: torch.Tensor, block: int) -> list[Alternative]:
    """Named wrong versions of y = softmax(x) over rows, for a kernel with a ``block``-wide tile."""
    x = x.to(F64)
    n = x.shape[-1]
    m = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - m)
    alts = [
        Alternative("wrong-values", "y is not normalised: every row of a softmax sums to 1, and this one sums "
                    "to ℓ.", e),
        Alternative("wrong-values", "y is the logarithm of the softmax, not the softmax.",
                    x - m - torch.log(e.sum(dim=-1, keepdim=True))),
    ]
    if block > n:
        # A masked load that fills the tail with 0: m becomes max(m, 0) and each tail lane adds exp(0 − m) to ℓ.
        m0 = torch.clamp(m, min=0.0)
        e0 = torch.exp(x - m0)
        ell0 = e0.sum(dim=-1, keepdim=True) + (block - n) * torch.exp(-m0)
        alts.append(Alternative(
            "wrong-values",
            f"y counts the {block - n} masked-off lanes of each block in the row sum: a masked load fills them "
            "with `other` (0 when none is given), and exp(0 − m) is not 0 — each one adds to ℓ, and for a row "
            "of negative logits the fill also wins the max.", e0 / ell0))
    return alts


def backward_alternatives(y: torch.Tensor, dy: torch.Tensor) -> list[Alternative]:
    """Named wrong versions of notebook 02's softmax backward, each built around the row's one scalar."""
    y, dy = y.to(F64), dy.to(F64)
    hub = torch.einsum("...n,...n->...", y, dy).unsqueeze(-1)  # s, one per row
    dy_total = dy.sum(dim=-1, keepdim=True)
    return [
        Alternative("wrong-values", "dx leaves out the row's scalar: every input moves every output through "
                    "the normalisation, and notebook 02's hub is what collects that coupling.", y * dy),
        Alternative("wrong-values", "dx builds the row's scalar from ȳ alone: notebook 02's hub weighs each "
                    "entry of ȳ by the matching entry of y.", y * (dy - dy_total)),
        Alternative("wrong-values", "dx is missing the factor y that every entry of the softmax Jacobian "
                    "carries.", dy - hub),
        Alternative("wrong-values", "dx has y and ȳ in each other's roles: DY_ptr points to ȳ, Y_ptr to y.",
                    dy * (y - hub)),
    ]


# ---------------------------------------------------------------------------
# Kernels


@dataclass
class KernelCase:
    """One launch: inputs (float64 values, each (n_rows, n_cols)), the dtype to run in, the answer."""

    inputs: tuple[torch.Tensor, ...]
    dtype: torch.dtype
    expected: torch.Tensor
    alternatives: list[Alternative]
    large: bool = False  # logits large enough that exp overflows without the max shift
    statistic: str = ""  # what a float16 computation rounded, when not the spec's own sentence

    @property
    def out(self) -> str:
        return "y" if len(self.inputs) == 1 else "dx"


@dataclass(frozen=True)
class RowLaunch:
    """The launch of one exercise kernel, whose signature is fixed: its pointers, then their row strides, then
    n_cols; every row inside a wider buffer whose padding holds ``fill``, the output's a sentinel."""

    name: str
    pointers: tuple[str, ...]  # the inputs' pointer names, in argument order, then the output's
    result: str  # what the output is called in messages

    def __call__(self, kernel, case: KernelCase, fill: float = math.nan) -> Launch:
        rows, n = case.inputs[0].shape
        block = pow2_at_least(n)
        got, wrote, touched, strides = launch_rows(
            self.name, kernel, {f"{p}_ptr": x for p, x in zip(self.pointers, case.inputs)}, dtype=case.dtype,
            block=block, width=block, fill=fill)
        apart = ", ".join(f"{p} rows {s} apart" for p, s in zip(self.pointers, strides))
        label = f"{rows} row(s) of n_cols = {n}, BLOCK = {block}, {str(case.dtype).removeprefix('torch.')}; {apart}"
        return Launch({self.result: got}, touched, ["padding"] if wrote else [], label)


def _past_end(spec: KernelSpec, case: KernelCase, run: Launch) -> tuple[str, str]:
    n = case.inputs[0].shape[1]
    block = pow2_at_least(n)
    return (f"{spec.name} writes past the end of each row: it stores all BLOCK = {block} lanes, but a row has only "
            f"n_cols = {n}; the other {block - n} land on memory that belongs to something else (the next row, or "
            "another tensor).", f"columns ≥ {n} of each row were written (they held {SENTINEL:g} before the launch)")


def _reads_past(wrong: Wrong, again: Launch) -> str:
    n = wrong.case.inputs[0].shape[1]
    return (f"{wrong.spec.name} reads past the end of each row: lanes {n}…{pow2_at_least(n) - 1} of the block are not "
            f"part of a row of n_cols = {n}, and what they read (NaN here, as memory after a row may hold anything) "
            f"reached {wrong.out}.")


def _columns_read(wrong: Wrong, again: Launch) -> str:
    touched = "read and written" if (wrong.run.wrote or again.wrote) else "read"
    return f"columns ≥ {wrong.case.inputs[0].shape[1]} of each row were {touched}"


class Overflow:
    """Non-finite on logits past float32's exp range: the max shift is missing."""

    def __call__(self, wrong: Wrong) -> GradingFailure | None:
        if not wrong.case.large or wrong.finite:
            return None
        return GradingFailure(
            "non-finite",
            f"{wrong.out} is NaN or inf for large inputs (|x| up to {wrong.case.inputs[0].abs().max().item():.0f} "
            "here): exp overflows float32 above about 88.7, and inf / inf is NaN — the exponents tl.exp sees must stay "
            "small whatever the logits (notebook 02, Part C).", f"inputs: {wrong.run.label}")


def _row_zero_only(wrong: Wrong) -> str:
    stride_names = " and ".join(f"{p.lower()}_row_stride" for p in wrong.spec.launch.pointers)
    return (f"{wrong.out} is right on row 0 and wrong after it: each program finds its row by its distance from the "
            "start, and the rows here sit inside wider buffers, as rows of a slice do — n_cols "
            f"({wrong.case.inputs[0].shape[1]}) is not the distance between them; the row-stride arguments "
            f"({stride_names}) are.")


def _kernel_spec(name: str, pointers: tuple[str, ...], neutral: float, half: HalfSpacings, *refinements) -> KernelSpec:
    """A softmax kernel: its launch, and the refinements of a wrong value (``neutral``: padding a load cannot hurt)."""
    return KernelSpec(
        name=name, launch=RowLaunch(name, pointers, pointers[-1].lower()), reference=lambda case: {case.out: case.expected},
        alternatives=lambda case: {case.out: case.alternatives}, read_only=f"an input is read-only; store {pointers[-1].lower()} through "
        f"{pointers[-1]}_ptr.", past_end=_past_end, half=half, refinements=(
            ReadsPastEnd(neutral, _reads_past, _columns_read), *refinements,
            RightOnFirstRows(1, _row_zero_only),
            Float32Only("part of the kernel computes in float32, and the float64 gradcheck needs float64 all the way.",
                        given="a float64 input")))


PARTS = {"softmax_fwd_kernel": "Part A", "softmax_bwd_kernel": "Part B"}
# float16 spacings (at the reference) a float16 result may be off: float32 arithmetic and one rounding at the store
# give 0.5; the measured float16 computations give 1.5–2 (forward, ℓ rounded) and 25–1900 (backward).
FWD = _kernel_spec("softmax_fwd_kernel", ("X", "Y"), -math.inf, HalfSpacings(
    1.0, "the row sum ℓ (or the exponentials it adds) was rounded to float16, and every y_j = e_j / ℓ carries that "
    "rounding on top of the store's"), Overflow())
BWD = _kernel_spec("softmax_bwd_kernel", ("DY", "Y", "DX"), 0.0, HalfSpacings(
    2.0, "the hub s (or the products it adds) was held in float16: s ≈ 10 here, where float16's spacing is 2⁻⁷, and "
    "ȳ − s, of order 1, cancels the bits s kept"))


def forward_case(x: torch.Tensor, dtype: torch.dtype, large: bool = False) -> KernelCase:
    """A forward-kernel case for rows ``x`` (float64)."""
    return KernelCase((x,), dtype, _autograd_forward(x), forward_alternatives(x, pow2_at_least(x.shape[-1])), large)


def backward_case(x: torch.Tensor, dy: torch.Tensor, dtype: torch.dtype) -> KernelCase:
    """A backward-kernel case: the kernel reads the upstream gradient ``dy`` and y = softmax(x)."""
    y = torch.softmax(x, dim=-1)
    return KernelCase((dy, y), dtype, _autograd_backward(x, dy), backward_alternatives(y, dy))


def forward_cases(gen: torch.Generator, shapes: Sequence[tuple[int, int, torch.dtype]]) -> list[KernelCase]:
    """A forward case per (n_rows, n_cols, dtype), standard normal logits."""
    return [forward_case(randn(gen, rows, n), dtype) for rows, n, dtype in shapes]


def half_forward_case(gen: torch.Generator, rows: int, n: int) -> KernelCase:
    """Float16 logits of spread 3; the answer is float64 softmax of the same rounded values."""
    x = (randn(gen, rows, n) * 3).to(F16).to(F64)
    return KernelCase((x,), F16, _autograd_forward(x), [])


def half_backward_case(gen: torch.Generator, rows: int, n: int, offset: float = HALF_OFFSET) -> KernelCase:
    """Float16 y (a softmax of logits of spread 2) and ȳ = offset + N(0, 1), both rounded; the answer is torch's
    own float64 backward of those rounded values (a rounded y sums to 1 only nearly, so not autograd at x)."""
    y = torch.softmax(2 * randn(gen, rows, n), dim=-1).to(F16).to(F64)
    dy = (offset + randn(gen, rows, n)).to(F16).to(F64)
    return KernelCase((dy, y), F16, torch._softmax_backward_data(dy, y, -1, F64), [])


def large_forward_case(gen: torch.Generator, rows: int, n: int) -> KernelCase:
    """Float32 logits around 100 ± 30: exp(x) overflows float32 without the max shift."""
    return forward_case(randn(gen, rows, n) * 30 + 100, F32, large=True)


def backward_cases(gen: torch.Generator, shapes: Sequence[tuple[int, int, torch.dtype]],
                   scale: float = 1.0) -> list[KernelCase]:
    """A backward case per (n_rows, n_cols, dtype): logits of standard deviation ``scale``, a standard normal ȳ."""
    return [backward_case(randn(gen, rows, n) * scale, randn(gen, rows, n), dtype) for rows, n, dtype in shapes]


# ---------------------------------------------------------------------------
# The exercises that launch the kernels


def require_kernels(owner: str, fn) -> None:
    """Check the kernels ``owner`` launches (found by name in the namespace of ``fn``) before checking ``owner``."""
    namespace, gen = namespace_of(fn), seeded(SEED + 7)
    x, dy = randn(gen, 3, 10), randn(gen, 3, 10)
    quick = {FWD: [forward_case(x, F64)], BWD: [backward_case(x, dy, F64)]}
    for spec, cases in quick.items():
        kernel = namespace.get(spec.name)
        if kernel is None or not is_kernel(kernel):
            continue
        try:
            spec.check(kernel, cases)
        except GradingFailure as failure:
            raise relayed(failure, f"{owner} launches {spec.name}", PARTS[spec.name]) from None


@dataclass
class FunctionCase:
    """Inputs for TritonSoftmax ((n_rows, n_cols) x) and triton_softmax (any shape): x and ȳ, float64 values,
    run in ``dtype``. With ``transposed`` the input is a non-contiguous view (same values, columns adjacent in memory).
    """

    x: torch.Tensor
    dy: torch.Tensor
    dtype: torch.dtype
    transposed: bool = False
    note: str = ""

    @property
    def label(self) -> str:
        layout = ", a transposed (non-contiguous) view" if self.transposed else ""
        note = f" ({self.note})" if self.note else ""
        return f"x {tuple(self.x.shape)}, {str(self.dtype).removeprefix('torch.')}{layout}{note}"


def function_cases(gen: torch.Generator, table: Sequence[tuple]) -> list[FunctionCase]:
    """A case per (shape, dtype[, transposed, note]): standard normal x and ȳ."""
    return [FunctionCase(randn(gen, *shape), randn(gen, *shape), *rest) for shape, *rest in table]


HAND_WRITTEN = "the backward here is the kernel you wrote in Part B — the point of the exercise is a backward written by hand."


def _check_saved(case: FunctionCase, packed: list, leaves: tuple, y: torch.Tensor, label: str) -> None:
    """y saved alone, through ctx.save_for_backward."""
    x, stashed = leaves[0], kept_on_ctx(y.grad_fn)

    def what(t: torch.Tensor) -> str:
        flat = t.detach().reshape(-1)
        for tag, ref in (("y", y), ("x", x)):
            if flat.numel() == ref.numel() and torch.equal(flat.to(ref.dtype), ref.detach().reshape(-1)):
                return tag
        return f"a {tuple(t.shape)} tensor"

    if stashed:
        raise GradingFailure(
            "wrong-values",
            f"TritonSoftmax keeps the tensor(s) {', '.join('ctx.' + k for k in stashed)} on ctx as attributes: "
            "autograd checks a tensor for in-place changes before the backward only when it went through "
            "ctx.save_for_backward.", f"inputs: {label}")
    kinds = [what(t) for t in packed]
    if kinds == ["y"]:
        return
    said = f"saves {len(kinds)} tensor(s) ({', '.join(kinds)})" if kinds else "saves nothing with ctx.save_for_backward"
    raise GradingFailure(
        "wrong-values",
        f"TritonSoftmax {said} for its backward: what the backward kernel reads besides ȳ is all it needs, and "
        "every tensor saved stays alive, N elements per row, until the backward runs.",
        f"inputs: {label}")


def _function_references(case: FunctionCase) -> tuple[dict, dict]:
    return {"y": _autograd_forward(case.x)}, {"dx": _autograd_backward(case.x, case.dy)}


def _function_class_alternatives(case: FunctionCase) -> dict[str, list[Alternative]]:
    return {"y": forward_alternatives(case.x, case.x.shape[-1]),
            "dx": backward_alternatives(_autograd_forward(case.x), case.dy)}


TRITON_SOFTMAX = FunctionSpec(
    name="TritonSoftmax", leaves=lambda case: (input_leaf(case.x, case.dtype),), reference=_function_references,
    alternatives=_function_class_alternatives, no_history="return the y that forward creates, and call it as "
    "TritonSoftmax.apply(x).", hand_written=HAND_WRITTEN,
    upstream=lambda case: upstream_layouts(case.dy.to(device(), case.dtype), case.x.shape),
    layout_why="autograd may hand backward a non-contiguous ȳ (from a transpose, or an expand after .sum()), and the "
    "kernel steps along a row one element at a time, with one stride per row.", saved=_check_saved, pieces=require_kernels)


def gradcheck_case(x: torch.Tensor) -> Gradcheck:
    """torch.autograd.gradcheck of TritonSoftmax at ``x``, the last of its cases."""
    return Gradcheck((x,), f"x {tuple(x.shape)}, float64")


def _function_alternatives(x: torch.Tensor) -> list[Alternative]:
    """Named wrong versions of softmax over the last axis of ``x``: another axis, or the rows' shape."""
    alts = [Alternative("broadcast-axis", f"y is a softmax over axis {d} of x, not over the last axis: the rows are the "
                        "last dimension, and every other axis is a batch axis.", torch.softmax(x.to(F64), dim=d))
            for d in range(x.ndim - 1)]  # a softmax over an axis of size 1 is all ones: that is named too
    if x.ndim != 2:
        alts.append(Alternative(
            "shape", "y has the shape of the rows, (n_rows, N), not the shape of x: a softmax returns a tensor "
            "of its input's shape.", torch.softmax(x.to(F64), dim=-1).reshape(-1, x.shape[-1])))
    return alts


def check_softmax_function(fn, cases: Sequence[FunctionCase]) -> None:
    """Check ``fn(x)`` = softmax over the last dim of any-rank x, forward and backward, through TritonSoftmax."""
    name = "triton_softmax"
    require_callable(name, fn)
    require_kernels(name, fn)
    dev = device()
    for case in cases:
        y_ref, dx_ref = _autograd_forward(case.x), _autograd_backward(case.x, case.dy)
        tol = TOL[case.dtype]
        x = input_leaf(case.x, case.dtype, case.transposed)
        kept = x.detach().clone()
        y = run_student(name, fn, x)
        failure = diagnose("y", y, y_ref, tol=tol, alternatives=_function_alternatives(case.x), case=case.label, of="x")
        check_wrapper_forward(
            name, failure, case.label, transposed=case.transposed, layout="the kernel steps along a row one element at "
            "a time, so a row whose elements are not adjacent in memory is read wrong — and reshape keeps a view, "
            "strides and all, whenever it can.", x=x, kept=kept, in_place="write y to a new tensor.", y=y,
            function="TritonSoftmax", library="torch.softmax")
        dy = case.dy.to(dev, case.dtype)
        dx = run_student(name, lambda: torch.autograd.grad(y, x, dy)[0])
        failure = diagnose("dx", dx, dx_ref, tol=tol, alternatives=backward_alternatives(y_ref, case.dy),
                           case=case.label, of="x")
        if failure is not None:
            raise failure


WRAPPER = Runner("triton_softmax", check_softmax_function)


# ---------------------------------------------------------------------------
# The visible checks: fixed shapes, a fixed seed per exercise


# (n_rows, n_cols, dtype): batch 1 first, rows that are not a power of two.
VISIBLE_KERNEL_SHAPES = [(1, 5, F32), (7, 13, F32), (7, 13, F64)]
VISIBLE_HALF_SHAPE = (4, 1000)  # (n_rows, n_cols) of the float16 case, run last: long rows, a masked tail of 24
# (shape of x, dtype[, a transposed view?, what the label notes])
VISIBLE_CLASS_CASES = [((1, 6), F64), ((7, 13), F64), ((7, 13), F32)]
VISIBLE_FUNCTION_CASES = [
    ((9,), F64, False, "1-D"),
    ((1, 11), F64, False, "batch 1"),
    ((7, 11), F64, False, "batch 7"),
    ((2, 3, 11), F32, False, "3-D"),
    ((5, 9), F64, True, ""),
    ((2, 3000), F32, False, "long rows"),
]


def visible_kernel_cases(spec: KernelSpec) -> list:
    """The kernel's visible cases: batch 1 and 7 in float32 and float64 (the forward's large logits too), float16 last."""
    if spec is FWD:
        gen = seeded(SEED + 1)
        return (forward_cases(gen, VISIBLE_KERNEL_SHAPES) + [large_forward_case(gen, 3, 10)]
                + [half_forward_case(gen, *VISIBLE_HALF_SHAPE)])
    gen = seeded(SEED + 2)
    return backward_cases(gen, VISIBLE_KERNEL_SHAPES) + [half_backward_case(gen, *VISIBLE_HALF_SHAPE)]


softmax_fwd_kernel = visible(FWD, partial(visible_kernel_cases, FWD), "batch 1 and 7, rows of 5 and 13 in wider "
                             "buffers, float32 and float64, large logits, float16 rows of 1000 within one rounding")
softmax_bwd_kernel = visible(BWD, partial(visible_kernel_cases, BWD), "batch 1 and 7, rows of 5 and 13 in wider "
                             "buffers, float32 and float64, float16 rows of 1000 with ȳ far from zero, within one rounding")
TritonSoftmax = visible(TRITON_SOFTMAX, lambda: function_cases(seeded(SEED + 3), VISIBLE_CLASS_CASES),
                        "batch 1 and 7, float32 and float64, saves y only, ȳ contiguous or a transposed view")
triton_softmax = visible(WRAPPER, lambda: function_cases(seeded(SEED + 4), VISIBLE_FUNCTION_CASES),
                         "1-D, 2-D, 3-D, a transposed view, rows of 3000, float32 and float64, with gradients")

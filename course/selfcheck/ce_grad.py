"""Visible check for 07_fused_linear_cross_entropy, Part D: ``ce_grad_kernel``, the Triton kernel that writes a
chunk's cross-entropy gradient over its logits (Liger-Kernel's trick).

The kernel is launched as ``ce_grad_kernel[(rows,)](z, target, loss, z.stride(0), V, n, BLOCK_V=BLOCK_V)``: one
program per row of the chunk's logits Z (rows, V), which it walks BLOCK_V columns at a time. It writes the row's
share of the loss, (lse − z_target)/n, to LOSS, and overwrites the row of Z with (softmax − onehot)/n; a row whose
target is ignore_index (−100) gets 0 and a zero row. n, the counted tokens of the whole batch, comes in as a float.

The rows sit inside a wider buffer whose padding holds NaN (memory after a row may hold anything) and must stay as
it was; V is not a power of two and is larger than BLOCK_V, so the walk takes several steps. References are
autograd of ``F.cross_entropy(z, target, ignore_index=-100, reduction="sum") / n``. Then a float64 gradcheck in
torch.autograd.gradcheck's fast mode, through the kernel alone: the central difference of the loss it writes,
along a random direction, against the gradient it writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..diagnose import (
    Alternative,
    GradingFailure,
    diagnose,
    randn,
    seeded,
    vjp,
)
from ..kernel_spec import F32, F64, SENTINEL, Float32Only, Gradcheck, Guarded, KernelSpec, Launch, Wrong
from ..spec import visible
from ..triton_check import device, launch

IGNORE = -100  # F.cross_entropy's ignore_index
SEED = 20240708
OUTPUTS = ("loss", "dz")


@dataclass(frozen=True)
class KernelCase:
    """One launch: the chunk's logits z (rows, V) float64 values, its targets, the batch's count n, the dtype the
    kernel runs in, the block width, and how many columns of padding follow each row."""

    label: str
    z: torch.Tensor
    target: torch.Tensor
    n: int
    dtype: torch.dtype = F64
    block: int = 8
    pad: int = 3


def kernel_case(gen: torch.Generator, label: str, rows: int, V: int, *, ignored: int = 0, extra: int = 0,
                dtype: torch.dtype = F64, block: int = 8, scale: float = 1.0) -> KernelCase:
    """A chunk of ``rows`` rows of V logits (standard normal times ``scale``), ``ignored`` of its targets −100;
    n counts its own targets plus ``extra`` counted tokens of other chunks of the batch."""
    z = randn(gen, rows, V) * scale
    target = torch.randint(0, V, (rows,), generator=gen)
    target[torch.randint(0, rows, (1,), generator=gen)] = V - 1  # the last class, where an off-by-one hides
    target[torch.randperm(rows, generator=gen)[:ignored]] = IGNORE
    n = int((target != IGNORE).sum()) + extra
    return KernelCase(label, z, target, n, dtype, block)


def reference(z: torch.Tensor, target: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(each row's share of the loss (rows,), the gradient (rows, V)) by autograd of F.cross_entropy."""
    losses = F.cross_entropy(z, target, ignore_index=IGNORE, reduction="none") / n
    dz = vjp(lambda z: F.cross_entropy(z, target, ignore_index=IGNORE, reduction="sum") / n, (z,), None)[0]
    return losses, dz


def alternatives(case: KernelCase) -> dict[str, list[Alternative]]:
    """The named bugs: the onehot left out, the ignored rows given a gradient (a 1/n left out and a flipped sign are
    named by ``diagnose`` itself)."""
    z, target, n = case.z, case.target, case.n
    kept = (target != IGNORE).to(F64)[:, None]
    p = torch.softmax(z, -1)
    alts = {"loss": [], "dz": [
        Alternative("wrong-values", "dz is the softmax alone, divided by n: the target's own logit also enters the "
                    "loss outside the log-sum-exp (− z_target), and its −1 at the target's column is missing.",
                    p * kept / n)]}
    if not kept.all():
        as_class_0 = target.masked_fill(target == IGNORE, 0)
        sentence = ("{out} gives the rows whose target is ignore_index (−100) a value: those tokens take no part in "
                    "the loss, so their share is 0 and their row of the gradient is zero.")
        alts["loss"].append(Alternative("wrong-values", sentence.format(out="loss"),
                                        F.cross_entropy(z, as_class_0, reduction="none") / n, "ignored"))
        for wrong in (p / n, (p - F.one_hot(as_class_0, z.shape[1])) / n):
            alts["dz"].append(Alternative("wrong-values", sentence.format(out="dz"), wrong, "ignored"))
    return alts


def launch_case(kernel, case: KernelCase, fill: float = math.nan, z: torch.Tensor | None = None) -> Launch:
    """Launch ``kernel`` on ``z`` (default: the case's) inside a buffer padded with ``fill``, the loss followed by a
    sentinel slot."""
    z = case.z if z is None else z
    rows, V = z.shape
    logits = Guarded(z, (0, case.pad), fill, case.dtype)  # rows V + pad apart
    loss = Guarded((rows,), (1,), SENTINEL, case.dtype)
    target, view = case.target.to(device()), logits.view
    touched = launch("ce_grad_kernel", lambda: kernel[(rows,)](view, target, loss.view, view.stride(0), V,
                                                                float(case.n), BLOCK_V=case.block), {"TARGET_ptr": target})
    label = (f"{case.label}: Z ({rows}, {V}) with rows {view.stride(0)} apart, BLOCK_V = {case.block}, n = {case.n}, "
             f"{str(case.dtype).removeprefix('torch.')}")
    wrote = ["padding"] if logits.spilled() or loss.spilled() else []
    return Launch({"loss": loss.got(), "dz": logits.got()}, touched, wrote, label)


def ignored_rows_only(wrong: Wrong) -> GradingFailure | None:
    """Right on the counted rows and wrong on the ignored ones: the ignore_index handling, whatever it computed."""
    ignored = wrong.case.target == IGNORE
    if wrong.failure.cls != "wrong-values" or wrong.failure.topic is not None or not ignored.any() or ignored.all():
        return None
    got, expected = wrong.got, wrong.expected[wrong.out]
    if diagnose(wrong.out, got[~ignored], expected[~ignored], tol=wrong.tol) is not None:
        return None
    return GradingFailure("wrong-values", f"{wrong.out} is right on the counted rows and wrong on the rows whose "
                          "target is ignore_index (−100): those tokens take no part in the loss — their share is 0 "
                          "and their row of the gradient is zero.", wrong.mismatch(), "ignored")


def gradcheck(kernel, case: KernelCase, eps: float = 1e-6) -> bool:
    """Fast-mode gradcheck through the kernel alone, float64: how much the loss it writes changes across a small
    step along a random direction u (from z − eps·u to z + eps·u), against what the gradient it writes predicts
    for that step, ⟨dz, step⟩; both are about 2·eps·⟨dz, u⟩, so the tolerance is scaled by the step's length."""
    u = randn(seeded(SEED), *case.z.shape)
    dz = launch_case(kernel, case).got["dz"]
    low, high = (float(launch_case(kernel, case, z=case.z + sign * eps * u).got["loss"].sum()) for sign in (-1, 1))
    span = 2 * eps  # the step's length along u
    predicted = float((dz * u).sum()) * span
    return abs((high - low) - predicted) <= span * 1e-6 + 1e-4 * abs(predicted)


def _past_end(spec: KernelSpec, case: KernelCase, run: Launch) -> tuple[str, str]:
    return (f"ce_grad_kernel writes past the end of a row: the padding after each row of V = {case.z.shape[1]} (or the "
            "slot after the last loss) changed; the last block of a row is wider than what is left of it, and its "
            "store needs the mask too.", "")


SPEC = KernelSpec(
    name="ce_grad_kernel", launch=launch_case, reference=lambda c: dict(zip(OUTPUTS, reference(c.z, c.target, c.n))),
    alternatives=alternatives, read_only="the targets are read-only.", past_end=_past_end, refinements=(
        Float32Only("is right only to about float32 precision for float64 logits: n arrives as a float32 scalar, and "
                    "a 1/n taken in float32 loses the digits float64 keeps — bring n to the logits' dtype first.",
                    classes=None, topic="float32"),
        ignored_rows_only),
    gradcheck=gradcheck, gradcheck_fails="the gradient it writes is not the derivative of the loss it writes, though "
    "each matched its reference.")


def with_gradcheck(cases: list[KernelCase], tiny: KernelCase) -> list:
    """The cases, then the float64 gradcheck on ``tiny``."""
    return [*cases, Gradcheck(tiny, tiny.label)]


def check_ce_grad_kernel(kernel, cases: list[KernelCase], tiny: KernelCase) -> None:
    SPEC.check(kernel, with_gradcheck(cases, tiny))


def visible_cases() -> tuple[list[KernelCase], KernelCase]:
    gen = seeded(SEED)
    cases = [
        kernel_case(gen, "batch 1", 1, 5, block=4),  # one row, two blocks
        kernel_case(gen, "batch 7", 7, 13, extra=4),  # n counts other chunks' tokens too
        kernel_case(gen, "batch 7, ignored targets", 7, 19, ignored=2, extra=3),
        kernel_case(gen, "batch 5, logits up to ±1000", 5, 11, scale=300.0),  # exp of the raw logits overflows
        kernel_case(gen, "batch 6, float32", 6, 21, ignored=1, dtype=F32, block=16),
    ]
    tiny = kernel_case(gen, "gradcheck", 3, 6, ignored=1, block=4)
    return cases, tiny


ce_grad_kernel = visible(SPEC, lambda: with_gradcheck(*visible_cases()), (
    "batch 1 and 7, V not a power of two walked in blocks, rows in a wider NaN-padded buffer, ignored targets, logits up "
    "to ±1000, float32 and float64, float64 gradcheck"))

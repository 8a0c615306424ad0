"""Visible checks for 08_mixed_precision_backward: ``softmax_backward_mixed``, ``layernorm_backward_mixed``,
``grad_tolerance`` and ``DynamicLossScaler`` (the kernel of Part E: ``course.selfcheck.mixed_kernel``).

A mixed-precision backward is checked three times. First on float64 rows with ȳ far from zero, where an answer off
by float32's rounding and no more names a float32 accumulator used whatever the inputs (topic ``float32``). Then in
float64 on the cases, named bugs and memory rules of notebook 02's ``softmax_backward`` and notebook 04's
``layernorm_backward``, where it must be exact, so a wrong derivation gets the diagnosis it got there. Last on
inputs rounded to bfloat16 and float16, against a float64 reference computed from the same rounded values by torch's
own backward kernels, within the course's bound for an output in that dtype whose reductions of length n ran in
float32 (:func:`bound`, with the accumulator's share scaled by how much the result cancels: :func:`condition`).
Those cases give ȳ a large common part — x̄ = y ⊙ (ȳ − s) subtracts s from every ȳᵢ, LayerNorm subtracts the row
means of γ ⊙ ȳ — so that an error of one half-precision ulp in a statistic stands out from the answer instead of
hiding in it.

A backward right in float64 and wrong in half precision is ``half-accumulation``: the check runs the same values
upcast to float32 (right there: the statistic was accumulated in the input's dtype) and walks the row length up to
name the shortest row that shows it.

``grad_tolerance`` is graded against measured errors, never against a formula: at each dtype and length probed it
must accept what correct float32 accumulation gives there and reject what half-precision accumulation gives.
``DynamicLossScaler`` is driven through fixed sequences of steps and its state compared after each one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..diagnose import (
    GradingFailure,
    call_student,
    diagnose,
    graded,
    quiet,
    relative_error,
    require_callable,
    seeded,
    where_mismatch,
)
from ..memory import RecordedCalls
from . import layernorm as ln
from . import softmax as sm

F64, F32, BF16, F16 = torch.float64, torch.float32, torch.bfloat16, torch.float16
HALF = (BF16, F16)
SEED = 20240808  # fixed: the visible checks show the same numbers on every run
OFFSET = 32.0  # the common part of ȳ in the half-precision cases, against a spread of 1
# Right in float32: the same values upcast come out this many times inside the half-precision bound (a float32
# output: inside its own bound). Not within float32's bound for a half output: ȳ's common part amplifies float32's
# rounding in ȳ − s too, by about OFFSET.
FLOAT32_MARGIN = 16
# A float64 answer off by more than float64's rounding and less than float32's was computed in float32 (the
# float64 probe's rows have ȳ's common part, so float32's rounding shows as at least ~1e-7 there).
FLOAT64_ROUNDING, FLOAT32_ROUNDING = 1e-11, 1e-3
ROW_SWEEP = (16, 64, 256, 1024, 4096)  # row lengths tried to find the shortest one that shows half accumulation

# The notebook's hint that covers each diagnosis class or topic (read by course.diagnose.hint_for). The hints:
# softmax/layernorm — 1: where the precision goes, 2: which quantities stay in float32 and the dtypes returned,
# 3: the code; grad_tolerance — 1: the two terms, 2: how each grows, 3: the rule; the scaler — 1: the state,
# 2: the transitions, 3: the code; the kernel — 1: the two walks, 2: the accumulator's dtype, 3: the code.
HINTS = {
    "softmax_backward_mixed": {"half-accumulation": 2, "dtype": 2, "float32": 2, "*": 1},
    "layernorm_backward_mixed": {"half-accumulation": 2, "dtype": 2, "float32": 2, "*": 1},
    "grad_tolerance": {"dtype": 1, "length": 2, "tight": 2, "loose": 2, "*": 3},
    "DynamicLossScaler": {"unscale": 1, "skip": 2, "growth": 2, "backoff": 2, "*": 3},
    "softmax_bwd_mixed_kernel": {"half-accumulation": 2, "float32": 2, "*": 1},
}


def name_of(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """What a reduction over inputs of ``dtype`` runs in: float64 for float64, float32 for everything else."""
    return F64 if dtype == F64 else F32


def bound(dtype: torch.dtype, n: int, condition: float = 1.0) -> float:
    """The relative error the course's checks allow an output of ``dtype`` whose reductions of length ``n`` ran in
    ``accumulator(dtype)``: one rounding of the output to ``dtype`` (machine epsilon is two unit roundoffs), plus
    the typical error of an n-term sum, which grows like √n (notebook 08, §2) — times ``condition`` when the result
    is a difference that cancels (:func:`condition`), since the accumulator's errors are measured against its terms."""
    return torch.finfo(dtype).eps + condition * math.sqrt(n) * torch.finfo(accumulator(dtype)).eps


def condition(result: torch.Tensor, terms: torch.Tensor) -> float:
    """‖terms‖ / ‖result‖ (at least 1): how much larger the magnitudes that were added and subtracted are than what
    was left — ``terms`` holds, element by element, the sum of their absolute values."""
    size = result.to(F64).norm().item()
    return max(1.0, terms.to(F64).norm().item() / size) if size > 0 else 1.0


# ---------------------------------------------------------------------------
# Half-precision cases: inputs rounded to the dtype, the reference in float64 from the same values


@dataclass(frozen=True)
class HalfCase:
    """One call: ``args`` in their dtypes, each output's float64 reference, the dtype it must come back in, and the
    length of the reductions behind it."""

    label: str
    args: tuple
    expected: tuple[torch.Tensor, ...]
    dtypes: tuple[torch.dtype, ...]
    lengths: tuple[int, ...]
    dtype: torch.dtype  # the inputs' half precision
    row_length: int  # N, the length of the reductions behind a row statistic
    conditions: tuple[float, ...]  # per output: how much its subtractions cancel (course.selfcheck.mixed_precision.condition)

    def bound(self, index: int, dtype: torch.dtype | None = None) -> float:
        """The bound of output ``index`` (in ``dtype`` in place of its own, when given)."""
        return bound(dtype or self.dtypes[index], self.lengths[index], self.conditions[index])

    def upcast(self) -> tuple:
        """The same values, every half-precision argument in float32."""
        return tuple(a.to(F32) if isinstance(a, torch.Tensor) and a.dtype in HALF else a for a in self.args)


def softmax_half_case(gen: torch.Generator, dtype: torch.dtype, rows: int, n: int, offset: float = OFFSET,
                      note: str = "") -> HalfCase:
    """y = softmax of logits of spread 2 and ȳ = offset + N(0, 1), both rounded to ``dtype``."""
    y = torch.softmax(2 * torch.randn(rows, n, generator=gen, dtype=F64), dim=-1).to(dtype)
    dy = (offset + torch.randn(rows, n, generator=gen, dtype=F64)).to(dtype)
    y64, dy64 = y.to(F64), dy.to(F64)
    expected = torch._softmax_backward_data(dy64, y64, -1, F64)  # torch's own, from these values
    s = (y64 * dy64).sum(-1, keepdim=True)
    label = (f"y and dy ({rows}, {n}) {name_of(dtype)}, dy = {offset:g} + N(0, 1)" + (f", {note}" if note else ""))
    return HalfCase(label, (y, dy), (expected,), (dtype,), (n,), dtype, n,
                    (condition(expected, y64.abs() * (dy64.abs() + s.abs())),))


def layernorm_half_case(gen: torch.Generator, dtype: torch.dtype, rows: int, n: int, offset: float = OFFSET,
                        note: str = "") -> HalfCase:
    """x = 4 + N(0, 1) and ȳ = offset + N(0, 1) rounded to ``dtype``; γ, μ and rstd in float32, μ and rstd those of
    the rounded x (ε = 1e-5), as a mixed-precision forward saves them."""
    x = (4 + torch.randn(rows, n, generator=gen, dtype=F64)).to(dtype)
    dy = (offset + torch.randn(rows, n, generator=gen, dtype=F64)).to(dtype)
    stat = accumulator(dtype)  # float32, as a mixed-precision forward saves them (float64 for float64 inputs)
    gamma = (1 + 0.05 * torch.randn(n, generator=gen, dtype=F64)).to(stat)  # near 1: γ ⊙ ȳ keeps ȳ's common part
    x64 = x.to(F64)
    mean = x64.mean(-1).to(stat)
    rstd = torch.rsqrt(x64.var(-1, unbiased=False) + ln.EPS).to(stat)
    dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(  # torch's own, from the saved statistics
        dy.to(F64), x64, [n], mean.to(F64)[:, None], rstd.to(F64)[:, None], gamma.to(F64),
        torch.zeros(n, dtype=F64), [True, True, True])
    label = (f"x and dy ({rows}, {n}) {name_of(dtype)}, x = 4 + N(0, 1), dy = {offset:g} + N(0, 1); gamma, mean "
             f"and rstd float32" + (f", {note}" if note else ""))
    dy64, r = dy.to(F64), rstd.to(F64)[:, None]
    xhat = (x64 - mean.to(F64)[:, None]) * r
    g = gamma.to(F64) * dy64  # the gradient reaching x̂
    c1, c2 = (xhat * g).mean(-1, keepdim=True), g.mean(-1, keepdim=True)
    conditions = (condition(dx, r * (g.abs() + c2.abs() + xhat.abs() * c1.abs())),
                  condition(dgamma, (dy64 * xhat).abs().sum(0)), condition(dbeta, dy64.abs().sum(0)))
    return HalfCase(label, (dy, x, gamma, mean, rstd), (dx, dgamma, dbeta), (dtype, stat, stat), (n, rows, rows),
                    dtype, n, conditions)


@dataclass(frozen=True)
class MixedExercise:
    """A mixed-precision backward: its float64 check (a notebook 02/04 exercise under this name), then the
    half-precision cases built by ``half_case(gen, dtype, rows, n)``."""

    name: str
    outputs: tuple[str, ...]
    of: tuple[str, ...]  # the input each output has the dtype of
    exact: Callable  # (fn, gen) -> None: the float64 check
    half_case: Callable[..., HalfCase]
    statistics: dict[str, str]  # output -> the statistic behind it, for the half-accumulation sentence

    def outputs_of(self, fn: Callable, case: HalfCase, args: tuple | None = None) -> tuple:
        with quiet():
            result = call_student(self.name, fn, *(case.args if args is None else args))
        if len(self.outputs) == 1:
            return (result,)
        if not isinstance(result, (tuple, list)) or len(result) != len(self.outputs):
            raise GradingFailure("shape", f"{self.name} must return {len(self.outputs)} gradients "
                                 f"({', '.join(self.outputs)}), but it returned {type(result).__name__}.")
        return tuple(result)

    def first_wrong(self, got: tuple, case: HalfCase) -> tuple | None:
        """(output, error, bound) of the first output off by more than its bound, or None."""
        for index, (out, g, e) in enumerate(zip(self.outputs, got, case.expected)):
            err = relative_error(g, e)
            if not err <= case.bound(index):
                return out, err, case.bound(index)
        return None

    def check_half(self, fn: Callable, case: HalfCase, gen_sweep: Callable[[], torch.Generator]) -> None:
        got = self.outputs_of(fn, case)
        for out, g, e, want, of in zip(self.outputs, got, case.expected, case.dtypes, self.of):
            failure = diagnose(out, g, e, tol=math.inf, case=case.label, of=of)  # shape and finiteness only
            if failure is not None:
                raise failure
            if g.dtype != want:
                raise GradingFailure("wrong-values", f"{out} comes back as {name_of(g.dtype)}, but {of} is "
                                     f"{name_of(want)}: a backward returns each gradient in the dtype of what it is "
                                     "the gradient of — the next kernel reads it in that dtype, and a float32 copy of "
                                     "an activation's gradient doubles its memory.",
                                     f"inputs: {case.label}", "dtype")
        wrong = self.first_wrong(got, case)
        if wrong is None:
            return
        out, err, limit = wrong
        index = self.outputs.index(out)
        where = where_mismatch(out, got[index], case.expected[index], case.label)
        in_f32 = relative_error(self.outputs_of(fn, case, case.upcast())[index], case.expected[index])
        length = case.lengths[index]
        dt = name_of(case.dtype)
        if in_f32 <= (limit / FLOAT32_MARGIN if case.dtypes[index] in HALF else case.bound(index, F32)):
            found = (f"{out} is right in float64 and with the same values in float32, but with {dt} inputs it is "
                     f"off by {err:.1e} against a float64 reference from the same values — {err / limit:.0f}× the "
                     f"bound {limit:.1e} for a {name_of(case.dtypes[index])} result of sums of {length} terms: "
                     f"{self.statistics[out]} is accumulated or held in {dt}.")
        else:
            found = (f"{out} is right in float64, but with {dt} inputs it is off by {err:.1e} — "
                     f"{err / limit:.0f}× the bound {limit:.1e} — and the same values in float32 are off too: "
                     f"something is rounded to half precision whatever the inputs' dtype — {self.statistics[out]} "
                     "must stay in float32.")
        if out == "dx":  # a row statistic: the row length decides
            n, e, b = self.shortest_row(fn, case, gen_sweep) or (case.row_length, err, limit)
            found += f" The shortest row that shows it: N = {n} (off by {e:.1e}, {e / b:.0f}× the bound)."
        raise GradingFailure("half-accumulation", found, where)

    def shortest_row(self, fn: Callable, failed: HalfCase, gen: Callable[[], torch.Generator]) -> tuple | None:
        """(N, error, bound) at the shortest row of ROW_SWEEP, shorter than the ``failed`` case's, whose x̄ is off by
        more than its bound; None when no shorter row shows it."""
        for n in (n for n in ROW_SWEEP if n < failed.row_length):
            case = self.half_case(gen(), failed.dtype, 8, n)
            try:
                got = self.outputs_of(fn, case)
            except GradingFailure:
                return None
            wrong = self.first_wrong(got[:1], case)
            if wrong is not None:
                return n, wrong[1], wrong[2]
        return None

    def check_float64(self, fn: Callable, gen: torch.Generator) -> None:
        """Float64 inputs must be computed in float64: an answer off by float32's rounding (and no more) says the
        accumulator was float32 whatever the inputs. Anything further off is left to the float64 check to name."""
        case = self.half_case(gen, F64, 4, 33)
        got = self.outputs_of(fn, case)
        for out, g, e in zip(self.outputs, got, case.expected):
            if not isinstance(g, torch.Tensor) or g.shape != e.shape or not bool(torch.isfinite(g).all()):
                return
            err = relative_error(g, e)
            if g.dtype == F32 or FLOAT64_ROUNDING < err < FLOAT32_ROUNDING:
                raise GradingFailure("wrong-values", f"{out} is right only to float32 precision for float64 inputs "
                                     f"(off by {err:.1e}): the accumulation dtype must be the wider of float32 and the "
                                     "inputs' dtype — float64 here, where float32 would throw digits away.",
                                     where_mismatch(out, g, e, case.label), "float32")

    def check(self, fn: Callable, gen: torch.Generator, half_shapes: Sequence[tuple],
              exact_shapes: Sequence | None = None) -> None:
        """Float64 computed in float64, the float64 check, then a half-precision case per (dtype, rows, n) of
        ``half_shapes``."""
        self.check_float64(fn, gen)
        self.exact(fn, gen, exact_shapes)
        sweep_seed = int(torch.randint(0, 2**31, (1,), generator=gen))
        for dtype, rows, n, *note in half_shapes:
            self.check_half(fn, self.half_case(gen, dtype, rows, n, note=note[0] if note else ""),
                            lambda: seeded(sweep_seed))


def _exact_softmax(fn: Callable, gen: torch.Generator, shapes: Sequence | None) -> None:
    spec = replace(sm.BACKWARD, name="softmax_backward_mixed")
    spec.check(fn, spec.cases(gen, sm.BACKWARD_SHAPES if shapes is None else shapes, sm.TRANSPOSED_SHAPE))


def no_library_backward(name: str, calls) -> None:
    """torch's own backward kernels (aten.native_layer_norm_backward, ...) are autograd's answer."""
    op = next((op for _, rec in calls for op in rec.ops if "_backward" in op and rec.ops[op]), None)
    if op:
        raise GradingFailure("autograd-in-backward", f"{name} called torch's own backward kernel {op}: that is "
                             "autograd's answer, not yours — write the gradient with ordinary tensor operations.")


def _exact_layernorm(fn: Callable, gen: torch.Generator, shapes: Sequence | None) -> None:
    spec = replace(ln.BACKWARD, name="layernorm_backward_mixed")
    recorded = RecordedCalls()
    spec.check(recorded(fn) if callable(fn) else fn, gen, shapes)
    no_library_backward(spec.name, recorded.calls)


SOFTMAX = MixedExercise("softmax_backward_mixed", ("dx",), ("y",), _exact_softmax, softmax_half_case,
                        {"dx": "the row's hub s = ⟨y, ȳ⟩"})
LAYERNORM = MixedExercise("layernorm_backward_mixed", ("dx", "dgamma", "dbeta"), ("x", "gamma", "gamma"),
                          _exact_layernorm, layernorm_half_case,
                          {"dx": "a row statistic (the row means of γ ⊙ ȳ and of γ ⊙ ȳ ⊙ x̂, or x̂ itself)",
                           "dgamma": "its sum over the rows (or the x̂ it sums)", "dbeta": "its sum over the rows"})

SOFTMAX_HALF = [(BF16, 4, 16), (F16, 4, 100), (BF16, 3, 1000), (F16, 2, 4096, "rows as long as a vocabulary block")]
LAYERNORM_HALF = [(BF16, 6, 16), (F16, 8, 100), (BF16, 512, 24, "512 rows: dgamma and dbeta sum over all of them"),
                  (F16, 3, 2048)]


@graded
def softmax_backward_mixed(fn: Callable) -> None:
    """Check ``fn(y, dy) -> dx``: exact in float64, then within the bound in bfloat16 and float16."""
    SOFTMAX.check(fn, seeded(SEED), SOFTMAX_HALF)
    print("✓ softmax_backward_mixed passes the visible checks (float64 exactly, as in notebook 02; bfloat16 and "
          "float16 rows of 16 to 4096 with ȳ far from zero, within the bound, dx in y's dtype)")


@graded
def layernorm_backward_mixed(fn: Callable) -> None:
    """Check ``fn(dy, x, gamma, mean, rstd) -> (dx, dgamma, dbeta)``: exact in float64, then within the bound."""
    LAYERNORM.check(fn, seeded(SEED + 1), LAYERNORM_HALF)
    print("✓ layernorm_backward_mixed passes the visible checks (float64 exactly, as in notebook 04; bfloat16 and "
          "float16 rows of 16 to 2048 and 512 rows, within the bound, dx in x's dtype, dgamma and dbeta in float32)")


# ---------------------------------------------------------------------------
# grad_tolerance: graded against measured errors


TOL_DTYPES = (F16, BF16, F32, F64)
TOL_LENGTHS = (16, 256, 4096, 65536, 2**20)
HALF_ROWS = 4096  # the longest half-precision row measured: past it a softmax's 1/n entries are float16 subnormals


def _sequential_sum_error(gen: torch.Generator, n: int, dtype: torch.dtype) -> float:
    """Relative error of a left-to-right sum of n positive terms accumulated in ``dtype`` (float32 or float64: numpy's
    cumsum is sequential), against math.fsum of the same values."""
    terms = torch.rand(n, generator=gen, dtype=F64).to(dtype).numpy()
    exact = math.fsum(terms.astype(np.float64))
    return abs(float(np.cumsum(terms)[-1]) - exact) / exact


def _softmax_errors(gen: torch.Generator, dtype: torch.dtype, n: int) -> tuple[float, float]:
    """On offset rows of length n in ``dtype``: the error of torch's own float32-accumulated backward rounded to
    ``dtype`` (right), and of the same with s rounded to ``dtype`` first (half accumulation)."""
    rows = max(1, min(4, 2**16 // n))
    case = softmax_half_case(gen, dtype, rows, n)
    y, dy = (a.to(F32) for a in case.args)
    right = torch._softmax_backward_data(dy, y, -1, F32).to(dtype)
    s = (y * dy).sum(-1, keepdim=True).to(dtype).to(F32)  # the hub, held in the half dtype
    half = (y * (dy - s)).to(dtype)
    return relative_error(right, case.expected[0]), relative_error(half, case.expected[0])


@dataclass(frozen=True)
class Measured:
    """At one (dtype, n): the largest error right code made, the smallest a bug made, and what each was."""

    right: float
    right_what: str
    wrong: float
    wrong_what: str


def measure(gen: torch.Generator, dtype: torch.dtype, n: int) -> Measured:
    """What a tolerance for an output of ``dtype`` with reductions of length n must accept and must reject."""
    if dtype in HALF:
        right, wrong = _softmax_errors(gen, dtype, n)
        return Measured(right, f"a softmax backward accumulated in float32 and returned in {name_of(dtype)}", wrong,
                        f"the same with the hub s held in {name_of(dtype)} (ȳ = {OFFSET:g} + N(0, 1))")
    down = F32 if dtype == F64 else BF16  # the precision a bug would round this dtype's result to
    right = _sequential_sum_error(gen, n, dtype)
    terms = torch.rand(min(n, 4096), generator=gen, dtype=F64).to(dtype)
    wrong = relative_error(terms.to(down), terms)  # the same values rounded through the lower precision
    return Measured(right, f"a left-to-right {name_of(dtype)} sum of {n:,} positive terms", wrong,
                    f"a {name_of(dtype)} result that went through {name_of(down)}")


def _tolerance(fn: Callable, dtype: torch.dtype, n: int) -> float:
    value = call_student("grad_tolerance", fn, dtype, n, forbid_autograd_use=False)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GradingFailure("wrong-values", f"grad_tolerance({name_of(dtype)}, {n}) returned a "
                             f"{type(value).__name__}; it must return a float, the largest relative error allowed.")
    if not math.isfinite(value) or value <= 0:
        raise GradingFailure("wrong-values", f"grad_tolerance({name_of(dtype)}, {n}) = {value}: a tolerance is a "
                             "positive, finite relative error.")
    return float(value)


def check_grad_tolerance(fn: Callable, gen: torch.Generator, lengths: Sequence[int] = TOL_LENGTHS) -> None:
    """The rule's shape first (it must depend on the dtype and on n, and never shrink as n grows), then, at every
    (dtype, n), above what right code measured there and below what a half-precision bug measured."""
    require_callable("grad_tolerance", fn)
    tol = {(d, n): _tolerance(fn, d, n) for d in TOL_DTYPES for n in lengths}
    short, long = lengths[0], lengths[-1]
    if len({tol[d, short] for d in TOL_DTYPES}) == 1:
        raise GradingFailure("wrong-values", f"grad_tolerance gives {tol[F32, short]:.1e} whatever the dtype: a "
                             "float32 result is about 65,000 times more precise than a bfloat16 one, so one number "
                             "is either too tight for bfloat16 or too loose for float32.", topic="dtype")
    if all(tol[d, short] == tol[d, long] for d in TOL_DTYPES):
        raise GradingFailure("wrong-values", f"grad_tolerance ignores n: it gives the same value at n = {short} and "
                             f"n = {long:,}. Every addition of a reduction rounds once, so a longer reduction ends "
                             "further from the exact sum — a rule for gradients made by reductions must grow with "
                             "their length.", topic="length")
    for d in TOL_DTYPES:
        for a, b in zip(lengths, lengths[1:]):
            if tol[d, b] < tol[d, a]:
                raise GradingFailure("wrong-values", f"grad_tolerance({name_of(d)}, n) shrinks as n grows "
                                     f"({tol[d, a]:.6g} at n = {a:,}, {tol[d, b]:.6g} at n = {b:,}): a longer "
                                     "reduction never has less rounding error.", topic="length")
    for d in TOL_DTYPES:
        for n in (n for n in lengths if d not in HALF or n <= HALF_ROWS):
            m = measure(gen, d, n)
            t = tol[d, n]
            if t < m.right:
                raise GradingFailure("wrong-values", f"grad_tolerance({name_of(d)}, {n:,}) = {t:.1e} is tighter than "
                                     f"the error right code makes there: {m.right_what} was off by {m.right:.1e}. A "
                                     "check with this tolerance fails a correct backward.", topic="tight")
            if t >= m.wrong:
                raise GradingFailure("wrong-values", f"grad_tolerance({name_of(d)}, {n:,}) = {t:.1e} is looser than "
                                     f"the error of a bug: {m.wrong_what} was off by {m.wrong:.1e}, and this tolerance "
                                     "accepts it. (An n-term sum's worst case, n·u, is a bound its typical error stays "
                                     "far below.)", topic="loose")


@graded
def grad_tolerance(fn: Callable) -> None:
    """Check ``fn(dtype, n) -> float`` against errors measured at float16, bfloat16, float32 and float64, n = 16 … 2²⁰."""
    check_grad_tolerance(fn, seeded(SEED + 2))
    print("✓ grad_tolerance passes the visible checks (it grows with n, depends on the dtype, accepts what float32 "
          "accumulation measured and rejects what half accumulation measured, for 4 dtypes and n = 16 to 2²⁰)")


# ---------------------------------------------------------------------------
# DynamicLossScaler: state transitions


@dataclass(frozen=True)
class ScalerRun:
    """A scaler built with ``options``, then ``update(found_inf)`` for each flag of ``steps`` in turn."""

    label: str
    options: dict
    steps: tuple[bool, ...]


def expected_run(run: ScalerRun) -> list[tuple[float, bool, int]]:
    """(scale after the step, whether the step is taken, finite steps in a row since the last change or inf) for
    each step: the transitions the notebook states."""
    o = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, **run.options}
    scale, streak, out = o["init_scale"], 0, []
    for found_inf in run.steps:
        if found_inf:
            scale, streak = scale * o["backoff_factor"], 0
        else:
            streak += 1
            if streak == o["growth_interval"]:
                scale, streak = scale * o["growth_factor"], 0
        out.append((scale, not found_inf, streak))
    return out


def _scale_of(scaler, when: str) -> float:
    value = getattr(scaler, "scale", None)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GradingFailure("wrong-values", f"DynamicLossScaler.scale {when} is a {type(value).__name__}; it must be "
                             "a number, what the loss is multiplied by before backward.")
    return float(value)


def _flag(method: str, value, means: str, topic: str) -> bool:
    """What a scaler method returned, as a bool (a one-element tensor's value), or a failure saying what it must be."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = bool(value.item())
    if not isinstance(value, (bool, np.bool_)):
        raise GradingFailure("wrong-values", f"DynamicLossScaler.{method} returned a {type(value).__name__}; it must "
                             f"return a bool: {means}.", topic=topic)
    return bool(value)


def _call(what: str, method: Callable, *args):
    return call_student(f"DynamicLossScaler.{what}", method, *args, forbid_autograd_use=False)


def _transition_failure(run: ScalerRun, i: int, before: float, got: float, want: float, found_inf: bool,
                        streak: int, interval: int) -> GradingFailure:
    """Say which rule step i of ``run`` broke."""
    what = f"after {'an inf/NaN' if found_inf else 'a finite'} step (step {i + 1} of: {_flags(run.steps)})"
    if found_inf:
        return GradingFailure("wrong-values", f"DynamicLossScaler.scale is {got:g} {what}; it must back off, from "
                              f"{before:g} to {want:g}: gradients that overflowed say the scale is too large.",
                              f"options: {run.options}", "backoff")
    if want > before and got == before:
        return GradingFailure("wrong-values", f"DynamicLossScaler.scale never grows: it is still {got:g} after "
                              f"{interval} finite steps in a row, where it must become {want:g}. Without growth a scale "
                              "that backed off once stays small for the rest of training, and small gradients underflow "
                              "again.", f"options: {run.options}", "growth")
    count = interval if want > before else streak
    return GradingFailure("wrong-values", f"DynamicLossScaler.scale is {got:g} {what}; it must be {want:g} — "
                          f"{count} finite step(s) in a row since the last change or inf, and it grows only when that "
                          f"count reaches growth_interval = {interval} (an inf/NaN step starts the count again).",
                          f"options: {run.options}", "growth")


def _flags(steps: Sequence[bool]) -> str:
    return " ".join("inf" if f else "ok" for f in steps)


def check_scaler_run(cls, run: ScalerRun) -> None:
    """Build the scaler, apply the steps, and compare the scale and the step decision after each."""
    scaler = call_student("DynamicLossScaler", cls, forbid_autograd_use=False, **run.options)
    want = expected_run(run)
    scale = _scale_of(scaler, "when it is made")
    init = run.options.get("init_scale", 2.0**16)
    if scale != init:
        raise GradingFailure("wrong-values", f"DynamicLossScaler.scale is {scale:g} when it is made with "
                             f"{run.options}; it must start at init_scale = {init:g}.", topic="*")
    interval = run.options.get("growth_interval", 2000)
    for i, (found_inf, (want_scale, want_step, streak)) in enumerate(zip(run.steps, want)):
        before = scale
        taken = _flag("update", _call("update", scaler.update, found_inf),
                      "whether the optimizer may take this step", "skip")
        if taken != want_step:
            if found_inf:
                raise GradingFailure("wrong-values", f"DynamicLossScaler.update(found_inf=True) returned True at step "
                                     f"{i + 1} ({_flags(run.steps)}): a step whose gradients hold inf or NaN must be "
                                     "skipped — applied, it writes inf or NaN into every weight it touches.",
                                     f"options: {run.options}", "skip")
            raise GradingFailure("wrong-values", f"DynamicLossScaler.update(found_inf=False) returned False at step "
                                 f"{i + 1} ({_flags(run.steps)}): a step with finite gradients is taken.",
                                 f"options: {run.options}", "skip")
        scale = _scale_of(scaler, f"after step {i + 1}")
        if scale != want_scale:
            raise _transition_failure(run, i, before, scale, want_scale, found_inf, streak, interval)


def _unscale_case(cls, grads: list[torch.Tensor | None], scale: float) -> tuple[bool, list]:
    scaler = call_student("DynamicLossScaler", cls, forbid_autograd_use=False, init_scale=scale)
    found = _flag("unscale_", _call("unscale_", scaler.unscale_, grads),
                  "found_inf, whether any gradient holds inf or NaN", "unscale")
    return found, grads


def check_unscale(cls, gen: torch.Generator) -> None:
    """unscale_ divides every gradient by the scale in place and says whether any is inf or NaN."""
    scale = 2.0**15
    grads = [torch.randn(5, 3, generator=gen, dtype=F64).to(F32) * scale, None,
             torch.randn(7, generator=gen, dtype=F64).to(F32) * scale]
    before = [g.clone() if g is not None else None for g in grads]
    objects = [id(g) for g in grads]
    found, after = _unscale_case(cls, grads, scale)
    if [id(g) for g in after] != objects:
        raise GradingFailure("wrong-values", "DynamicLossScaler.unscale_ replaced the list's tensors: the trailing _ "
                             "means in place — the optimizer holds these very tensors (param.grad).", topic="unscale")
    for k, (g, b) in enumerate(zip(after, before)):
        if g is None:
            continue
        failure = diagnose(f"grads[{k}]", g, b / scale, tol=1e-7, case=f"float32 gradients, scale = {scale:g}")
        if failure is not None:
            if relative_error(g, b) < 1e-7:
                raise GradingFailure("wrong-values", f"DynamicLossScaler.unscale_ left grads[{k}] as it was: it must "
                                     "divide every gradient by the scale, in place, before the optimizer reads it.",
                                     topic="unscale")
            raise GradingFailure(failure.cls, f"after unscale_: {failure.sentence} It must be the gradient divided by "
                                 "the scale.", failure.where, "unscale")
    if found:
        raise GradingFailure("wrong-values", "DynamicLossScaler.unscale_ reported inf/NaN for finite gradients.",
                             topic="unscale")
    for bad, what in ((math.inf, "inf"), (math.nan, "NaN")):
        grads = [torch.ones(4, dtype=F32), torch.ones(3, dtype=F32)]
        grads[1][2] = bad
        found, _ = _unscale_case(cls, grads, 4.0)
        if not found:
            raise GradingFailure("wrong-values", f"DynamicLossScaler.unscale_ returned False for gradients holding "
                                 f"{what}: found_inf must say so, or the step that follows writes {what} into the "
                                 "weights.", topic="skip")


SCALER_RUNS = [
    ScalerRun("growth", {"init_scale": 1024.0, "growth_interval": 3}, (False,) * 7),
    ScalerRun("backoff", {"init_scale": 256.0, "backoff_factor": 0.25, "growth_interval": 4}, (True, False, True)),
    ScalerRun("streak", {"init_scale": 8.0, "growth_factor": 4.0, "growth_interval": 3},
              (False, False, True, False, False, False, False, True, True)),
]


def check_scaler(cls, gen: torch.Generator, runs: Sequence[ScalerRun] = SCALER_RUNS) -> None:
    require_callable("DynamicLossScaler", cls)
    default = call_student("DynamicLossScaler", cls, forbid_autograd_use=False)
    if _scale_of(default, "when it is made") != 2.0**16:
        raise GradingFailure("wrong-values", f"DynamicLossScaler().scale is {_scale_of(default, 'made'):g}; by "
                             "default it starts at init_scale = 2**16 = 65536.")
    check_unscale(cls, gen)
    for run in runs:
        check_scaler_run(cls, run)


@graded
def DynamicLossScaler(cls) -> None:  # noqa: N802 — named after the exercise it checks
    """Check the scaler's default, unscale_ and the transitions of update over fixed runs of steps."""
    check_scaler(cls, seeded(SEED + 3))
    print("✓ DynamicLossScaler passes the visible checks (starts at 2**16, unscale_ in place with found_inf for inf "
          "and NaN, steps skipped on inf, back-off, growth after growth_interval finite steps in a row)")

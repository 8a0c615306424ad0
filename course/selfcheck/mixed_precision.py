"""Visible checks for 08_mixed_precision_backward: ``softmax_backward_mixed``, ``layernorm_backward_mixed``,
``grad_tolerance`` and ``DynamicLossScaler`` (the kernel of Part E: ``course.selfcheck.mixed_kernel``).

A mixed-precision backward is checked three times: on float64 rows, where an answer off by float32's rounding names a
float32 accumulator (topic ``float32``); exactly in float64, on notebook 02's or 04's cases, named bugs and memory
rules; and on inputs rounded to bfloat16 and float16, against torch's own float64 backward of the same rounded
values, with ȳ given a large common part so that one half-precision ulp in a row statistic stands out. A
half-precision answer may be off by a small multiple of what right code measures on the same values
(:func:`measured_bound`), never a formula: the formula is Part C's exercise, and the hidden checks hold it. Right in
float64 and wrong in half precision is ``half-accumulation``, told with the same values in float32 and the shortest
row that shows it. ``grad_tolerance`` is graded against measured errors; ``DynamicLossScaler`` through fixed runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..diagnose import (
    GradingFailure,
    as_outputs,
    call_student,
    diagnose,
    quiet,
    relative_error,
    require_callable,
    seeded,
    where_mismatch,
)
from ..spec import NO_LIBRARY_BACKWARD, Exercise, Runner, visible
from . import layernorm as ln
from . import softmax as sm

F64, F32, BF16, F16 = torch.float64, torch.float32, torch.bfloat16, torch.float16
HALF = (BF16, F16)
SEED = 20240808  # fixed: the visible checks show the same numbers on every run
OFFSET = 32.0  # the common part of ȳ in the half-precision cases, against a spread of 1
# A float64 answer off by more than float64's rounding and less than float32's was computed in float32 (the
# float64 probe's rows have ȳ's common part, so float32's rounding shows as at least ~1e-7 there).
FLOAT64_ROUNDING, FLOAT32_ROUNDING = 1e-11, 1e-3
ROW_SWEEP = (16, 64, 256, 1024, 4096)  # row lengths tried to find the shortest one that shows half accumulation
# What the visible checks allow, as a multiple of what right code measured on the same values. A half-precision
# output: right code's error is the output's own rounding, nearly the same for every right implementation, while a
# statistic held in half precision is several times more. A float32 output: its error is its sums', which depends on
# their order (measured: up to 2.1× torch's), while half precision is thousands of times more. Float64 outputs are held
# to float64's accuracy, as notebook 03's checks do.
HALF_MARGIN, WIDE_MARGIN, FLOAT64_TOL = 2.0, 16.0, 1e-10


def name_of(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """What a reduction over inputs of ``dtype`` runs in: float64 for float64, float32 for everything else."""
    return F64 if dtype == F64 else F32


def measured_bound(expected: torch.Tensor, right: torch.Tensor, dtype: torch.dtype) -> float:
    """What the visible checks allow an output stored in ``dtype``: a margin times the larger of the error ``right``
    (right code's float32 result on the same values) makes once stored in ``dtype``, and the error of the float64
    reference itself stored in ``dtype`` — both measured on this case (for a float32 output, half an ulp at least:
    a short float32 sum can come out exact)."""
    if dtype == F64:
        return FLOAT64_TOL
    made = max(relative_error(right.to(dtype), expected), relative_error(expected.to(dtype), expected))
    if dtype in HALF:
        return HALF_MARGIN * made
    return WIDE_MARGIN * max(made, torch.finfo(dtype).eps / 2)


# ---------------------------------------------------------------------------
# Half-precision cases: inputs rounded to the dtype, the reference in float64 from the same values


@dataclass(frozen=True)
class HalfCase:
    """One call: ``args`` in their dtypes, each output's float64 reference, what right code gives in float32 from the
    same values, the dtype each output must come back in, and the length of the reductions behind it (the first
    output's: x̄'s dtype is the inputs' and its reductions run along a row)."""

    label: str
    args: tuple
    expected: tuple[torch.Tensor, ...]
    right: tuple[torch.Tensor, ...]  # torch's own backward kernel in float32 (float64 for float64 inputs)
    dtypes: tuple[torch.dtype, ...]
    lengths: tuple[int, ...]
    values: Callable | None = None  # what drew its float64 values (None: the visible checks'), for the row sweep

    def upcast(self) -> tuple:
        """The same values, every half-precision argument in float32."""
        return tuple(a.to(F32) if isinstance(a, torch.Tensor) and a.dtype in HALF else a for a in self.args)


# A rule for what an output may be off by: (case, output index, the dtype it is stored in) -> relative error.
Rule = Callable[[HalfCase, int, torch.dtype], float]


def measured(case: HalfCase, index: int, dtype: torch.dtype) -> float:
    """The visible checks' rule: :func:`measured_bound` of the output."""
    return measured_bound(case.expected[index], case.right[index], dtype)


def _softmax_values(gen: torch.Generator, rows: int, n: int, offset: float) -> tuple:
    y = torch.softmax(2 * torch.randn(rows, n, generator=gen, dtype=F64), dim=-1)
    return y, offset + torch.randn(rows, n, generator=gen, dtype=F64), f"dy = {offset:g} + N(0, 1)"


def _layernorm_values(gen: torch.Generator, rows: int, n: int, offset: float) -> tuple:
    x = 4 + torch.randn(rows, n, generator=gen, dtype=F64)
    return x, offset + torch.randn(rows, n, generator=gen, dtype=F64), f"x = 4 + N(0, 1), dy = {offset:g} + N(0, 1)"


def softmax_half_case(gen: torch.Generator, dtype: torch.dtype, rows: int, n: int, offset: float = OFFSET,
                      note: str = "", values: Callable | None = None) -> HalfCase:
    """y and ȳ of ``values(gen, rows, n)`` (by default the softmax of logits of spread 2 and ȳ = offset + N(0, 1)),
    both rounded to ``dtype``; the reference torch's own float64 backward of the rounded values."""
    y, dy, what = values(gen, rows, n) if values else _softmax_values(gen, rows, n, offset)
    y, dy = y.to(dtype), dy.to(dtype)
    acc = accumulator(dtype)
    expected = torch._softmax_backward_data(dy.to(F64), y.to(F64), -1, F64)  # torch's own, from these values
    right = torch._softmax_backward_data(dy.to(acc), y.to(acc), -1, acc)
    label = f"y and dy ({rows}, {n}) {name_of(dtype)}, {what}" + (f", {note}" if note else "")
    return HalfCase(label, (y, dy), (expected,), (right,), (dtype,), (n,), values)


def torch_layernorm_backward(dy, x, mean, rstd, gamma, dtype):
    """torch's own LayerNorm backward kernel with every argument in ``dtype``: (dx, dgamma, dbeta)."""
    n = x.shape[-1]
    return torch.ops.aten.native_layer_norm_backward(
        dy.to(dtype), x.to(dtype), [n], mean.to(dtype)[:, None], rstd.to(dtype)[:, None], gamma.to(dtype),
        torch.zeros(n, dtype=dtype), [True, True, True])


def layernorm_half_case(gen: torch.Generator, dtype: torch.dtype, rows: int, n: int, offset: float = OFFSET,
                        note: str = "", values: Callable | None = None) -> HalfCase:
    """x and ȳ of ``values(gen, rows, n)`` (by default x = 4 + N(0, 1) and ȳ = offset + N(0, 1)) rounded to
    ``dtype``; γ, μ and rstd in float32, μ and rstd those of the rounded x (ε = 1e-5), as a mixed-precision forward
    saves them."""
    x, dy, what = values(gen, rows, n) if values else _layernorm_values(gen, rows, n, offset)
    x, dy = x.to(dtype), dy.to(dtype)
    stat = accumulator(dtype)  # float32, as a mixed-precision forward saves them (float64 for float64 inputs)
    gamma = (1 + 0.05 * torch.randn(n, generator=gen, dtype=F64)).to(stat)  # near 1: γ ⊙ ȳ keeps ȳ's common part
    x64 = x.to(F64)
    mean = x64.mean(-1).to(stat)
    rstd = torch.rsqrt(x64.var(-1, unbiased=False) + ln.EPS).to(stat)
    expected = torch_layernorm_backward(dy, x, mean, rstd, gamma, F64)  # torch's own, from the saved statistics
    right = torch_layernorm_backward(dy, x, mean, rstd, gamma, stat)
    label = f"x and dy ({rows}, {n}) {name_of(dtype)}, {what}; gamma, mean and rstd float32" + (
        f", {note}" if note else "")
    return HalfCase(label, (dy, x, gamma, mean, rstd), tuple(expected), tuple(right), (dtype, stat, stat),
                    (n, rows, rows), values)


@dataclass(frozen=True)
class MixedExercise:
    """A mixed-precision backward: its float64 check (a notebook 02/04 exercise under this name), then the
    half-precision cases built by ``half_case(gen, dtype, rows, n, note=, values=)``, each output held to ``rule``."""

    name: str
    outputs: tuple[str, ...]
    of: tuple[str, ...]  # the input each output has the dtype of
    exact: Exercise  # the float64 check: a notebook 02/04 exercise under this name, with its visible shapes
    exact_shapes: Sequence
    half_case: Callable[..., HalfCase]
    statistics: dict[str, str]  # output -> the statistic behind it, for the half-accumulation sentence
    rule: Rule = measured  # the hidden checks replace it with notebook 08 Part C's rule

    def bound(self, case: HalfCase, index: int, dtype: torch.dtype | None = None) -> float:
        """What output ``index`` of ``case`` may be off by, stored in its own dtype (or in ``dtype``)."""
        return self.rule(case, index, dtype or case.dtypes[index])

    def outputs_of(self, fn: Callable, case: HalfCase, args: tuple | None = None) -> tuple:
        with quiet():
            return as_outputs(self.name, call_student(self.name, fn, *(case.args if args is None else args)),
                              self.outputs)

    def first_wrong(self, got: tuple, case: HalfCase) -> tuple | None:
        """(output, error, bound) of the first output off by more than its bound, or None."""
        for index, (out, g, e) in enumerate(zip(self.outputs, got, case.expected)):
            err, limit = relative_error(g, e), self.bound(case, index)
            if not err <= limit:
                return out, err, limit
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
        dt = name_of(case.dtypes[0])
        if in_f32 <= self.bound(case, index, F32):
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
            n, e, b = self.shortest_row(fn, case, gen_sweep) or (case.lengths[0], err, limit)
            found += f" The shortest row that shows it: N = {n} (off by {e:.1e}, {e / b:.0f}× the bound)."
        raise GradingFailure("half-accumulation", found, where)

    def shortest_row(self, fn: Callable, failed: HalfCase, gen: Callable[[], torch.Generator]) -> tuple | None:
        """(N, error, bound) at the shortest row of ROW_SWEEP, shorter than the ``failed`` case's, whose x̄ is off by
        more than its bound; None when no shorter row shows it."""
        for n in (n for n in ROW_SWEEP if n < failed.lengths[0]):
            case = self.half_case(gen(), failed.dtypes[0], 8, n, values=failed.values)
            try:
                got = self.outputs_of(fn, case)
            except GradingFailure:
                return None
            wrong = self.first_wrong(got[:1], case)
            if wrong is not None:
                return n, wrong[1], wrong[2]
        return None

    def check_float64(self, fn: Callable, case: HalfCase) -> None:
        """Float64 inputs must be computed in float64: an answer off by float32's rounding (and no more) says the
        accumulator was float32 whatever the inputs. Anything further off is left to the float64 check to name."""
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

    def cases(self, gen: torch.Generator, table: Sequence[tuple], exact: Sequence | None = None,
              values: Callable | None = None) -> MixedCases:
        """A half-precision case per (dtype, rows, n[, note]) of ``table``, after the float64 probe, the float64
        check's cases (on its visible shapes unless ``exact`` are given) and the row sweep's seed; ``values(gen, k)``
        gives what draws the values of each of the k half-precision cases (the first draws the probe's too)."""
        makers = values(gen, len(table)) if values else [None] * len(table)
        probe = self.half_case(gen, F64, 4, 33, values=makers[0])
        exact_cases = self.exact.cases(gen, self.exact_shapes if exact is None else exact)
        sweep_seed = int(torch.randint(0, 2**31, (1,), generator=gen))
        half = [self.half_case(gen, dtype, rows, n, note=note[0] if note else "", values=make)
                for (dtype, rows, n, *note), make in zip(table, makers)]
        return MixedCases(probe, exact_cases, half, sweep_seed)

    def check(self, fn: Callable, cases: MixedCases, alternatives: None = None) -> None:
        """Float64 computed in float64, the float64 check, then the half-precision cases."""
        self.check_float64(fn, cases.probe)
        self.exact.check(fn, cases.exact)
        for case in cases.half:
            self.check_half(fn, case, lambda: seeded(cases.sweep_seed))


@dataclass(frozen=True)
class MixedCases:
    """What :meth:`MixedExercise.check` runs on."""

    probe: HalfCase  # float64 values, to be computed in float64
    exact: list  # the float64 check's cases
    half: list[HalfCase]
    sweep_seed: int  # the shorter rows a diagnosis tries are drawn from it


SOFTMAX = MixedExercise("softmax_backward_mixed", ("dx",), ("y",), replace(sm.BACKWARD, name="softmax_backward_mixed"),
                        sm.BACKWARD_SHAPES, softmax_half_case,
                        {"dx": "the row's hub s"})
LAYERNORM = MixedExercise("layernorm_backward_mixed", ("dx", "dgamma", "dbeta"), ("x", "gamma", "gamma"),
                          replace(ln.BACKWARD, name="layernorm_backward_mixed", properties=(NO_LIBRARY_BACKWARD,)),
                          ln.BACKWARD_SHAPES, layernorm_half_case,
                          {"dx": "a row statistic (the row means of γ ⊙ ȳ and of γ ⊙ ȳ ⊙ x̂, or x̂ itself)",
                           "dgamma": "its sum over the rows (or the x̂ it sums)", "dbeta": "its sum over the rows"})

SOFTMAX_HALF = [(BF16, 4, 16), (F16, 4, 100), (BF16, 3, 1000), (F16, 2, 4096, "rows as long as a vocabulary block")]
LAYERNORM_HALF = [(BF16, 6, 16), (F16, 8, 100), (BF16, 512, 24, "512 rows: dgamma and dbeta sum over all of them"),
                  (F16, 3, 2048)]


softmax_backward_mixed = visible(SOFTMAX, lambda: SOFTMAX.cases(seeded(SEED), SOFTMAX_HALF), "float64 exactly, as "
                                 "in notebook 02; bfloat16 and float16 rows of 16 to 4096 with ȳ far from zero, within "
                                 "2× the error of float32 accumulation on the same values, dx in y's dtype")
layernorm_backward_mixed = visible(LAYERNORM, lambda: LAYERNORM.cases(seeded(SEED + 1), LAYERNORM_HALF), "float64 "
                                   "exactly, as in notebook 04; bfloat16 and float16 rows of 16 to 2048 and 512 rows, "
                                   "within a small multiple of the error of float32 accumulation on the same values, "
                                   "dx in x's dtype, dgamma and dbeta in float32")


# ---------------------------------------------------------------------------
# grad_tolerance: graded against measured errors


TOL_DTYPES = (F16, BF16, F32, F64)
TOL_LENGTHS = (16, 256, 4096, 65536, 2**20)
HALF_ROWS = 4096  # the longest half-precision sum measured: float16 holds its partial sums up to there
CANCEL_MAX = 65536  # the longest cancelling sum measured (rows of it, so that one lucky rounding cannot hide a bug)
CANCEL_ROWS = 8
CONDITION = 64.0  # how far the cancelling sums' results are below the magnitudes they went through
LOWER = {F16: F16, BF16: BF16, F32: BF16, F64: F32}  # where a bug holds a statistic, for a result in each dtype
NP = {F16: np.float16, F32: np.float32, F64: np.float64}


def _rounded(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float64 ``values`` rounded to ``dtype``, back in float64."""
    return torch.from_numpy(values).to(dtype).to(F64).numpy()


def _sequential(terms: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Each row of float64 ``terms`` summed left to right in ``dtype`` (float32 or float64: numpy's cumsum is
    sequential), in float64."""
    return np.cumsum(terms.astype(NP[dtype]), axis=-1)[..., -1].astype(np.float64)


def _exact(terms: np.ndarray) -> np.ndarray:
    return np.array([math.fsum(row) for row in terms])


def _norm_error(got: np.ndarray, exact: np.ndarray) -> float:
    return float(np.linalg.norm(got - exact) / np.linalg.norm(exact))


def cancelling_terms(gen: torch.Generator, dtype: torch.dtype, rows: int, n: int, condition: float) -> np.ndarray:
    """(rows, n) terms rounded to ``dtype``: the first half near +1, the second near −1, so that each row's partial
    sums climb to about n/2 and come back down, to a result about ``condition`` times smaller than Σ|xᵢ|."""
    z = 0.25 * torch.randn(rows, n, generator=gen, dtype=F64).numpy()
    sign = np.where(np.arange(n) < n // 2, 1.0, -1.0)
    x = sign + z
    target = np.abs(x).sum(-1, keepdims=True) / condition
    x = x + (target - x.sum(-1, keepdims=True)) / n  # every row ends near its target
    # Each row scaled within [1, 2): its two halves' sums and its result then sit anywhere between two numbers of the
    # format, so that the roundings of the two halves do not cancel each other.
    scale = 2 ** torch.rand(rows, 1, generator=gen, dtype=F64).numpy()
    return _rounded(x * scale, dtype)


@dataclass(frozen=True)
class Measured:
    """At one (dtype, n, condition factor): the error right code made, the error a bug made (None where no bug is
    probed), and what each was."""

    condition: float
    right: float
    right_what: str
    wrong: float | None
    wrong_what: str


def condition_of(terms: np.ndarray) -> float:
    """κ = ‖Σ|xᵢ|‖ / ‖Σxᵢ‖ over the rows: the magnitudes a sum went through, against what was left."""
    return max(1.0, float(np.linalg.norm(np.abs(terms).sum(-1)) / np.linalg.norm(_exact(terms))))


def measure(gen: torch.Generator, dtype: torch.dtype, n: int) -> list[Measured]:
    """What a tolerance for an output of ``dtype`` whose sums have n terms must accept, and must reject: a sum of
    positive terms (κ = 1), and up to CANCEL_MAX a sum that cancels (κ about CONDITION)."""
    acc, low = accumulator(dtype), LOWER[dtype]
    out = []
    if dtype not in HALF or n <= HALF_ROWS:
        terms = _rounded(torch.rand(4, n, generator=gen, dtype=F64).numpy(), dtype)
        exact = _exact(terms)
        right = _norm_error(_rounded(_sequential(terms, acc), dtype), exact)
        wrong, what = None, ""
        if dtype not in HALF:  # results of this dtype (up to 4096 of them, norm-wise) rounded through the lower one
            results = terms.reshape(-1)[:4096]
            wrong = _norm_error(_rounded(_rounded(results, low), dtype), results)
            what = f"a {name_of(dtype)} result that went through {name_of(low)}"
        out.append(Measured(condition_of(terms), right, f"a left-to-right {name_of(acc)} sum of {n:,} positive "
                            f"terms, stored in {name_of(dtype)}", wrong, what))
    if n <= (HALF_ROWS if dtype in HALF else CANCEL_MAX):
        terms = cancelling_terms(gen, dtype, CANCEL_ROWS, n, CONDITION)
        exact = _exact(terms)
        kappa = condition_of(terms)
        right = _norm_error(_rounded(_sequential(terms, acc), dtype), exact)
        half = n // 2  # the bug: each half's partial sum held in the lower precision before they cancel
        held = _rounded(_sequential(terms[:, :half], acc), low) + _rounded(_sequential(terms[:, half:], acc), low)
        wrong = _norm_error(_rounded(held, dtype), exact)
        out.append(Measured(kappa, right, f"a left-to-right {name_of(acc)} sum of {n:,} terms whose partial sums "
                            f"reach about {n // 2:,} and whose result is {kappa:.0f}× smaller than Σ|xᵢ|, stored in "
                            f"{name_of(dtype)}", wrong, f"the same sum with its two halves held in {name_of(low)} "
                            "before they cancel"))
    return out


def _tolerance(fn: Callable, dtype: torch.dtype, n: int, condition: float | None = None) -> float:
    """fn(dtype, n), or fn(dtype, n, condition) when a condition factor is given."""
    args = (dtype, n) if condition is None else (dtype, n, condition)
    value = call_student("grad_tolerance", fn, *args, forbid_autograd_use=False)
    call = f"grad_tolerance({name_of(dtype)}, {n}" + ("" if condition is None else f", {condition:g}") + ")"
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GradingFailure("wrong-values", f"{call} returned a {type(value).__name__}; it must return a float, the "
                             "largest relative error allowed.")
    if not math.isfinite(value) or value <= 0:
        raise GradingFailure("wrong-values", f"{call} = {value}: a tolerance is a positive, finite relative error.")
    return float(value)


def _takes_a_condition(fn: Callable) -> None:
    try:
        inspect.signature(fn).bind(F32, 16, 1.0)
    except TypeError:
        raise GradingFailure("wrong-values", "grad_tolerance must take a third argument, condition (1.0 by default): "
                             "the factor Σ|terms| / |result| by which a reduction's result cancels.",
                             topic="condition") from None
    except ValueError:  # no signature to read (a builtin): the calls below say what is wrong
        pass


def check_grad_tolerance(fn: Callable, gen: torch.Generator, lengths: Sequence[int] = TOL_LENGTHS) -> None:
    """The rule's shape first (it must depend on the dtype, on n and on the condition factor, never shrink as either
    grows, and default to a condition of 1), then, at every (dtype, n, condition) probed, above what right code
    measured there and below what a statistic held in half precision measured."""
    require_callable("grad_tolerance", fn)
    _takes_a_condition(fn)
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
    n = lengths[2]
    by_condition = [_tolerance(fn, F32, n, c) for c in (1.0, 8.0, CONDITION)]
    if by_condition[0] != tol[F32, n]:
        raise GradingFailure("wrong-values", f"grad_tolerance(float32, {n:,}) = {tol[F32, n]:.3g} but "
                             f"grad_tolerance(float32, {n:,}, 1.0) = {by_condition[0]:.3g}: the condition factor is "
                             "1 when nothing cancels, and that is its default.", topic="condition")
    if by_condition[-1] == by_condition[0]:
        raise GradingFailure("wrong-values", f"grad_tolerance ignores condition: it gives {by_condition[0]:.3g} at "
                             f"condition 1 and at {CONDITION:g}. A sum's rounding errors are relative to the "
                             "magnitudes it went through, Σ|xᵢ|; when its result is that many times smaller, so much "
                             "larger is its error relative to the result.", topic="condition")
    if by_condition != sorted(by_condition):
        raise GradingFailure("wrong-values", "grad_tolerance(float32, n, condition) shrinks as the condition factor "
                             f"grows ({', '.join(f'{t:.3g}' for t in by_condition)} at 1, 8, {CONDITION:g}): a result "
                             "that cancels more never has less relative error.", topic="condition")
    # Every sum that does not cancel first, so that a failure on a cancelling one is the condition factor's.
    probes = [(d, n, m) for d in TOL_DTYPES for n in lengths for m in measure(gen, d, n)]
    for d, n, m in sorted(probes, key=lambda probe: probe[2].condition > 1):
        t = _tolerance(fn, d, n, m.condition)
        at = f"grad_tolerance({name_of(d)}, {n:,}, {m.condition:.1f})"
        if t < m.right:  # where κ > 1, the κ = 1 probe at this (dtype, n) passed: the condition is the bug
            raise GradingFailure("wrong-values", f"{at} = {t:.1e} is tighter than the error right code "
                                 f"makes there: {m.right_what} was off by {m.right:.1e}. A check with this "
                                 "tolerance fails a correct backward." + (
                                     " A sum's error grows with the magnitudes it went through, Σ|xᵢ|, so "
                                     "relative to a result that cancels it is that much larger."
                                     if m.condition > 1 else ""),
                                 topic="condition" if m.condition > 1 else "tight")
        if m.wrong is not None and t >= m.wrong:
            raise GradingFailure("wrong-values", f"{at} = {t:.1e} is looser than the error of a bug: "
                                 f"{m.wrong_what} was off by {m.wrong:.1e}, and this tolerance accepts it." + (
                                     " A cancellation multiplies the error of the sum, not the one rounding "
                                     "of the stored result." if m.condition > 1 else
                                     " (An n-term sum's worst case, n·u, is a bound its typical error stays "
                                     "far below.)"),
                                 topic="condition" if m.condition > 1 else "loose")


grad_tolerance = visible(Runner("grad_tolerance", check_grad_tolerance), lambda: seeded(SEED + 2), "it grows with "
                         "n and with the condition factor, depends on the dtype, accepts what float32 accumulation "
                         "measured and rejects what a statistic held in half precision measured, for 4 dtypes, n = 16 "
                         "to 2²⁰ and condition factors 1 and about 64")


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


DynamicLossScaler = visible(Runner("DynamicLossScaler", check_scaler), lambda: seeded(SEED + 3), "starts at 2**16, "  # noqa: N816
                            "unscale_ in place with found_inf for inf and NaN, steps skipped on inf, back-off, growth "
                            "after growth_interval finite steps in a row")

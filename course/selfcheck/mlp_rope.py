"""Visible checks for 11_mlp_and_rope: the MLP's activations (GELU, SwiGLU) and rotary embeddings, in PyTorch and
as Triton kernels.

The three PyTorch functions run on float64 tensors of 3 and 4 dimensions, batch 1 first; their references are
torch's autograd of ``F.gelu``, of ``F.silu(a) * b`` and of a rotation written here. The named bugs are the ones a
derivation makes: GELU's two forms exchanged or its product rule half done, ā and b̄ swapped or silu' taken of the
wrong tensor, RoPE turned by +θ in the backward (``transpose``) or with the other layout's pairs.

The kernels run as the notebook's launchers launch them, on views inside buffers padded with NaN (inputs) or a
sentinel (outputs) past each row; F and D/2 are never a power of two, so the last block of a row has lanes past
its end. ``swiglu_bwd_kernel`` runs in float64, float32 and float16: a float16 result must be what float32
arithmetic and one rounding at the store give; ``rope_kernel`` forward and backward in both layouts, float64 and
float32. Last, a float64 gradcheck through each kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from ..diagnose import Alternative, Case, GradingFailure, randn, seeded, vjp
from ..gradcheck import directional_derivative
from ..kernel_spec import SENTINEL, TOL, Float32Only, Gradcheck, Guarded, KernelSpec, Launch, ReadsPastEnd, float16_spacings
from ..spec import Exercise, visible
from ..triton_check import launch, pow2_at_least

F16, F32, F64 = torch.float16, torch.float32, torch.float64
SEED = 1111
GELU, SWIGLU, SWIGLU_KERNEL, ROPE, ROPE_KERNEL = (
    "gelu_backward", "swiglu_backward", "swiglu_bwd_kernel", "rope_backward", "rope_kernel")
HALF_SPACINGS = 1.0  # float32 arithmetic and one rounding at the store give at most 0.5 float16 spacings


def _as_is(failure: GradingFailure, *_) -> GradingFailure:
    """Elementwise functions have no batch axis to sum over: a failure is read as it is."""
    return failure


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---------------------------------------------------------------------------
# Part A: GELU


def gelu_reference(x: torch.Tensor, dy: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return vjp(lambda t: F.gelu(t, approximate=approximate), (x,), dy)[0]


def _gelu_pieces(x: torch.Tensor, approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two terms of gelu'(x) by the product rule: (the CDF-like factor, x times its derivative)."""
    if approximate == "none":
        return torch.special.ndtr(x), x * torch.exp(-x.square() / 2) / math.sqrt(2 * math.pi)
    c = math.sqrt(2 / math.pi)
    th = torch.tanh(c * (x + 0.044715 * x.pow(3)))
    return (1 + th) / 2, x * (1 - th.square()) * c * (1 + 0.134145 * x.square()) / 2


def gelu_alternatives(case: Case) -> dict[str, list[Alternative]]:
    x, dy = case.args
    form = case.kwargs.get("approximate", "none")
    other = "none" if form == "tanh" else "tanh"
    names = {"none": "the exact (erf) GELU", "tanh": "the tanh approximation"}
    cdf, term = _gelu_pieces(x, form)
    density = torch.exp(-x.square() / 2) / math.sqrt(2 * math.pi)
    return {"dx": [
        Alternative("wrong-values", f"dx is the derivative of {names[other]}, but approximate={form!r} asks for "
                    f"{names[form]}'s: the two forms differ by about 10⁻³, and each has its own derivative.",
                    gelu_reference(x, dy, other), "form"),
        Alternative("wrong-values", "dx has only the first term of the product rule: gelu(x) is x times a factor "
                    "that depends on x, so x̄ also holds x times that factor's derivative.", dy * cdf, "product"),
        Alternative("wrong-values", "dx has only the second term of the product rule (x times the factor's "
                    "derivative): the factor itself, times ∂x/∂x = 1, is the first.", dy * term, "product"),
        Alternative("wrong-values", "dx is ȳ·φ(x), the derivative of Φ alone: gelu(x) = x·Φ(x) is a product, and "
                    "the product rule gives two terms.", dy * density, "product"),
    ]}


def gelu_cases(gen: torch.Generator, rows: list[tuple]) -> list[Case]:
    """A case per (label, shape, approximate or None for the default): x of spread 2 (the tails matter), ȳ."""
    cases = []
    for label, shape, form in rows:
        x, dy = 2 * randn(gen, *shape), randn(gen, *shape)
        kwargs = {} if form is None else {"approximate": form}
        said = "approximate left out" if form is None else f"approximate={form!r}"
        cases.append(Case(f"x, dy {tuple(shape)}, {said}, float64; {label}", (x, dy), shape[0], kwargs))
    return cases


GELU_SPEC = Exercise(name=GELU, reference=gelu_reference, outputs=("dx",), of=("x",), tol=TOL[F64],
                     alternatives=gelu_alternatives, refine=_as_is)


# ---------------------------------------------------------------------------
# Part B: SwiGLU, and the named bugs Part C shares


def swiglu_reference(a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return vjp(lambda a, b: F.silu(a) * b, (a, b), dh)


def _silu_slope(t: torch.Tensor) -> torch.Tensor:
    """silu'(t), by autograd: the checker's own, from whatever tensor it is handed."""
    return vjp(F.silu, (t,), torch.ones_like(t))[0]


def swiglu_alternatives(a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor) -> dict[str, list[Alternative]]:
    """The named bugs of ā and b̄ (float64 values of the same a, b, h̄)."""
    da, db = swiglu_reference(a, b, dh)
    s, h = torch.sigmoid(a), F.silu(a) * b
    wrong_tensor = "da takes silu' of {what}: the derivative of silu(a) is taken at a, the gate's pre-activation."
    return {
        "da": [
            Alternative("wrong-values", "da and db are swapped: da holds what belongs in db. Which factor of h does "
                        "a enter, and which does b?", db, "swapped"),
            Alternative("wrong-values", wrong_tensor.format(what="h = silu(a) ⊙ b, the output"),
                        dh * b * _silu_slope(h), "wrong-tensor"),
            Alternative("wrong-values", wrong_tensor.format(what="silu(a), the activation"),
                        dh * b * _silu_slope(F.silu(a)), "wrong-tensor"),
            Alternative("wrong-values", wrong_tensor.format(what="h in one of its places"), dh * b * s * (1 + h * (1 - s)),
                        "wrong-tensor"),
            Alternative("wrong-values", "da uses σ(a) for silu'(a): silu(a) = a·σ(a) is a product, and its derivative "
                        "has a second term, a·σ'(a).", dh * b * s, "derivative"),
            Alternative("wrong-values", "da uses σ'(a) = σ(a)(1 − σ(a)) for silu'(a): that is the sigmoid's "
                        "derivative; silu(a) = a·σ(a) is a product.", dh * b * s * (1 - s), "derivative"),
        ],
        "db": [
            Alternative("wrong-values", "da and db are swapped: db holds what belongs in da. Which factor of h does "
                        "a enter, and which does b?", da, "swapped"),
            Alternative("wrong-values", "db is h̄ ⊙ a: what multiplies b in h is the gate's activation, not its "
                        "pre-activation a.", dh * a, "factor"),
        ],
    }


def swiglu_cases(gen: torch.Generator, rows: list[tuple]) -> list[Case]:
    """A case per (label, shape): the gate's pre-activation a of spread 2 (silu' varies there), b and h̄."""
    cases = []
    for label, shape in rows:
        a, b, dh = 2 * randn(gen, *shape), randn(gen, *shape), randn(gen, *shape)
        cases.append(Case(f"a, b, dh {tuple(shape)}, float64; {label}", (a, b, dh), shape[0]))
    return cases


SWIGLU_SPEC = Exercise(name=SWIGLU, reference=swiglu_reference, outputs=("da", "db"), of=("a", "b"), tol=TOL[F64],
                       alternatives=lambda case: swiglu_alternatives(*case.args), refine=_as_is)


# ---------------------------------------------------------------------------
# Part D: RoPE


LAYOUTS = {False: "half-split pairs (i, i + D/2), GPT-NeoX's and Llama's (interleaved=False)",
           True: "interleaved pairs (2i, 2i + 1), GPT-J's (interleaved=True)"}


def angles(T: int, D: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos θ and sin θ (T, D/2), float64, θ[t, i] = t · base^(−2i/D)."""
    theta = torch.outer(torch.arange(T, dtype=F64), base ** (-2 * torch.arange(D // 2, dtype=F64) / D))
    return theta.cos(), theta.sin()


def turned(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Each pair (p, q) of x's last axis, in the given layout, turned by θ: (p cos θ − q sin θ, p sin θ + q cos θ)."""
    D = x.shape[-1]
    index = torch.arange(D).view(-1, 2).T if interleaved else torch.arange(D).view(2, -1)  # (2, D/2): the pairs
    p, q = x[..., index[0]], x[..., index[1]]
    out = torch.empty_like(x)
    out[..., index[0]], out[..., index[1]] = cos * p - sin * q, sin * p + cos * q
    return out


def rope_reference(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    return vjp(lambda x: turned(x, cos, sin, interleaved), (dy,), dy)[0]


def rope_alternatives(dy, cos, sin, interleaved: bool, backward: bool = True) -> dict[str, list[Alternative]]:
    """The named bugs of x̄ (``backward``) or of y: the turn's direction, the other layout's pairs."""
    out, sign = ("dx", -1) if backward else ("y", 1)
    layout = LAYOUTS[interleaved]
    wrong_way = (f"{out} turns each pair by +θ, as the forward does: the Jacobian of a turn by θ is that turn R(θ), "
                 "and the VJP multiplies by its transpose R(θ)ᵀ." if backward else
                 f"{out} turns each pair by −θ, as the backward does: BACKWARD=False is the forward, rope_forward.")
    other = f"{out} turns the other layout's pairs: asked for {layout}, it turned {LAYOUTS[not interleaved]}."
    return {out: [
        Alternative("transpose", wrong_way, turned(dy, cos, -sign * sin, interleaved)),
        Alternative("wrong-values", other, turned(dy, cos, sign * sin, not interleaved), "layout"),
        Alternative("wrong-values", other, turned(dy, cos, -sign * sin, not interleaved), "layout"),
    ]}


def rope_cases(gen: torch.Generator, rows: list[tuple]) -> list[Case]:
    """A case per (label, (B, H, T, D), interleaved or None for the default): ȳ and the angles of rope_angles."""
    cases = []
    for label, shape, interleaved in rows:
        dy = randn(gen, *shape)
        cos, sin = angles(*shape[-2:])
        kwargs = {} if interleaved is None else {"interleaved": interleaved}
        said = LAYOUTS[bool(interleaved)] + ("" if interleaved is not None else ", the flag left out")
        cases.append(Case(f"dy {tuple(shape)}, cos, sin {tuple(cos.shape)}, float64, {said}; {label}",
                          (dy, cos, sin), shape[0], kwargs))
    return cases


ROPE_SPEC = Exercise(name=ROPE, reference=rope_reference, outputs=("dx",), of=("y",), tol=TOL[F64], refine=_as_is,
                     alternatives=lambda case: rope_alternatives(*case.args, case.kwargs.get("interleaved", False)))


# ---------------------------------------------------------------------------
# Part C: swiglu_bwd_kernel


@dataclass(frozen=True)
class SwigluCase:
    """a, b, h̄ (rows, F) as float64 values already rounded to ``dtype``; BLOCK columns per program."""

    note: str
    a: torch.Tensor
    b: torch.Tensor
    dh: torch.Tensor
    dtype: torch.dtype
    block: int

    @property
    def label(self) -> str:
        return (f"{self.note}: a, b, dh ({self.a.shape[0]}, {self.a.shape[1]}), {str(self.dtype).removeprefix('torch.')}"
                f", BLOCK = {self.block}")


def _row_buffers(values: list, pad: int, fill: float, dtype: torch.dtype, contiguous: bool) -> list[Guarded]:
    """(rows, n) views in buffers wider by ``pad + 2i`` columns (row strides all different), or, ``contiguous``,
    with two whole rows after them."""
    return [Guarded(v, (2, 0) if contiguous else (0, pad + 2 * i), fill, dtype) for i, v in enumerate(values)]


def launch_swiglu(kernel, case: SwigluCase, fill: float = math.nan, contiguous: bool = False) -> Launch:
    """One launch as the notebook's swiglu_bwd makes it: grid (rows, cdiv(F, BLOCK))."""
    rows, n = case.a.shape
    a, b, dh = _row_buffers([case.a, case.b, case.dh], case.block + 1, fill, case.dtype, contiguous)
    da, db = _row_buffers([(rows, n)] * 2, case.block + 2, SENTINEL, case.dtype, contiguous)
    views = [g.view for g in (a, b, dh, da, db)]
    touched = launch(SWIGLU_KERNEL, lambda: kernel[(rows, _cdiv(n, case.block))](
        *views, n, *(v.stride(0) for v in views), BLOCK=case.block), {"A_ptr": a.buf, "B_ptr": b.buf, "DH_ptr": dh.buf})
    outs = {"da": da, "db": db}
    return Launch({out: g.got() for out, g in outs.items()}, touched, [o for o, g in outs.items() if g.spilled()],
                  case.label)


@dataclass(frozen=True)
class HalfComputed:
    """A float16 launch held to HALF_SPACINGS float16 spacings of the float64 answer in both outputs. Outside it,
    the same values run in float32: wrong there is that diagnosis; right there, the arithmetic ran in float16."""

    def __call__(self, spec: KernelSpec, kernel, case: SwigluCase) -> None:
        run = spec.launch(kernel, case)
        expected = spec.reference(case)
        off = {out: float16_spacings(run.got[out], e).nan_to_num(math.inf) for out, e in expected.items()}
        worst = {out: o.max().item() for out, o in off.items()}
        if max(worst.values()) <= HALF_SPACINGS and not run.wrote and not run.touched:
            return
        spec.check_case(kernel, replace(case, dtype=F32))
        if max(worst.values()) <= HALF_SPACINGS:  # right in float32, within the bound: it wrote what it must not
            raise GradingFailure("wrong-values", f"{spec.name} wrote outside da and db, or into an input, in float16 "
                                 "only.", f"inputs: {run.label}")
        out = max(worst, key=worst.get)
        index = tuple(int(i) for i in torch.nonzero(off[out] == worst[out])[0])
        raise GradingFailure(
            "half-accumulation",
            f"{spec.name} is right on these values in float32, but its float16 {out} is off by up to "
            f"{worst[out]:.1f} float16 spacings where arithmetic in float32 and one rounding at the store give at "
            "most 0.5: some of its arithmetic ran in float16, rounding at each step. Loads and stores may keep the "
            "tensors' dtype; the arithmetic between them runs in cdtype.",
            f"first worst at {out}[{index[0]}, {index[1]}]: expected {expected[out][index].item():.6g}, got "
            f"{run.got[out][index].item():.6g}\ninputs: {run.label}")


def swiglu_gradcheck(kernel, inputs: tuple[torch.Tensor, ...], eps: float = 1e-6) -> bool:
    """Fast-mode gradcheck in float64: the derivative of ⟨h̄, silu(a) ⊙ b⟩ along a random direction of a, then
    of b, against ⟨ā, u⟩ and ⟨b̄, u⟩ from the kernel."""
    a, b, dh = inputs
    got = launch_swiglu(kernel, SwigluCase("gradcheck", a, b, dh, F64, 8), 0.0, contiguous=True).got
    gen = seeded(SEED)
    for i, out in enumerate(("da", "db")):
        u = randn(gen, *a.shape)
        along = directional_derivative(
            lambda t: (dh * F.silu(t if i == 0 else a) * (b if i == 0 else t)).sum(), (a, b)[i], u, eps)
        exact = float((got[out] * u).sum())
        if abs(along - exact) > 1e-7 + 1e-5 * abs(exact):
            return False
    return True


PAST_END = ("{name} writes past the end of a row: the columns after a row changed; the last block of a row is wider "
            "than what is left of it, and its stores need the mask too.")
READS_PAST = ("{name} reads lanes past the end of a row: what they read — NaN here, as memory past a tensor may hold "
              "anything — reached {out}.")
OWN_STRIDES = ("{name} is right on contiguous rows and wrong on these: it walks from row to row by a distance of its "
               "own instead of the row stride it is given, and here each tensor's rows sit inside a wider buffer.")


def _past_end(spec: KernelSpec, case, run: Launch) -> tuple[str, str]:
    return PAST_END.format(name=spec.name), f"changed past the rows' end: {', '.join(run.wrote)}"


def _said(sentence: str):
    """A refinement's sentence about the launch it read (ReadsPastEnd's ``sentence``)."""
    return lambda wrong, again: sentence.format(name=wrong.spec.name, out=wrong.out)


def _refinements(what: str) -> tuple:
    """Wrong on NaN padding and right on zeros; right on contiguous rows only; float32 precision for float64."""
    return (
        ReadsPastEnd(0.0, _said(READS_PAST), lambda *_: "with 0 in the padding instead of NaN, every value is right",
                     only=("non-finite", "wrong-values")),
        ReadsPastEnd(0.0, _said(OWN_STRIDES), lambda *_: "with contiguous rows, every value is right",
                     only=("non-finite", "wrong-values"), variant=(("contiguous", True),)),
        Float32Only(f"is right only to about float32 precision for float64 inputs: {what}", classes=None,
                    topic="float32", generic=True))


SWIGLU_KERNEL_SPEC = KernelSpec(
    name=SWIGLU_KERNEL, launch=launch_swiglu, reference=lambda c: dict(zip(("da", "db"), swiglu_reference(c.a, c.b, c.dh))),
    alternatives=lambda c: swiglu_alternatives(c.a, c.b, c.dh), read_only="a, b and dh are read-only; write DA and DB.",
    past_end=_past_end, half=HalfComputed(), refinements=_refinements(
        "the arithmetic runs in cdtype, float64 for float64 inputs."),
    gradcheck=swiglu_gradcheck, gradcheck_fails="the ā and b̄ it writes are not the derivative of ⟨h̄, silu(a) ⊙ b⟩.")


# ---------------------------------------------------------------------------
# Part E: rope_kernel


@dataclass(frozen=True)
class RopeCase:
    """x (B, H, T, D) as float64 values rounded to ``dtype`` (ȳ when ``backward``), the angles rounded alike."""

    note: str
    x: torch.Tensor
    dtype: torch.dtype
    interleaved: bool
    backward: bool

    @property
    def cos_sin(self) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(t.to(self.dtype).to(F64) for t in angles(*self.x.shape[-2:]))

    @property
    def label(self) -> str:
        way = "backward (x is ȳ)" if self.backward else "forward"
        return (f"{self.note}: x {tuple(self.x.shape)}, {str(self.dtype).removeprefix('torch.')}, "
                f"{LAYOUTS[self.interleaved]}, {way}")


def rope_kernel_reference(case: RopeCase) -> dict[str, torch.Tensor]:
    cos, sin = case.cos_sin
    if case.backward:
        return {"dx": rope_reference(case.x, cos, sin, case.interleaved)}
    return {"y": turned(case.x, cos, sin, case.interleaved)}


def launch_rope(kernel, case: RopeCase, fill: float = math.nan, contiguous: bool = False, x=None) -> Launch:
    """One launch as the notebook's rope_apply makes it: rows (B·H·T, D) in padded buffers, cos and sin (T, D/2)
    contiguous with a row of ``fill`` after them; ``x``: other values of the case's shape."""
    x = case.x if x is None else x
    T, D = x.shape[-2:]
    half, block = D // 2, max(16, pow2_at_least(D // 2))
    rows = x.reshape(-1, D)
    inp, = _row_buffers([rows], 2 * block + 1, fill, case.dtype, contiguous)
    out, = _row_buffers([rows.shape], 2 * block + 2, SENTINEL, case.dtype, contiguous)
    cos, sin = (Guarded(t, (1, 0), fill, case.dtype) for t in case.cos_sin)
    touched = launch(ROPE_KERNEL, lambda: kernel[(rows.shape[0],)](
        inp.view, cos.view, sin.view, out.view, T, half, inp.view.stride(0), out.view.stride(0),
        INTERLEAVED=case.interleaved, BACKWARD=case.backward, BLOCK=block),
        {"X_ptr": inp.buf, "COS_ptr": cos.buf, "SIN_ptr": sin.buf})
    name = "dx" if case.backward else "y"
    return Launch({name: out.got().reshape(x.shape)}, touched, [name] if out.spilled() else [], case.label)


def rope_gradcheck(kernel, inputs: tuple[torch.Tensor, torch.Tensor, bool], eps: float = 1e-6) -> bool:
    """Fast-mode gradcheck in float64 through the kernel alone: the derivative of ⟨ȳ, y⟩, y the kernel's forward,
    along a random direction u of x, against ⟨x̄, u⟩, x̄ its backward of ȳ."""
    x, dy, interleaved = inputs

    def case(values, backward):
        return RopeCase("gradcheck", values, F64, interleaved, backward)

    dx = launch_rope(kernel, case(dy, True), 0.0, contiguous=True).got["dx"]
    u = randn(seeded(SEED), *x.shape)
    along = directional_derivative(
        lambda t: (launch_rope(kernel, case(t, False), 0.0, contiguous=True).got["y"] * dy).sum(), x, u, eps)
    exact = float((dx * u).sum())
    return abs(along - exact) <= 1e-7 + 1e-5 * abs(exact)


def _rope_alternatives(case: RopeCase) -> dict[str, list[Alternative]]:
    return rope_alternatives(case.x, *case.cos_sin, case.interleaved, case.backward)


ROPE_KERNEL_SPEC = KernelSpec(
    name=ROPE_KERNEL, launch=launch_rope, reference=rope_kernel_reference, alternatives=_rope_alternatives,
    read_only="x, cos and sin are read-only; write Y.", past_end=_past_end,
    refinements=_refinements("the turn runs in the inputs' dtype, float64 for float64 inputs."),
    gradcheck=rope_gradcheck, gradcheck_fails="the backward it launches is not the VJP of the forward it launches.")


# ---------------------------------------------------------------------------
# The kernels' cases


def swiglu_kernel_cases(gen: torch.Generator, rows: list[tuple]) -> list:
    """A case per (note, rows, F, dtype, BLOCK); a row ("gradcheck", rows, F) runs the float64 gradcheck."""
    cases = []
    for note, n_rows, n, *rest in rows:
        dtype = rest[0] if rest else F64
        a, b, dh = ((2 * randn(gen, n_rows, n), randn(gen, n_rows, n), randn(gen, n_rows, n)))
        a, b, dh = (t.to(dtype).to(F64) for t in (a, b, dh))
        if note == "gradcheck":
            cases.append(Gradcheck((a, b, dh), f"a, b, dh ({n_rows}, {n}), float64, contiguous, BLOCK = 8"))
        else:
            cases.append(SwigluCase(note, a, b, dh, *rest))
    return cases


def rope_kernel_cases(gen: torch.Generator, rows: list[tuple]) -> list:
    """A case per (note, (B, H, T, D), dtype, interleaved, backward); a row ("gradcheck", shape, interleaved) runs
    the float64 gradcheck."""
    cases = []
    for note, shape, *rest in rows:
        if note == "gradcheck":
            layout, = rest
            cases.append(Gradcheck((randn(gen, *shape), randn(gen, *shape), layout),
                                   f"x, ȳ {tuple(shape)}, float64, {LAYOUTS[layout]}, contiguous rows"))
        else:
            cases.append(RopeCase(note, randn(gen, *shape).to(rest[0]).to(F64), *rest))
    return cases


# ---------------------------------------------------------------------------
# The visible checks


VISIBLE_GELU = [("batch 1", (1, 6, 9), None), ("batch 1", (1, 5, 7), "tanh"), ("batch 7", (7, 3, 11), "none"),
                ("batch 7", (7, 4, 5), "tanh")]
VISIBLE_SWIGLU = [("batch 1", (1, 5, 9)), ("batch 7", (7, 3, 13)), ("batch 2", (2, 4, 6))]
VISIBLE_ROPE = [("batch 1", (1, 2, 5, 6), None), ("batch 1", (1, 3, 7, 10), True), ("batch 7", (7, 2, 6, 14), False),
                ("batch 7", (7, 1, 9, 6), True)]
VISIBLE_SWIGLU_KERNEL = [  # (note, rows, F, dtype, BLOCK): F a multiple of no block
    ("batch 1", 1, 37, F64, 16),
    ("batch 7", 7, 100, F32, 32),
    ("float16", 6, 150, F16, 64),
    ("gradcheck", 2, 11),
]
VISIBLE_ROPE_KERNEL = [  # (note, (B, H, T, D), dtype, interleaved, backward): D/2 = 5, 7, 12
    ("batch 1", (1, 1, 7, 10), F64, False, False),
    ("batch 1", (1, 1, 7, 10), F64, False, True),
    ("batch 2", (2, 3, 9, 24), F32, True, False),
    ("batch 2", (2, 3, 9, 24), F64, True, True),
    ("batch 1, 3 heads", (1, 3, 5, 14), F32, False, True),
    ("gradcheck", (1, 2, 5, 6), False),
    ("gradcheck", (1, 2, 5, 6), True),
]
gelu_backward = visible(GELU_SPEC, lambda: gelu_cases(seeded(SEED + 1), VISIBLE_GELU),
                        "exact and tanh, batch 1 and 7, 3-D, float64")
swiglu_backward = visible(SWIGLU_SPEC, lambda: swiglu_cases(seeded(SEED + 2), VISIBLE_SWIGLU),
                          "batch 1, 2 and 7, 3-D, float64")
rope_backward = visible(ROPE_SPEC, lambda: rope_cases(seeded(SEED + 4), VISIBLE_ROPE),
                        "both layouts, batch 1 and 7, 4-D, D/2 odd and even, float64")
swiglu_bwd_kernel = visible(SWIGLU_KERNEL_SPEC, lambda: swiglu_kernel_cases(seeded(SEED + 3), VISIBLE_SWIGLU_KERNEL), (
    "F = 37, 100, 150 in blocks of 16 to 64, NaN-padded rows, float64, float32 and float16 (computed in float32); "
    "nothing written outside da and db; a float64 gradcheck"))
rope_kernel = visible(ROPE_KERNEL_SPEC, lambda: rope_kernel_cases(seeded(SEED + 5), VISIBLE_ROPE_KERNEL), (
    "forward and backward, both layouts, D/2 = 5, 7 and 12, NaN-padded rows, float64 and float32; nothing written "
    "outside the output; a float64 gradcheck in each layout"))

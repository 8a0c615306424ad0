"""Checks for 00_vjp_contract, visible and hidden (docs/design.md, "A lesson is a spec"): the hidden checks
(``autograder.check.vjp_contract``) run this module's code on their own random inputs.

``numerical_gradient`` is probed with a function whose central and one-sided differences are known exactly
for every step ε (:class:`CosineBowl` here, :class:`SineQuadratic` in the hidden check), so the check tells a
central difference from a one-sided one and sees whether ``eps`` is used; the student gets a plain function
that calls the probe, never the probe, whose exact differences would answer the exercise.
"""

from __future__ import annotations

import math

import torch

from ..diagnose import (
    Alternative,
    Case,
    GradingFailure,
    call_student,
    diagnose,
    labelled,
    randn,
    seeded,
    transposed_view,
    vjp,
)
from ..spec import Exercise, Runner, Spread, merged, visible

F64 = torch.float64


# ---------------------------------------------------------------------------
# numerical_gradient


class Probe:
    """A scalar function of x whose central and one-sided differences (``central(h)``, ``one_sided(h)``; −h: the
    backward difference) are exact for any step h. Each call records how many entries of the point are away from x,
    so an entry not put back is caught where it happens. What runs inside the student's call is private: public
    methods of a course class are tripwires then (``course.delegation``)."""

    def __init__(self, x: torch.Tensor, eps: float, as_float: bool = False):
        self.base = x.detach().to(F64).clone()
        self.eps = eps
        self.as_float = as_float  # f may hand back a Python float instead of a 0-d tensor
        self.moved = 0  # the most entries found away from x in one call

    def __call__(self, point: torch.Tensor) -> torch.Tensor:
        if not isinstance(point, torch.Tensor) or point.shape != self.base.shape:
            got = tuple(point.shape) if isinstance(point, torch.Tensor) else type(point).__name__
            raise ValueError(f"f takes a tensor shaped like x, {tuple(self.base.shape)}; it was given {got}")
        p = point.detach().to(F64)
        self.moved = max(self.moved, int(((p - self.base).abs() > 0.01 * self.eps).sum()))
        value = self._value(p)
        return float(value) if self.as_float else value

    def _as_function(self):
        """A plain function of one tensor that calls the probe: what the student's code receives as f."""
        def f(point):
            return self(point)
        return f


class CosineBowl(Probe):
    """The visible check's probe, f(x) = Σ cos(ωx) + ½(v·x)²: curvature everywhere, every entry coupled to every other.
    Central difference, exactly: −sin(ωx)·sin(ωh)/h + v(v·x); the quadratic's forward one is v(v·x) + h v²/2."""

    omega = 5.0

    def __init__(self, x: torch.Tensor, gen: torch.Generator, eps: float, as_float: bool = False):
        super().__init__(x, eps, as_float)
        self.v = 0.3 * randn(gen, *x.shape)

    def _value(self, p):
        return torch.cos(self.omega * p).sum() + 0.5 * (self.v * p).sum() ** 2

    def central(self, h):
        x, w = self.base, self.omega
        return -torch.sin(w * x) * (math.sin(w * h) / h) + self.v * (self.v * x).sum()

    def one_sided(self, h):
        x, w = self.base, self.omega
        return (torch.cos(w * (x + h)) - torch.cos(w * x)) / h + self.v * (self.v * x).sum() + h * self.v**2 / 2


class SineQuadratic(Probe):
    """The hidden check's probe, f(x) = Σ wᵢ sin(ωᵢxᵢ + φᵢ) + ½ x̂ᵀAx̂ (x̂ = x flattened, A symmetric), all random.
    Central difference, exactly: w cos(ωx + φ) sin(ωh)/h + A x̂; forward: w (sin(ω(x + h) + φ) − sin(ωx + φ))/h +
    A x̂ + h/2 diag(A)."""

    def __init__(self, x: torch.Tensor, gen: torch.Generator, eps: float, as_float: bool = False):
        super().__init__(x, eps, as_float)
        n, shape = self.base.numel(), self.base.shape
        self.w = 0.5 + torch.rand(shape, generator=gen, dtype=F64)  # weights in [0.5, 1.5)
        self.omega = 4.0 + 2.0 * torch.rand(shape, generator=gen, dtype=F64)  # ω in [4, 6): real curvature
        self.phi = 2 * math.pi * torch.rand(shape, generator=gen, dtype=F64)
        B = randn(gen, n, n)
        self.A = (B @ B.T) / (4 * n)  # symmetric, entries O(1/√n): couples every entry to every other

    def _value(self, p):
        q = p.reshape(-1)
        return (self.w * torch.sin(self.omega * p + self.phi)).sum() + 0.5 * q @ self.A @ q

    def _quadratic(self):
        return (self.A @ self.base.reshape(-1)).reshape(self.base.shape)

    def central(self, h):
        wave = self.w * torch.cos(self.omega * self.base + self.phi) * torch.sin(self.omega * h) / h
        return wave + self._quadratic()

    def one_sided(self, h):
        x = self.base
        wave = self.w * (torch.sin(self.omega * (x + h) + self.phi) - torch.sin(self.omega * x + self.phi)) / h
        return wave + self._quadratic() + (h / 2) * torch.diagonal(self.A).reshape(x.shape)


# (shape of x, options) of the visible check. Options: ``eps`` passed (else the default 1e-6 is
# expected), ``dtype`` of x, ``as_float`` (f returns a Python float), ``transposed`` (x non-contiguous).
NUMERICAL_GRADIENT_SHAPES = [
    ((1, 4), {}),  # batch 1
    ((7, 3), {"as_float": True}),  # batch 7; f returns a Python float
    ((2, 3, 2), {}),  # any shape: 3-D
    ((3, 2), {"eps": 1e-3}),  # eps is honoured
    ((7, 2), {"dtype": torch.float32}),  # float64 inside
    ((5, 3), {"transposed": True}),  # last, so that each earlier bug is named first: a non-contiguous x
]


def probe_cases(gen: torch.Generator, shapes, draw) -> list[tuple]:
    """(label, x, probe, eps-or-None) for each (shape, options) of ``shapes``; ``draw(x, gen, eps, as_float)``
    makes the probe (``CosineBowl``, ``SineQuadratic``) from ``gen``."""
    cases = []
    for shape, options in shapes:
        eps, dtype = options.get("eps"), options.get("dtype", F64)
        if options.get("transposed"):
            x = randn(gen, *reversed(shape)).T  # strides (1, rows): .view(-1) of a plain copy refuses it
        else:
            x = randn(gen, *shape).to(dtype)
        label = "".join([
            f"x of shape {shape}", f", eps={eps:g}" if eps else "",
            f" given in {str(dtype).removeprefix('torch.')}" if dtype != F64 else "",
            "; f returns a Python float" if options.get("as_float") else "",
            ", non-contiguous (a transpose)" if options.get("transposed") else "",
        ])
        cases.append((label, x, draw(x, gen, eps or 1e-6, options.get("as_float", False)), eps))
    return cases


def probe_alternatives(probe: Probe, eps: float) -> list[Alternative]:
    """What a forward difference, a backward difference, or an ignored eps would return."""
    alts = [
        Alternative(
            "wrong-values",
            f"numerical_gradient is a forward difference (f(x + ε) − f(x))/ε: its truncation error shrinks "
            f"only like ε, about {eps:.0e} here, where the exercise asks for one that shrinks like ε².",
            probe.one_sided(eps),
        ),
        Alternative(
            "wrong-values",
            "numerical_gradient is a backward difference (f(x) − f(x − ε))/ε: its truncation error shrinks "
            "only like ε, where the exercise asks for one that shrinks like ε².",
            probe.one_sided(-eps),
        ),
    ]
    if eps != 1e-6:
        alts.append(Alternative(
            "wrong-values",
            f"numerical_gradient ignores its eps argument: these are the right differences for a step of 1e-6, "
            f"but it was called with eps={eps:g}.",
            probe.central(1e-6),
        ))
    return alts


def _procedure(label: str, sentence: str) -> GradingFailure:
    """A right formula applied in the wrong way (its hint table's "procedure")."""
    return GradingFailure("wrong-values", sentence, f"inputs: {label}", topic="procedure")


def check_numerical_gradient(fn, cases) -> None:
    """Run ``fn`` on each (label, x, probe, eps-or-None) case; raise a diagnosis at the first problem."""
    name = "numerical_gradient"
    for label, x, probe, eps in cases:
        h = 1e-6 if eps is None else eps
        before = x.clone()
        kwargs = {} if eps is None else {"eps": eps}
        try:
            got = call_student(name, fn, probe._as_function(), x, **kwargs)
        except GradingFailure as failure:
            if failure.cls != "error":
                raise
            raise labelled(failure, label) from None  # a transposed x is the usual one
        if probe.moved > 1:
            raise _procedure(label, f"{name} called f at a point where {probe.moved} entries of x had moved at once: an "
                             "estimate of one entry must see that entry moved and every other one where it was.")
        drift = (x.to(F64) - before.to(F64)).abs() > 0.01 * h  # an ulp of rounding is not a change
        if bool(drift.any()):
            changed = tuple(drift.nonzero()[0].tolist())
            raise _procedure(label, f"{name} changed the caller's x: x[{', '.join(map(str, changed))}] was "
                             f"{before[changed].item():.10g} and is {x[changed].item():.10g} after the call, and the "
                             "caller may still need it.")
        if isinstance(got, torch.Tensor) and got.is_floating_point() and got.dtype != F64:
            raise _procedure(label, f"{name} returned a {got.dtype} tensor where the contract asks for float64: in "
                             "float32 the round-off of f(x ± ε), about 1e-7/ε, swamps the derivative.")
        # 1e-8 sits between a central difference's error at ε = 1e-6 (below 1e-9 for these probes) and a forward
        # difference's (above 1e-6).
        failure = diagnose(name, got, probe.central(h), tol=1e-8, alternatives=probe_alternatives(probe, h), case=label,
                           of="x")
        if failure is None:
            continue
        if failure.cls == "wrong-values" and x.dtype != F64 and failure.sentence.endswith("wrong values."):
            failure = GradingFailure(
                "wrong-values", f"{name} is wrong when x arrives as {x.dtype}: a step of {h:g} taken in that dtype is "
                "lost in its rounding.", failure.where, topic="procedure")
        raise failure


NUMERICAL_GRADIENT = Runner("numerical_gradient", check_numerical_gradient)
numerical_gradient = visible(NUMERICAL_GRADIENT, lambda: probe_cases(seeded(2024), NUMERICAL_GRADIENT_SHAPES, CosineBowl),
                             "shapes (1, 4), (7, 3), (2, 3, 2), a transposed x; eps honoured; x left unchanged; float64")


# ---------------------------------------------------------------------------
# relative_error


def scalar_failure(name: str, got, expected: float, alternatives: list[Alternative], label: str) -> GradingFailure | None:
    """``diagnose`` for a scalar result, where 'right up to a factor' says nothing (any two numbers are)."""
    if isinstance(got, torch.Tensor) and got.ndim > 0:
        # Say it here: one number is expected, and a tensor of numbers usually means norms along one axis.
        return GradingFailure(
            "shape",
            f"{name} must return one number (a Python float or a 0-d tensor), but it returned a tensor of shape "
            f"{tuple(got.shape)}: its norms were taken along an axis, where one number measures the whole gradient.",
            f"inputs: {label}",
        )
    failure = diagnose(name, got, torch.tensor(expected, dtype=F64), tol=1e-6, alternatives=alternatives, case=label)
    if failure is None or failure.cls not in ("scale", "sign"):
        return failure
    value = float(torch.as_tensor(got))
    if any(abs(value - alt.value.item()) <= 1e-6 * max(abs(alt.value.item()), 1e-300) for alt in alternatives):
        return failure
    return GradingFailure("wrong-values", f"{name} returned {value:.6g} where {expected:.6g} was expected.", failure.where)


def relative_error_alternatives(a: torch.Tensor, b: torch.Tensor) -> list[Alternative]:
    """The usual ways of getting the formula wrong, evaluated on (a, b)."""
    na, nb, nd = (float(torch.linalg.vector_norm(t.to(F64))) for t in (a, b, a - b))
    if max(na, nb) == 0.0:
        return []
    alts = [Alternative(
        "scale",
        "relative_error returned the absolute error ‖a − b‖: with no division by the size of the gradients, "
        "its value says how large they are instead of how well they agree.",
        torch.tensor(nd, dtype=F64),
    )]
    one_sided = "relative_error divides by only one of the norms, so relative_error(a, b) ≠ relative_error(b, a)."
    for denom, sentence in (
        (na, one_sided), (nb, one_sided),
        (min(na, nb), "relative_error divides by the smaller norm: a gradient of zeros against any other would "
                      "read infinity, where it must read 1."),
        (na + nb, "relative_error divides by ‖a‖ + ‖b‖: a flipped sign then reads 1 and a gradient of zeros ½, "
                  "where they must read 2 and 1."),
    ):
        if denom > 0:
            alts.append(Alternative("wrong-values", sentence, torch.tensor(nd / denom, dtype=F64)))
    return alts


def check_relative_error(fn, cases, *, alternatives=relative_error_alternatives) -> None:
    """Run ``fn`` on each (label, a, b, expected) case; raise a diagnosis at the first problem."""
    for label, a, b, expected in cases:
        got = call_student("relative_error", fn, a.clone(), b.clone())
        failure = scalar_failure("relative_error", got, expected, alternatives(a, b), label)
        if failure is not None:
            raise failure


def random_pair(gen: torch.Generator, *shape: int, like: float = 1.0, spread: float = 1e-3, scale: float = 1.0):
    """(a, b) of ``shape``: a random, b = like·a + spread·noise, both times ``scale``."""
    a = randn(gen, *shape)
    return scale * a, scale * (like * a + spread * randn(gen, *shape))


def _relative_error_cases() -> list[tuple]:
    """(label, a, b, expected) worked out by hand."""
    u = torch.tensor([3.0, 4.0], dtype=F64)  # ‖u‖ = 5
    w = torch.tensor([4.0, 3.0], dtype=F64)  # ‖w‖ = 5, ‖u − w‖ = √2
    ones = torch.ones(7, 2, 3, dtype=F64)
    ut, wt = (v[:, None].expand(2, 7).contiguous().T for v in (u, w))  # (7, 2): u (or w) in every row, transposed
    cases = [
        ("a = (3, 4)·1e6, b = (4, 3)·1e6", 1e6 * u, 1e6 * w, math.sqrt(2) / 5),  # the same answer at any scale,
        ("a = (3, 4)·1e-6, b = (4, 3)·1e-6", 1e-6 * u, 1e-6 * w, math.sqrt(2) / 5),  # large or tiny
        ("a = ones(7, 2, 3), b = 2·a", ones, 2 * ones, 0.5),  # any shape; batch 7
        ("a = 2·ones(7, 2, 3), b = ones(7, 2, 3)", 2 * ones, ones, 0.5),  # symmetric: the order does not matter
        ("a = (3, 4), b = (0, 0)", u, torch.zeros(2, dtype=F64), 1.0),  # one side zero
        ("a = b = zeros(7, 2)", torch.zeros(7, 2, dtype=F64), torch.zeros(7, 2, dtype=F64), 0.0),  # finite, 0
        # Non-contiguous: 1e3·(3, 4) and 1e3·(4, 3) in each of 7 rows, each the transpose of a (2, 7) tensor.
        ("a, b of shape (7, 2), non-contiguous (transposes)", 1e3 * ut, 1e3 * wt, math.sqrt(2) / 5),
    ]
    return cases


relative_error = visible(Runner("relative_error", check_relative_error), _relative_error_cases,
                         "scales 1e-6 to 1e6, symmetric, 3-D, transposed, both zero → 0")


# ---------------------------------------------------------------------------
# linear_softmax_ce_backward


def lsce_reference(x, W, b, target):
    """(x̄, W̄, b̄) by autograd through torch's own cross-entropy (mean over the rows): autograd itself, and no
    other course helper, so that a test can hand it to a check as a student's backward that calls autograd."""
    x, W, b = (t.detach().clone().requires_grad_(True) for t in (x, W, b))
    return torch.autograd.grad(torch.nn.functional.cross_entropy(x @ W + b, target), (x, W, b))


def lsce_logit_gradient(x, W, b, target):
    """z̄ = ∂L/∂z, one row per example (M, C), by autograd."""
    return vjp(lambda z: torch.nn.functional.cross_entropy(z, target), (x @ W + b,), None)[0]


def lsce_through_linear(x, W, b, dz):
    """(x̄, W̄, b̄) of z = x W + b for a given z̄, by autograd: the linear layer's part of the chain."""
    return vjp(lambda x, W, b: x @ W + b, (x, W, b), dz)


def lsce_named_bugs(case: Case) -> dict[str, list[Alternative]]:
    """The named bugs of the stage-by-stage chain, each pushed through the linear layer by autograd: the linear
    stage's scalar taken without z̄ (as if z̄ were all ones), and the head's loss taken on the logits as if they
    were log-probabilities (the softmax left out). Neither spells a formula: both are autograd of a forward."""
    x, W, b, target = case.args
    C = W.shape[1]
    unweighted = lsce_through_linear(x, W, b, torch.ones(x.shape[0], C, dtype=x.dtype))
    no_softmax = lsce_through_linear(x, W, b, vjp(
        lambda z: torch.nn.functional.nll_loss(z, target), (x @ W + b,), None)[0])
    alts: dict[str, list[Alternative]] = {}
    for name, plain, raw in zip(("dx", "dW", "db"), unweighted, no_softmax):
        alts[name] = [
            Alternative("wrong-values", f"{name} is the gradient of the sum of z = xW + b: the linear stage's scalar "
                        "must weigh each entry of z by its z̄, or it forgets what the loss wants of z.", plain,
                        topic="pullback"),
            Alternative("wrong-values", f"{name} is what a loss of the logits themselves gives (−z_t, the softmax "
                        "left out): the head is softmax and cross-entropy together.", raw, topic="head"),
        ]
    return alts


def lsce_one_sided(case: Case) -> dict[str, list[Alternative]]:
    """The chain stepped with one-sided differences (a numerical_gradient that fails Part A): its O(ε) error is
    the same whoever computes it, so a student's chain of one-sided differences lands within tolerance of this."""
    x, W, b, target = case.args
    eps = 1e-6

    def one_sided(f, t):
        t = torch.empty(t.shape, dtype=F64).copy_(t)
        grad, flat = torch.empty_like(t), t.view(-1)
        base = float(f(t))
        for i in range(flat.numel()):
            keep = flat[i].item()
            flat[i] = keep + eps
            grad.view(-1)[i] = (float(f(t)) - base) / eps
            flat[i] = keep
        return grad

    dz = one_sided(lambda z: torch.nn.functional.cross_entropy(z, target), x @ W + b)
    values = lsce_through_linear(x, W, b, dz)  # the linear stage is linear: one-sided and exact agree there
    sentence = ("is what one-sided differences give, off by their O(ε) truncation: numerical_gradient must be "
                "Part A's central difference (its own test cell names the bug).")
    return {name: [Alternative("wrong-values", f"{name} {sentence}", value, topic="one-sided")]
            for name, value in zip(("dx", "dW", "db"), values)}


def lsce_case(gen: torch.Generator, M: int, K: int, C: int, transposed: bool = False) -> Case:
    """One batch; ``transposed`` hands x and W over non-contiguous (each the transpose of a stored tensor)."""
    x = randn(gen, K, M).T if transposed else randn(gen, M, K)  # (M, K); transposed: strides (1, M)
    W = 0.5 * (randn(gen, C, K).T if transposed else randn(gen, K, C))  # (K, C); transposed: strides (1, K)
    b = 0.5 * randn(gen, C)
    target = torch.randint(0, C, (M,), generator=gen)
    shape = "square W" if K == C else "W not square"
    layout = "; x and W non-contiguous (transposes)" if transposed else ""
    return Case(f"x ({M}, {K}), W ({K}, {C}), b ({C},), target ({M},); batch {M}, {shape}{layout}", (x, W, b, target), batch=M)


def unreduced_db(case: Case) -> dict[str, list[Alternative]]:
    """Above batch 1, a db equal to z̄ itself, (M, C): the sum over the batch is missing."""
    return {} if case.batch == 1 else {"db": [Alternative(
        "batch-reduction", f"db keeps one row per example, shape {(case.batch, case.args[1].shape[1])}: b is one vector "
        "shared by every row, so its gradient has no batch axis.", lsce_logit_gradient(*case.args))]}


# tol 1e-7: the chain stepped with central differences at ε = 1e-6 is off by 4e-10 to 1e-8 at the hidden
# sizes (each loss value rounded to ~1e-16 and divided by 2ε, summed over up to M·C entries of z̄), and with
# one-sided ones by 2e-7 to 9e-7 (truncation ε·L''/2): measured over the hidden shapes, tests/autograder.
# At batch 1 a db that kept the batch axis, (1, C), looks like a keepdim: recheck_shape.
LSCE = Exercise(name="linear_softmax_ce_backward", reference=lsce_reference, outputs=("dx", "dW", "db"),
                of=("x", "W", "b"), tol=1e-7, draw=Spread(lsce_case),
                alternatives=merged(lsce_named_bugs, lsce_one_sided, unreduced_db), recheck_shape=True)


# (M, K, C, transposed) of the visible check: x (M, K), W (K, C), b (C,), target (M,).
LSCE_SHAPES = [
    (1, 2, 3, False),  # batch 1: the chain stepped through above
    (1, 4, 4, False),  # batch 1, square W: a transposed W̄ keeps its shape
    (7, 5, 3, False),  # batch 7 (prime), W not square
    (7, 4, 4, False),  # batch 7, square W
    (7, 5, 3, True),  # non-contiguous x and W
]


linear_softmax_ce_backward = visible(LSCE, lambda: LSCE.cases(seeded(2024), LSCE_SHAPES),
                                     "batch 1 and 7, square and non-square W, transposed inputs")


# ---------------------------------------------------------------------------
# sigmoid_backward


def sigmoid_reference(y, dy):
    """x̄ by autograd of torch.sigmoid at x = logit(y): the reference gives no formula away."""
    return vjp(torch.sigmoid, (torch.logit(y),), dy)[0]


def sigmoid_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """The named bugs, each autograd of a forward (no formula spelled): the derivative taken at y as if y were x,
    the derivatives of tanh and of exp written in their outputs, and the diagonal without ȳ."""
    y, dy = case.args
    return {"dx": [
        Alternative("wrong-values", "dx applies the sigmoid's derivative to y as if y were x: y is the output, "
                    "σ(x), so the derivative must be written in terms of y itself.",
                    vjp(torch.sigmoid, (y,), dy)[0], topic="through-x"),
        Alternative("wrong-values", "dx uses the derivative of tanh written in its output, not the sigmoid's: "
                    "each op has its own derivative.", vjp(torch.tanh, (torch.atanh(y),), dy)[0]),
        Alternative("wrong-values", "dx uses the derivative of exp written in its output (ȳ times y): the "
                    "sigmoid is not its own derivative.", vjp(torch.exp, (torch.log(y),), dy)[0]),
        Alternative("wrong-values", "dx is the Jacobian's diagonal alone: a VJP multiplies it by ȳ, what the rest "
                    "of the network wants of y.", vjp(torch.sigmoid, (torch.logit(y),), torch.ones_like(dy))[0],
                    topic="no-dy"),
    ]}


def sigmoid_case(gen: torch.Generator, label: str, shape: tuple, transposed: bool = False) -> Case:
    """y = σ(x) for x ~ N(0, 2²) (away from 0 and 1, where the bugs would agree with the answer) and ȳ;
    ``transposed``: both handed over as transposed views."""
    y, dy = torch.sigmoid(2 * randn(gen, *shape)), randn(gen, *shape)
    if transposed:
        y, dy = transposed_view(y), transposed_view(dy)
    return Case(f"y and dy of shape {tuple(shape)}; {label}", (y, dy), batch=shape[0] if len(shape) > 1 else 1)


SIGMOID = Exercise(name="sigmoid_backward", reference=sigmoid_reference, outputs=("dx",), of=("y",),
                   alternatives=sigmoid_alternatives, draw=Spread(sigmoid_case))
SIGMOID_SHAPES = [("batch 1", (1, 6)), ("batch 7", (7, 5)), ("3-D", (2, 3, 4)),
                  ("both non-contiguous (transposes)", (7, 6), {"transposed": True})]


sigmoid_backward = visible(SIGMOID, lambda: SIGMOID.cases(seeded(2025), SIGMOID_SHAPES),
                           "batch 1, batch 7, 3-D, transposed inputs")

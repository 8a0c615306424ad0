# %% [markdown]
# # 00 — The VJP contract
#
# A backward kernel has one job. The framework hands it $\bar y$, the gradient of the loss
# with respect to the op's output, and it must hand back $\bar x$, the gradient with
# respect to the op's input. No tape, no graph, no theory of automatic differentiation:
# one op at a time, turn the output's gradient into the input's gradient.
#
# This notebook sets up everything the later ones lean on:
#
# 1. **the bar notation** and the one rule that catches most bugs: a gradient has the shape of its input;
# 2. **backprop as a chain of vector–Jacobian products** (VJPs), with no Jacobian ever built;
# 3. **how to check a gradient numerically**: finite differences in float64, and how to read a relative error;
# 4. **one real chain** — linear → softmax → cross-entropy — stepped backward one VJP at a time,
#    with numbers: you compute every gradient of it with your own tools, and *see* the head's
#    gradient line up with the forward's own numbers (notebook 02 derives why);
# 5. **the debugging order** for a wrong backward, and why every check runs at batch 1 *and* batch 7;
# 6. **your first backward by hand**: the sigmoid's, through its output.
#
# | part | you write | points |
# |---|---|---|
# | A | `numerical_gradient(f, x, eps=1e-6)` — a finite-difference gradient, any shape | 2 |
# | B | `relative_error(a, b)` — how far apart two gradients are | 1 |
# | C | `linear_softmax_ce_backward(x, W, b, target)` — the whole chain's gradients, one VJP per stage | 3 |
# | D | `sigmoid_backward(y, dy)` — a backward derived by hand, from the saved output | 2 |
#
# Each part asks a question and leaves the derivation to you. Below each exercise sit a few
# collapsed hints — open them one at a time, only when stuck: the first asks the right
# question, the later ones work a small case or give one step; none gives the answer. Then a
# test cell. It prints `✓ ...` when your function is right; when it is wrong, its first line
# names the kind of bug (`diagnosis: transpose — ...`), the next lines say where it first went
# wrong, and the last one points to the hint that covers it. After the test cell, a collapsed
# recap derives the result: open it once your check passes.
# %%
import course

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import chain_stepper

F64 = torch.float64  # every gradient check in this course runs in float64

# %% [markdown]
# ## 1. One bar
#
# Writing $\partial L/\partial x$ for every tensor in a network makes formulas unreadable, so
# we put a bar over the tensor instead:
#
# $$\bar x \;\equiv\; \frac{\partial L}{\partial x}, \qquad \text{in code: } \texttt{dx}.$$
#
# $L$ is always one number, the loss. $\bar x$ answers: if I nudge each entry of $x$ by
# $\delta$, how does $L$ move? To first order
#
# $$L(x + \delta) \approx L(x) + \sum_i \bar x_i\, \delta_i ,$$
#
# where the sum runs over *every entry* of $x$ — so $\bar x$ has exactly one entry per entry of
# $x$. **The gradient has the shape of its input.** $\bar W$ has the shape of $W$, $\bar b$ the
# shape of $b$, whatever happened in between. A backward that returns any other shape is
# wrong before you look at a single number, which makes the shape the cheapest test you will
# ever write. PyTorch agrees — it is why `W.grad` can be subtracted from `W`. (Here and in
# notebooks 01 and 02, $B$ is the batch: the number of rows, or examples.)
# %% check-output
gen = torch.Generator().manual_seed(0)
B, K, C = 5, 3, 4  # batch, input features, outputs
x = torch.randn(B, K, generator=gen, dtype=F64)  # (B, K)
W = torch.randn(K, C, generator=gen, dtype=F64, requires_grad=True)  # (K, C)

L = torch.tanh(x @ W).sum()  # one number, as every loss is
L.backward()  # autograd fills W.grad = W̄
print("W  has shape", tuple(W.shape))
print("W̄  has shape", tuple(W.grad.shape), "<- the shape of W, always")

# %% [markdown]
# ## 2. Backprop is a chain of vector–Jacobian products
#
# Take one op $y = f(x)$ with $x \in \mathbb{R}^n$, $y \in \mathbb{R}^m$. Its Jacobian
# $J = \partial y / \partial x$ is the $m \times n$ matrix $J_{ij} = \partial y_i / \partial x_j$.
# The loss sees $x$ only through $y$, so by the chain rule
#
# $$\bar x_j = \sum_i \bar y_i \,\frac{\partial y_i}{\partial x_j}
# \qquad\Longleftrightarrow\qquad \bar x = J^\top \bar y .$$
#
# That is the entire contract of a backward: **receive $\bar y$ (shaped like $y$), return
# $\bar x = J^\top \bar y$ (shaped like $x$).** It is called a vector–Jacobian product.
# For a chain $x \to u \to v \to L$ the chain rule multiplies Jacobians,
# $\bar x = J_1^\top J_2^\top \bar v$, and backprop evaluates that product from the loss end:
# $\bar u = J_2^\top \bar v$ first, a vector, then $\bar x = J_1^\top \bar u$, another vector.
# One VJP per op, in reverse order, and never a matrix–matrix product.
#
# The Jacobian appears in the derivation and **never in the kernel**. Take $y = \tanh(x)$
# on a row of $N = 4096$: $J$ is $4096 \times 4096$, almost all zeros (only the diagonal
# $1 - y_i^2$ is not). A kernel computes the same VJP as $\bar x = \bar y \odot (1 - y^2)$,
# touching $3N$ numbers. Learning backprop for kernels is learning, op by op, how
# $J^\top \bar y$ collapses into something this cheap.
# %%
N = 5
x = torch.randn(N, generator=gen, dtype=F64)  # (N,)
y = torch.tanh(x)  # (N,)
dy = torch.randn(N, generator=gen, dtype=F64)  # ȳ: handed to us by the next op, shaped like y

J = torch.autograd.functional.jacobian(torch.tanh, x)  # (N, N): built here once, to look at
dx_dense = J.T @ dy  # x̄ = Jᵀȳ as written: read N² + N numbers
dx = dy * (1 - y**2)  # the same VJP: read 2N numbers (y, ȳ), write N, no Jacobian
print("J =\n", J.numpy().round(3))
print("largest difference between Jᵀȳ and ȳ ⊙ (1 − y²):", f"{(dx - dx_dense).abs().max().item():.1e}")

n = 4096
print(f"\nfor a row of {n}: the Jacobian has {n * n:,} entries ({n * n * 8 / 2**20:.0f} MiB in float64);")
print(f"the VJP reads and writes {3 * n:,} numbers")


# %% [markdown]
# ## 3. Checking a gradient: finite differences
#
# A hand-written backward is a claim; a numerical gradient is how you test it. Nudge one
# input, watch the loss. Taylor's theorem says how good that is:
#
# $$f(x \pm \varepsilon) = f(x) \pm \varepsilon f'(x) + \tfrac{\varepsilon^2}{2} f''(x) \pm \tfrac{\varepsilon^3}{6} f'''(x) + \dots$$
#
# The simplest estimate takes the $+$ line alone, the **forward difference**:
#
# $$\frac{f(x+\varepsilon) - f(x)}{\varepsilon} = f'(x) + \tfrac{\varepsilon}{2} f''(x) + \dots
# \qquad \text{truncation error } O(\varepsilon).$$
#
# So a smaller $\varepsilon$ is better — until round-off bites. Each $f$ is computed with a
# relative error of about $u$ (the unit round-off: $u \approx 1.1 \times 10^{-16}$ in float64,
# $6 \times 10^{-8}$ in float32), and dividing a difference by $\varepsilon$ turns that into an
# error of about $u\,|f| / \varepsilon$. Truncation falls as $\varepsilon$ shrinks, round-off
# grows, and the total is smallest where they meet: $\varepsilon |f''| / 2 \approx u |f| / \varepsilon$
# at $\varepsilon \approx \sqrt{u} \approx 10^{-8}$, with a best error of about $\sqrt{u} \approx 10^{-8}$
# (give or take the sizes of $f$ and its derivatives). The picture measures it on
# $f(x) = e^{\sin 3x}$, whose derivative $3\cos(3x)\,e^{\sin 3x}$ we know exactly.
# %%
def f(x):
    return math.exp(math.sin(3 * x))


def f_prime(x):  # exact, for measuring the error
    return 3 * math.cos(3 * x) * f(x)


x0 = 0.4
epsilons = torch.logspace(-13, -1, 49, dtype=F64)  # every quarter decade from 1e-13 to 0.1
exact = f_prime(x0)


def estimate_errors(estimate):
    """The relative error of estimate(ε) ≈ f′(x0) for every ε in `epsilons`, capped at 1 (no digit right)."""
    return [min(abs(estimate(eps) - exact) / abs(exact), 1.0) for eps in epsilons.tolist()]


forward_err = estimate_errors(lambda eps: (f(x0 + eps) - f(x0)) / eps)
course.plots.loglog(
    epsilons, {"forward, float64": forward_err},
    xlabel="step ε", ylabel="relative error of the estimate of f′(0.4)",
    title="Truncation (right) against round-off (left)", marks={"ε = 1e-6": 1e-6},
)
plt.show()
best = min(range(len(forward_err)), key=forward_err.__getitem__)
print(f"forward difference: smallest error {forward_err[best]:.0e} at ε = {epsilons[best].item():.0e}")

# %% [markdown]
# Read the picture from the right. With a large step the truncation error dominates and falls
# with slope 1 (error $\propto \varepsilon$). Further left the curve turns around and rises with
# slope −1: that is round-off, $u/\varepsilon$, jagged because rounding is. A forward difference
# never gets much below $10^{-8}$ — about eight digits, which is not enough to tell a right
# backward from one that is off in the eighth digit.
#
# The Taylor series has a second line, $f(x - \varepsilon)$, that the forward difference never
# used. Part A asks you to put it to work.
#
# ## Part A — numerical_gradient (2 points)
#
# For a scalar function $f$ of a tensor $x$ of **any shape**, estimate every entry of
# $\bar x = \partial f / \partial x$ by nudging **one entry at a time** — with $e_i$ the tensor
# that is 1 at entry $i$ and 0 elsewhere, you may evaluate $f(x + \varepsilon e_i)$ and
# $f(x - \varepsilon e_i)$ — so that the estimate's truncation error falls like
# $\varepsilon^2$, not like $\varepsilon$. Two calls of $f$ per entry, no more. Which
# combination of the Taylor lines above does that?
#
# The rules, each of which the test checks:
#
# - the result has the shape of $x$, for any number of axes (a 3-D $x$ included), and is **float64**;
# - work in float64 whatever dtype $x$ arrives in;
# - $x$ may arrive **non-contiguous** (a transposed tensor, say): handle it;
# - $f$ returns a Python `float` or a 0-d tensor — accept both (`float(...)` does);
# - move one entry at a time, and leave the caller's `x` exactly as it was;
# - use the `eps` you are given.
#
# It costs $2n$ calls of $f$ for $n$ entries, which is why gradient checks use small tensors.
# %% solution id=numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """An estimate of x̄ = ∂f/∂x, in float64, with the shape of x.

    f   : takes one tensor shaped like x and returns a scalar (a Python float or a 0-d tensor)
    x   : a tensor of any shape and layout; it is left exactly as it was
    eps : the step ε
    Returns a float64 tensor shaped like x.
    """
    ### BEGIN SOLUTION
    # Our own float64 copy, nudged in place, never the caller's x. A contiguous one: a transposed
    # x keeps its strides through .to() and .clone(), and .view(-1) refuses such a tensor.
    x = x.detach().to(torch.float64).clone(memory_format=torch.contiguous_format)
    dx = torch.zeros_like(x)  # x̄ has the shape of x
    x_flat, dx_flat = x.view(-1), dx.view(-1)  # flat views of the same memory: one loop for any shape
    for i in range(x_flat.numel()):
        x_i = x_flat[i].item()
        x_flat[i] = x_i + eps
        f_plus = float(f(x))
        x_flat[i] = x_i - eps
        f_minus = float(f(x))
        x_flat[i] = x_i  # put it back before moving on: one entry moves at a time
        dx_flat[i] = (f_plus - f_minus) / (2 * eps)  # the ε² terms cancel: truncation O(ε²)
    return dx
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what cancels?</summary>
#
# Write the Taylor series twice, once for $f(x + \varepsilon)$ and once for $f(x - \varepsilon)$,
# term by term. The terms with even powers of $\varepsilon$ have the same sign in both lines;
# the odd ones flip. Combine the two lines so that the $f(x)$ and the $\varepsilon^2$ terms
# drop out and $f'(x)$ survives. What do you have to divide by to be left with $f'(x)$ alone,
# and what is the first error term that remains?
#
# </details>
#
# <details><summary>Hint 2 — one loop for any shape</summary>
#
# Work on your own copy of `x` in float64, never on the caller's tensor. Make the copy
# **contiguous**: `.to()` and `.clone()` keep a transposed tensor's strides, and then
# `t.view(-1)` refuses it (`clone(memory_format=torch.contiguous_format)` does not keep them).
# Of a contiguous tensor, `t.view(-1)` is a flat *view*: writing `flat[i]` writes into `t`. So
# one loop over `range(t.numel())` covers every shape: remember entry $i$, set it to the
# nudged value, call `f` on the whole tensor, set it to the other nudged value, call `f` again,
# put the remembered value back, and store the estimate in entry $i$ of a float64 result of
# the same shape.
#
# </details>
#
# <details><summary>Hint 3 — a case small enough to do by hand</summary>
#
# Take $f(x) = x^2$ at $x = 1$ with $\varepsilon = 0.1$, where $f'(1) = 2$ exactly:
# $f(1.1) = 1.21$, $f(1) = 1$, $f(0.9) = 0.81$. The forward difference gives
# $(1.21 - 1)/0.1 = 2.1$, off by $\tfrac{\varepsilon}{2} f''$. Which combination of $1.21$ and
# $0.81$ alone gives exactly $2$, and what must it be divided by? Then try $f(x) = x^3$, where
# that combination is no longer exact: what is left over is the first term of the Taylor
# lines that does not cancel, and it shrinks like $\varepsilon^2$.
#
# </details>
# %% test id=test_numerical_gradient points=2
"""numerical_gradient: an error that falls like ε² (not ε), any shape and
layout, float64, eps used, x left as it was."""
course.selfcheck.numerical_gradient(numerical_gradient)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.numerical_gradient(numerical_gradient)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The central difference.** Subtract the two Taylor lines: $f(x)$ and every even power of $\varepsilon$ cancel,
#
# $$\frac{f(x+\varepsilon) - f(x-\varepsilon)}{2\varepsilon} = f'(x) + \tfrac{\varepsilon^2}{6} f'''(x) + \dots
# \qquad\Longrightarrow\qquad
# \boxed{\bar x_i \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon}}$$
#
# the **central difference**, truncation error $O(\varepsilon^2)$ for the same two calls per
# entry. Balance it against round-off as before: $\varepsilon^2 |f'''| / 6 \approx u |f| / \varepsilon$
# at $\varepsilon \approx u^{1/3} \approx 5 \times 10^{-6}$, with a best error of about
# $u^{2/3} \approx 10^{-11}$ in float64.
#
# </details>
#
# The picture below adds the central difference, in float64 and in float32, to the forward one.
# %%
def f32(x):  # the same f, every operation rounded to float32
    return torch.exp(torch.sin(3 * x))


def central32(eps):
    """The central difference with every number rounded to float32."""
    x32, e32 = torch.tensor(x0, dtype=torch.float32), torch.tensor(eps, dtype=torch.float32)
    return ((f32(x32 + e32) - f32(x32 - e32)) / (2 * e32)).item()


errors = {
    "forward, float64": forward_err,
    "central, float64": estimate_errors(lambda eps: (f(x0 + eps) - f(x0 - eps)) / (2 * eps)),
    "central, float32": estimate_errors(central32),
}
course.plots.loglog(
    epsilons, errors, xlabel="step ε", ylabel="relative error of the estimate of f′(0.4)",
    title="Forward against central differences", marks={"ε = 1e-6": 1e-6},
)
plt.show()
for name, errs in errors.items():
    best = min(range(len(errs)), key=errs.__getitem__)
    print(f"{name:17}: smallest error {errs[best]:.0e} at ε = {epsilons[best].item():.0e}")
at = int(torch.argmin((epsilons - 1e-6).abs()))  # the step every check in this course uses
ratio = errors["forward, float64"][at] / errors["central, float64"][at]
print(f"at ε = 1e-6 the forward difference is off {ratio:.0e} times as much as the central one")

# %% [markdown]
# The central difference falls with slope 2 ($\propto \varepsilon^2$) on the right, turns
# around at the same round-off line, and bottoms out between $10^{-12}$ and $10^{-10}$ for
# $\varepsilon$ near $10^{-6}$. At that step the forward difference is off by a few $10^{-6}$:
# the last line above measures how many times worse that is, for the same number of calls —
# tens of thousands. In float32 nothing works: the best central difference is off by about
# $10^{-5}$, and a step below a few $10^{-8}$ is lost in rounding altogether
# ($x + \varepsilon = x$: error 1). A gradient check in float32 cannot tell a right backward
# from a slightly wrong one. That is why every check in this course uses **central
# differences, in float64, with $\varepsilon = 10^{-6}$**.
#
# ## 4. How far apart are two gradients? Relative error
#
# Your backward gives $a$, the numerical gradient gives $b$. "Close" cannot mean a small
# $\lVert a - b \rVert$: gradients come at every scale. Here is the same 1% disagreement at
# three scales — the absolute error moves by twelve orders of magnitude, the relative one
# does not move at all:
# %%
g = torch.randn(7, 5, generator=gen, dtype=F64)  # a gradient of some shape
for scale in (1e-6, 1.0, 1e6):
    a = scale * g  # what the backward returned
    b = scale * g * 1.01  # what the numerical gradient says: 1% larger
    absolute = torch.linalg.vector_norm(a - b).item()
    print(f"scale {scale:7.0e}:  ‖a − b‖ = {absolute:7.1e}   ‖a − b‖ / ‖b‖ = {absolute / torch.linalg.vector_norm(b).item():.4f}")

# %% [markdown]
# So divide $\lVert a - b \rVert$ by the size of the gradients — with $\lVert\cdot\rVert$ the
# Euclidean norm over *every* entry, whatever the shape (the Frobenius norm, for a matrix).
# Dividing by $\lVert b \rVert$ alone, as above, works at any scale, but it makes $b$ special:
# swap the arguments and the number changes, and a check should not care which side is "the
# truth". Which size, then? That is Part B.
#
# How to read a relative error, for a float64 central-difference check:
#
# | relative error | verdict |
# |---|---|
# | below $10^{-7}$ | excellent — as close as central differences can tell |
# | $10^{-7}$ to $10^{-4}$ | look closer: a kink (ReLU at 0, a tie in a max), an ε too large or small, float32 somewhere |
# | $10^{-4}$ to $10^{-3}$ | probably wrong |
# | above $10^{-3}$ | a bug |
#
# ## Part B — relative_error (1 point)
#
# Write $\operatorname{rel}(a, b) = \lVert a - b \rVert / D$, where the denominator $D$ is
# built from $\lVert a \rVert$ and $\lVert b \rVert$ alone, such that:
#
# 1. it is **scale-free**: $\operatorname{rel}(ca, cb) = \operatorname{rel}(a, b)$ for every $c > 0$;
# 2. it is **symmetric**: $\operatorname{rel}(a, b) = \operatorname{rel}(b, a)$;
# 3. a gradient that came back **all zeros** reads exactly **1**: $\operatorname{rel}(a, 0) = 1$ for every $a \neq 0$;
# 4. a **flipped sign** reads exactly **2**, $\operatorname{rel}(a, -a) = 2$, and nothing reads more than 2;
# 5. two all-zero gradients read **0**, not NaN.
#
# Take norms over every entry (any shape), compute in float64, and return a Python `float`
# (a 0-d tensor is accepted too). Find the $D$ that meets all five.
# %% solution id=relative_error
def relative_error(a, b):
    """rel(a, b): how far apart two gradients of the same shape are, as one float64 number.

    a, b : tensors of the same shape (any shape, any float dtype)
    Returns a Python float with the five properties of Part B.
    """
    ### BEGIN SOLUTION
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    norm = torch.linalg.vector_norm  # √(Σ entry²) over every axis, whatever the shape or layout
    tiny = torch.finfo(torch.float64).tiny  # keeps 0/0 (both zero) at 0 instead of NaN
    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — try the candidates</summary>
#
# Property 1 needs $D$ to grow like the gradients: $D(ca, cb) = c\,D(a, b)$. Property 2 needs
# $D$ to treat $\lVert a \rVert$ and $\lVert b \rVert$ alike. That leaves a handful of natural
# candidates: the sum, the mean, the geometric mean, the smaller and the larger of the two
# norms. Test each against properties 3 ($b = 0$, so $\lVert b \rVert = 0$) and 4
# ($\lVert a - b \rVert = 2\lVert a \rVert$ and $\lVert b \rVert = \lVert a \rVert$). Exactly one survives.
#
# </details>
#
# <details><summary>Hint 2 — the zero case and the tools</summary>
#
# When both gradients are zero, the survivor of Hint 1 is 0 too, and $0/0$ is NaN. Keep the
# denominator away from zero without changing any other value: let it never fall below the
# smallest positive float64, `torch.finfo(torch.float64).tiny`. `torch.linalg.vector_norm(t)`
# takes the norm over every entry of any shape (and any layout); `.item()` turns a 0-d tensor
# into a Python float.
#
# </details>
#
# <details><summary>Hint 3 — two candidates worked by hand</summary>
#
# Take $a = (3, 4)$, so $\lVert a \rVert = 5$. With $b = (0, 0)$: $\lVert a - b \rVert = 5$ and
# $\lVert b \rVert = 0$. With $b = (-3, -4)$: $\lVert a - b \rVert = 10$ and $\lVert b \rVert = 5$.
# The **sum** of the norms reads $5/5 = 1$ on the first pair (property 3 holds) and $10/10 = 1$
# on the second (property 4 wants 2: it fails). The **geometric mean** reads $5/0$ on the first
# pair: it fails property 3. Work out the same two pairs for the mean, the smaller and the
# larger norm; the candidate that reads 1 and then 2 is your $D$. Then use the triangle
# inequality to check that it never reads more than 2.
#
# </details>
# %% test id=test_relative_error points=1
"""relative_error: scale-free (1e-6 to 1e6), symmetric, any shape and
layout, and 0 — not NaN — when both are zero."""
course.selfcheck.relative_error(relative_error)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.relative_error(relative_error)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The relative error** of two computed gradients:
#
# $$\boxed{\operatorname{rel}(a, b) = \frac{\lVert a - b \rVert}{\max(\lVert a \rVert, \lVert b \rVert, \text{tiny})}}$$
#
# Why each piece:
#
# - dividing by a norm makes it **scale-free**;
# - the **max** makes it **symmetric** and pins the readings: with $b = 0$ it is
#   $\lVert a \rVert / \lVert a \rVert = 1$; with $b = -a$ it is $2\lVert a \rVert / \lVert a \rVert = 2$; and since
#   $\lVert a - b \rVert \le \lVert a \rVert + \lVert b \rVert \le 2\max$, never more than 2. The sum
#   would read 1 and 1 there, the mean 2 and 2, the smaller norm $\infty$;
# - **tiny** (the smallest positive float64) keeps two all-zero gradients at $0/\text{tiny} = 0$
#   instead of $0/0 = $ NaN.
#
# Some values now name their bug on sight: exactly **2** is a flipped sign, **1** a gradient
# that came back all zeros, and $(B-1)/B$ — **0.857** at batch $B = 7$ — a gradient $B$ times too
# large, a mean over the batch written as a sum: with $a = 7b$, $\lVert a - b \rVert = 6\lVert b \rVert$
# and the max is $7\lVert b \rVert$.
#
# The course's own checks measure differently, on purpose: they know which side is the right
# answer, so `course.relative_error(got, reference)` divides by the reference's norm alone, as
# numerical analysis does. Yours compares two computed gradients, neither of them the truth.
#
# </details>
#
# ## 5. One chain, one VJP per stage, with real numbers
#
# Now a real chain: one example with two inputs, a linear layer to three classes, softmax,
# cross-entropy.
#
# $$x \in \mathbb{R}^{1\times 2} \;\xrightarrow{\;z = xW + b\;}\; z \in \mathbb{R}^{1\times 3}
# \;\xrightarrow{\;y = \operatorname{softmax}(z)\;}\; y \;\xrightarrow{\;L = -\log y_t\;}\; L$$
#
# **Forward** fills in the activations from left to right. **Backward** starts from
# $\bar L = \partial L / \partial L = 1$ and fills in the gradients from right to left, one
# VJP per stage, each stage handed the gradient of its own output and nothing else:
#
# 1. **Cross-entropy** receives $\bar L = 1$ and returns $\bar y$, shaped like $y$. $L$ depends on
#    $y_t$ alone, so only slot $t$ of $\bar y$ is not zero.
# 2. **Softmax** receives $\bar y$ and returns $\bar z = J_{\text{softmax}}^\top \bar y$, shaped like $z$.
#    Its Jacobian is dense — every $y_i$ depends on every $z_j$ — and notebook 02 derives its VJP.
# 3. **Linear** receives $\bar z$ and returns three gradients, one per input: $\bar x$, $\bar W$ and
#    $\bar b$, each shaped like its input. Notebook 01 derives them.
#
# Here are the numbers, computed by autograd. Each line is one stage; `→` marks the forward
# pass, `←` the backward one.
# %% check-output
x = torch.tensor([[1.0, -2.0]], dtype=F64)  # (1, 2): one example, two inputs
W = torch.tensor([[0.5, -0.4, 0.3], [0.2, 0.6, -0.1]], dtype=F64)  # (2, 3)
b = torch.tensor([0.1, 0.0, -0.2], dtype=F64)  # (3,)
t = 2  # the true class

stages = chain_stepper.stages(x, W, b, t)
print(chain_stepper.table(stages))

# %% [markdown]
# The same stages as a picture (activations on top, gradients underneath, each gradient
# under the value it belongs to, with the same shape):
# %%
chain_stepper.figure(stages)
plt.show()

# %% [markdown]
# And as a stepper: press **Step ▶** to push the values forward, then keep going to pull the
# gradients back. (It needs a live notebook; on a static page, the table and the picture
# above show every step.)
# %%
chain_stepper.stepper(stages)

# %% [markdown]
# Look at the table before going on: put $\bar z$ next to $y$, entry by entry. Something
# simple is going on there; Part C lets you measure it on a whole batch.
#
# ## Part C — linear_softmax_ce_backward (3 points)
#
# Now a whole batch. Inputs $x$ of shape $(B, K)$, weights $W$ $(K, C)$, bias $b$ $(C,)$,
# and integer class indices `target` of shape $(B,)$. The loss is the **mean** over the
# batch:
#
# $$z = xW + b \quad (B, C), \qquad y = \operatorname{softmax}(z) \text{ row by row}, \qquad
# L = \frac{1}{B} \sum_{m=1}^{B} -\log y_{m, t_m},$$
#
# which is `torch.nn.functional.cross_entropy(z, target)`: it takes the logits $z$ and does the
# softmax itself. Compute $\bar x$, $\bar W$ and $\bar b$ **the way backprop does, without
# deriving a single formula**: stage by stage from the loss end, with your own
# `numerical_gradient` (Part A) doing every derivative.
#
# 1. **The head** (softmax and cross-entropy together): $\bar z$, shaped like $z$.
# 2. **The linear layer**: $\bar x$, $\bar W$ and $\bar b$ from $\bar z$ *alone*, as a backward
#    kernel would get them: this stage must not look at the loss again. `numerical_gradient`
#    wants a scalar function of one tensor, and the linear layer's output is a whole $(B, C)$
#    tensor. Which scalar, built from $z = xW + b$ and the $\bar z$ you already have, has
#    $\bar W$ as its gradient with respect to $W$?
#
# Return `(dx, dW, db)`, shaped like `(x, W, b)`. No autograd (the test refuses it); the inputs
# may arrive non-contiguous. The check wants a relative error below $10^{-7}$ against
# autograd: central differences (Part A) reach it, one-sided ones do not.
# %% solution id=linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """Gradients of L = mean over rows of cross-entropy(softmax(x @ W + b), target), one stage at a time.

    x (B, K), W (K, C), b (C,), target (B,) int64 class indices.
    Returns (dx, dW, db), shaped like (x, W, b).
    """
    ### BEGIN SOLUTION
    z = x @ W + b  # (B, C) logits
    # The head, as a function of z alone: its gradient is z̄, shaped like z.
    dz = numerical_gradient(lambda z_: torch.nn.functional.cross_entropy(z_, target), z)  # (B, C)

    def pulled_back(x_, W_, b_):
        # To first order L moves by ⟨z̄, δz⟩ when z moves by δz, so with z̄ held fixed this scalar
        # has the same gradient as L with respect to each of x, W and b.
        return ((x_ @ W_ + b_) * dz).sum()

    dx = numerical_gradient(lambda x_: pulled_back(x_, W, b), x)  # (B, K)
    dW = numerical_gradient(lambda W_: pulled_back(x, W_, b), W)  # (K, C)
    db = numerical_gradient(lambda b_: pulled_back(x, W, b_), b)  # (C,)
    return dx, dW, db
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — stage 1: which function of z is the loss?</summary>
#
# `numerical_gradient(f, z)` needs a function of one tensor shaped like $z$ that returns $L$.
# Everything after the linear layer — softmax, the log, the mean — depends on $z$ and
# `target` only, and torch has that whole head as one call that takes logits. What does it
# return for $z$, and is it a sum or a mean over the rows? (A sum would make every gradient
# $B$ times too large: the `scale` diagnosis.)
#
# </details>
#
# <details><summary>Hint 2 — stage 2: what does z̄ promise?</summary>
#
# §1: to first order, nudging $z$ by $\delta z$ moves the loss by $\sum_{m,c} \bar z_{mc}\, \delta z_{mc}$.
# Now nudge one entry of $W$ by $\delta$: $z$ moves by some $\delta z$ (which rows? which
# columns?), and the loss by $\sum \bar z \odot \delta z$. Try it on a $1 \times 1$ case: $z = xW + b$
# with numbers, $x = 2$, $W = 3$, $b = 1$, and $\bar z = 0.5$: how much does $L$ move when $W$
# moves by $\delta$? Which scalar function of $W$ moves by the same amount?
#
# </details>
#
# <details><summary>Hint 3 — the key identity</summary>
#
# For any stage $u = g(v)$ of a chain, with $\bar u$ already known,
#
# $$L(v + \delta) - L(v) \approx \langle \bar u,\; g(v + \delta) - g(v) \rangle ,$$
#
# with $\bar u$ held fixed: a table of numbers, not recomputed from $v$. Which scalar function
# of $v$ changes by exactly the right-hand side when $v$ moves by $\delta$? Here $g$ is the
# linear layer, seen as a function of one of its three inputs at a time.
#
# </details>
# %% test id=test_linear_softmax_ce_backward points=3
"""linear_softmax_ce_backward: dx, dW, db at batch 1 and 7, square and
non-square W, a transposed x, against autograd; no autograd inside."""
course.selfcheck.linear_softmax_ce_backward(linear_softmax_ce_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_softmax_ce_backward(linear_softmax_ce_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **Backprop is a chain of VJPs, and a VJP is the gradient of one scalar.** The head gives
# $\bar z$ (one `numerical_gradient` of the loss as a function of $z$). For the linear layer,
# $\bar z$ says how the loss responds to any small change of $z$, so with $\bar z$ held fixed
#
# $$\boxed{\bar W = \nabla_W \,\langle xW + b,\; \bar z \rangle}, \qquad
# \bar x = \nabla_x \,\langle xW + b,\; \bar z \rangle, \qquad \bar b = \nabla_b \,\langle xW + b,\; \bar z \rangle ,$$
#
# each computed by `numerical_gradient` of `((x_ @ W_ + b_) * dz).sum()` with the other two inputs
# held. That is $\bar v = J_g^\top \bar u$ of §2, evaluated without $J_g$ and without any formula:
# the contract of a backward, done by measurement. Notebook 01 replaces each of these three
# measurements by one matmul or sum, from shapes; notebook 02 replaces the head's.
#
# </details>
#
# ### Seeing the collapse
#
# Your numerical $\bar z$ can be held against the forward's own numbers. The cell below
# computes $\bar z$ for a batch of 4 with your `numerical_gradient` and prints, row by row,
# $B\bar z$ beside $y = \operatorname{softmax}(z)$ and the one-hot row $e_t$ of the true class.
# %% check-output
g = torch.Generator().manual_seed(5)
B, C = 4, 3
z = torch.randn(B, C, generator=g, dtype=F64)  # (B, C) logits
target = torch.tensor([2, 0, 1, 2])  # (B,) true classes
try:
    dz = numerical_gradient(lambda z_: torch.nn.functional.cross_entropy(z_, target), z)  # (B, C)
    source = "your numerical_gradient"
except NotImplementedError:
    dz = course.gradcheck.central_difference_grad(lambda z_: torch.nn.functional.cross_entropy(z_, target), z)
    source = "the course's estimate (finish Part A to use yours)"
y = torch.softmax(z, dim=1)  # (B, C)
e_t = torch.nn.functional.one_hot(target, C).to(F64)  # (B, C) one-hot rows
print(f"z̄ from {source}, by central differences in float64\n")
print(f"{'row':>3}  {'B·z̄':>26}  {'y = softmax(z)':>26}  {'e_t':>6}")
for m in range(B):
    fmt = lambda v: " ".join(f"{u:+.5f}" for u in v.tolist())  # noqa: E731
    print(f"{m:>3}  {fmt(B * dz[m]):>26}  {fmt(y[m]):>26}  {' '.join(str(int(u)) for u in e_t[m].tolist()):>6}")
print("\nRead the three columns entry by entry: what relation do you see? Notebook 02 (Part D) derives it.")

# %% [markdown]
# Composed in two stages in float32 (the loss's gradient at $y$, then softmax's VJP), this
# backward overflows where one fused op stays finite: notebook 02 §7 measures it.
#
# ## 6. When a backward is wrong: the debugging order
#
# Wrong gradients are rarely random. They are the right answer with one mistake applied, and
# the same few mistakes account for nearly all of them. The grader names each one with the
# same word in every notebook (the `diagnosis:` line), and it tries them in one order — the
# order to use by hand too. It is `course.diagnose.LADDER`:
# %% check-output
for step, rung in enumerate(course.diagnose.LADDER, 1):
    print(f"{step}. {rung:<16} {course.diagnose.WHY[rung]}")

# %% [markdown]
# <details><summary>Why this order</summary>
#
# The rule behind the order: **from the check that needs the least to the one that needs the
# most, and from the narrowest explanation to the widest**, so that when two rungs explain a
# result, the one that says more names it.
#
# 1. **`shape`** needs no numbers at all: it is read first, and catches a reduction over the
#    wrong axis. A shape that is the *reversed* shape of the right one and holds the transposed
#    values — a transposed $\bar W$ of a non-square $W$ — is named there already, by its own
#    word, `transpose`. The shape cannot see a transpose of a square matrix.
# 2. **`sign`**: one wrong answer, $-r$ for the right $r$: the two sides of a difference
#    swapped, say $\bar y \odot (y^2 - 1)$ for $\tanh$'s $\bar y \odot (1 - y^2)$. A flipped sign
#    is also a constant factor — of $-1$ — so it goes before `scale`, which would name it less
#    precisely.
# 3. **`transpose`**: one wrong answer, $r^\top$, that the values alone show when the matrix is
#    square. A placement, not a factor.
# 4. **`scale`**: a whole family, $c\,r$ for any $c \neq \pm 1$: a missing $1/B$ (a mean written as a
#    sum), a $1/\sqrt{d}$, a 2. A factor of $B$ is right at batch 1 and wrong above it — exactly
#    what a missing reduction looks like — so a constant factor is tested **before** the batch
#    rung, which would send you looking for a missing sum.
# 5. **`batch-reduction`**: right at batch 1, wrong above it, and none of the above: a sum over
#    the batch missing or in the wrong place ($\bar b$ taken from one row, $\bar W$ from one
#    example). It needs two runs, at batch 1 and above, and it explains anything that vanishes
#    at batch 1, so it comes after every rung that one run can decide.
# 6. **`wrong-values`**: none of the above. Then the derivation itself is off, not one step of it.
#
# Each exercise adds its own named bugs (a row statistic on the wrong axis, `broadcast-axis`;
# a scatter that keeps one of two writes, `non-atomic-scatter`, notebook 06); each is one
# specific wrong answer, so they are tried right after the shape.
#
# </details>
#
# Hence the rule of every check in this course: **test at batch 1 and at batch 7**. Batch 1
# pins down the per-example math; batch 7 exposes the batch reductions. And 7 is prime: no
# block size 2, 4, 8, … divides it, so a kernel that tiles the batch always has a ragged last
# block, and a missing bounds mask shows up too. Use a square *and* a non-square $W$.
#
# Here is what each bug does to the relative error, measured against autograd's correct
# gradients of this chain (so this runs whether or not you have finished Part C):
# %% check-output
def correct_grads(B, K, C, seed=0):
    """Autograd's (z̄, W̄, b̄) for one random batch of the linear → softmax → cross-entropy chain."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, K, generator=g, dtype=F64)  # (B, K)
    W = torch.randn(K, C, generator=g, dtype=F64, requires_grad=True)  # (K, C)
    b = torch.randn(C, generator=g, dtype=F64, requires_grad=True)  # (C,)
    target = torch.randint(0, C, (B,), generator=g)  # (B,)
    z = x @ W + b
    z.retain_grad()
    torch.nn.functional.cross_entropy(z, target).backward()
    return z.grad, W.grad, b.grad


def compare(got, right):
    """The relative error against the right answer, or the word 'shape' when the shapes already disagree."""
    return f"{course.relative_error(got, right):.2f}" if got.shape == right.shape else "shape"


grads = {B: correct_grads(B, K=4, C=4) for B in (1, 7)}  # square W: a transpose keeps its shape
bugs = {  # each bug applied to the correct (z̄, W̄, b̄)
    "sign: −W̄": lambda B, dz, dW, db: compare(-dW, dW),
    "transpose: W̄ transposed (square W)": lambda B, dz, dW, db: compare(dW.T, dW),
    "scale: a mean written as a sum, B·W̄": lambda B, dz, dW, db: compare(B * dW, dW),
    "batch-reduction: b̄ from row 0 only": lambda B, dz, dW, db: compare(dz[0], db),
    "broadcast-axis: b̄ summed over classes": lambda B, dz, dW, db: compare(dz.sum(dim=1), db),
}
print(f"{'bug':<40}{'batch 1':>9}{'batch 7':>9}")
for name, bug in bugs.items():
    print(f"{name:<40}" + "".join(f"{bug(B, *grads[B]):>9}" for B in (1, 7)))

# %% [markdown]
# Two of the five bugs score a perfect 0.00 at batch 1. That is the whole argument for
# batch 7. And one of those two — `B·W̄` — is a scale *and* right at batch 1: the ladder's order
# decides what it is called. The grader's classifier, `course.diagnose.diagnose`, reads each
# rung in the ladder's order; here it is on three results that two rungs explain:
# %% check-output
_, dW7, _ = grads[7]
antisym = dW7 - dW7.T  # a right answer whose transpose is its negative
ambiguous = {
    "B·W̄ at batch 7 (a factor, and right at batch 1)": (7 * dW7, dW7),
    "−W̄ (a sign flip is a factor of −1)": (-dW7, dW7),
    "−r for an r with rᵀ = −r (a sign flip and a transpose)": (-antisym, antisym),
}
for name, (got, right) in ambiguous.items():
    print(f"{name:<58} → {course.diagnose.diagnose('dW', got, right, batch=7).cls}")

# %% [markdown]
# Notebook 01 (Part D) asks you to write this classifier yourself, in this order, and to
# repair a broken backward with it.
#
# ## 7. Your first backward by hand: the sigmoid
#
# Part C measured every gradient; from here on you derive them. The first is one op,
# elementwise: the sigmoid,
#
# $$y = \sigma(x) = \frac{1}{1 + e^{-x}}, \qquad \text{entry by entry, any shape.}$$
#
# Its Jacobian, built once here by autograd for a row of 6, to look at:
# %%
x_row = torch.linspace(-3, 3, 6, dtype=F64)  # (6,)
J_sigmoid = torch.autograd.functional.jacobian(torch.sigmoid, x_row)  # (6, 6)
fig, ax = plt.subplots(figsize=(3.4, 3))
shown = ax.imshow(J_sigmoid, cmap="viridis")
ax.set_title("∂y_i/∂x_j of the sigmoid")
ax.set_xlabel("j (input)")
ax.set_ylabel("i (output)")
fig.colorbar(shown, ax=ax)
plt.show()

# %% [markdown]
# A forward pass that is followed by a backward saves what the backward needs. For the
# sigmoid, frameworks save the **output** $y$, not the input $x$ (`torch.sigmoid`'s backward
# reads its result). Is $y$ enough?
#
# ## Part D — sigmoid_backward (2 points)
#
# Write `sigmoid_backward(y, dy)`: given the saved output $y = \sigma(x)$ and $\bar y$, both of the
# same shape (any shape), return $\bar x$, shaped like $y$. Derive it by hand:
#
# - What does the picture say about $\bar x_i = \sum_j \bar y_j\, \partial y_j / \partial x_i$: how
#   many terms does each sum have?
# - Differentiate $\sigma$, and write the derivative **in terms of $y$ alone** — you are not given
#   $x$, and recomputing it from $y$ costs a log and loses digits where $y$ is close to 1.
#
# Plain tensor operations, no autograd (the test refuses it), no `torch.sigmoid` needed. The
# inputs may arrive non-contiguous.
# %% solution id=sigmoid_backward
def sigmoid_backward(y, dy):
    """x̄ for y = sigmoid(x), from the saved output y and the gradient ȳ (same shape as y).

    Returns x̄, shaped like y.
    """
    ### BEGIN SOLUTION
    return dy * y * (1 - y)  # the Jacobian's diagonal, σ′(x) = y(1 − y), times ȳ: 2 loads, 1 store per entry
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — how many terms?</summary>
#
# $y_j$ depends on $x_j$ and on nothing else, so $\partial y_j / \partial x_i$ is zero unless
# $j = i$ — the picture's empty off-diagonal. The sum $\sum_j \bar y_j\, \partial y_j / \partial x_i$
# keeps one term. So $\bar x$ is $\bar y$ times one number per entry: which number? And do not
# forget $\bar y$: a VJP that returns only the Jacobian's diagonal ignores what the rest of the
# network wants.
#
# </details>
#
# <details><summary>Hint 2 — differentiate σ</summary>
#
# Write $\sigma(x) = u^{-1}$ with $u = 1 + e^{-x}$. The chain rule: $\frac{d}{du} u^{-1} = -u^{-2}$
# and $\frac{du}{dx} = -e^{-x}$. Multiply them and you have $\sigma'(x)$ as one fraction of
# exponentials. It is not the derivative of $\tanh$ (§2), nor of $e^x$ — each has its own
# expression in its output.
#
# </details>
#
# <details><summary>Hint 3 — from x to y</summary>
#
# Solve $y = 1/(1 + e^{-x})$ for the exponential: $1 + e^{-x} = 1/y$, so $e^{-x} = 1/y - 1$.
# Substitute both into your fraction of Hint 2 and simplify until no $x$ is left. Check the
# result at $x = 0$, where $y = 1/2$ and the slope of $\sigma$ is $1/4$.
#
# </details>
# %% test id=test_sigmoid_backward points=2
"""sigmoid_backward: dx shaped like y, right at batch 1, batch 7, a 3-D y and
transposed inputs, against autograd; no autograd inside."""
course.selfcheck.sigmoid_backward(sigmoid_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.sigmoid_backward(sigmoid_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# The Jacobian is diagonal, so the VJP is an elementwise product with its diagonal:
#
# $$\sigma'(x) = \frac{e^{-x}}{(1 + e^{-x})^2} = \frac{1}{1 + e^{-x}} \cdot \frac{e^{-x}}{1 + e^{-x}}
# = \sigma(x)\,\big(1 - \sigma(x)\big), \qquad
# \boxed{\bar x = \bar y \odot y \odot (1 - y)}$$
#
# In code, `dy * y * (1 - y)`. **Why the output is enough**: the derivative is a function of
# $y$, so the backward reads $y$ and $\bar y$ and writes $\bar x$ — $3N$ numbers, no exponential
# (the forward already paid for it), and no $x$ kept alive. $\tanh$ is the same story,
# $1 - y^2$ (§2). Not every op is so kind: GELU's derivative needs $x$, so its backward saves $x$.
#
# The picture: the slope of $\sigma$ as a function of its output is the parabola $y(1 - y)$,
# largest, $1/4$, at $y = 1/2$, and vanishing as $y \to 0$ or $1$ — a saturated sigmoid passes
# almost no gradient back.
#
# </details>
# %%
x_grid = torch.linspace(-6, 6, 121, dtype=F64)
y_grid = torch.sigmoid(x_grid)
slope = torch.autograd.functional.jacobian(lambda v: torch.sigmoid(v).sum(), x_grid)  # σ′ at each x, by autograd
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
left.plot(x_grid, y_grid, label="y = σ(x)")
left.plot(x_grid, slope, label="σ′(x)")
left.set_xlabel("x")
left.legend()
right.plot(y_grid, slope)
right.set_xlabel("y = σ(x)")
right.set_ylabel("σ′")
right.set_title("the slope, read off the output")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 8. Your tools, on your backward
#
# Everything in this notebook, together: check your `sigmoid_backward` at batch 7 with your own
# `numerical_gradient` and `relative_error`, as Part C computed a VJP: the gradient of
# $\langle \sigma(x), \bar y \rangle$ with $\bar y$ held fixed. The numerical side knows nothing of
# your derivation.
# %%
try:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(7, 5, generator=g, dtype=F64)  # (7, 5): prime batch
    dy = torch.randn(7, 5, generator=g, dtype=F64)  # ȳ, shaped like y
    mine = sigmoid_backward(torch.sigmoid(x), dy)
    numeric = numerical_gradient(lambda x_: (torch.sigmoid(x_) * dy).sum(), x)
    if mine.shape != numeric.shape:
        print(f"x̄: shape {tuple(mine.shape)}, but it must be {tuple(numeric.shape)}, the shape of its input")
    else:
        err = relative_error(mine, numeric)
        print(f"x̄: shape {tuple(mine.shape)}, relative error {err:.0e} — {course.gradcheck.verdict(err)}")
except NotImplementedError:
    print("Finish Parts A, B and D first: this cell uses all three of your functions.")
except Exception as exc:  # a part still has a bug; its test cell above says which
    print(f"One of your functions raised {type(exc).__name__}: {exc}. Fix the part whose test fails, then rerun.")

# %% [markdown]
# ## What to take away
#
# - $\bar x = \partial L / \partial x$ has the shape of $x$. Check shapes first.
# - A backward is a VJP: $\bar x = J^\top \bar y$, computed without ever building $J$. Backprop
#   runs one VJP per stage, from the loss end, each stage handed only the gradient of its output.
# - Check gradients with central differences in float64 at $\varepsilon \approx 10^{-6}$, and
#   compare with the relative error: below $10^{-7}$ excellent, above $10^{-3}$ a bug.
# - Softmax + cross-entropy, measured: $B\bar z$ lines up with $y$ and $e_t$ row by row, which is
#   why frameworks fuse them into one op. Notebook 01 derives the linear layer's VJPs, notebook
#   02 the head's.
# - An elementwise op's backward is an elementwise product; write its derivative in the saved
#   output when you can.
# - Debug in the ladder's order — shape, sign, transpose, scale, batch-reduction, wrong-values —
#   and test at batch 1 *and* 7.
#
# Next, `01_matmul_from_shapes`: deriving matmul backwards from shapes alone, and what the
# batch reduction in $\bar W$ means for a GPU kernel.

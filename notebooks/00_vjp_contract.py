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
# 4. **one real chain** — linear → softmax → cross-entropy — stepped through with real numbers,
#    and the collapse of softmax + cross-entropy into `softmax − onehot`;
# 5. **the debugging order** for a wrong backward, and why every check runs at batch 1 *and* batch 7.
#
# | part | you write | points |
# |---|---|---|
# | A | `numerical_gradient(f, x, eps=1e-6)` — a finite-difference gradient, any shape | 2 |
# | B | `relative_error(a, b)` — how far apart two gradients are | 1 |
# | C | `linear_softmax_ce_backward(x, W, b, target)` — the whole chain's backward | 3 |
#
# Each part asks a question and leaves the derivation to you. Below each exercise sit a few
# collapsed hints — open them one at a time, only when stuck: the first asks the right
# question, the last gives the formula. Then a test cell. It prints `✓ ...` when your
# function is right; when it is wrong, its first line names the kind of bug
# (`diagnosis: transpose — ...`), the next lines say where it first went wrong, and the last
# one points to the hint that covers it. After the test cell, a recap derives the result.
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
# ever write. PyTorch agrees — it is why `W.grad` can be subtracted from `W`:
# %% check-output
gen = torch.Generator().manual_seed(0)
M, K, C = 5, 3, 4  # batch, input features, outputs
x = torch.randn(M, K, generator=gen, dtype=F64)  # (M, K)
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
# <details><summary>Hint 3 — the formula</summary>
#
# Subtracting the two lines cancels $f(x)$ and every even power:
# $f(x+\varepsilon) - f(x-\varepsilon) = 2\varepsilon f'(x) + \tfrac{\varepsilon^3}{3} f'''(x) + \dots$, so
#
# $$\bar x_i \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon},$$
#
# one division per entry, in the loop of Hint 2.
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
# ### What you just derived: the central difference
#
# Subtract the two Taylor lines: $f(x)$ and every even power of $\varepsilon$ cancel,
#
# $$f(x+\varepsilon) - f(x-\varepsilon) = 2\varepsilon f'(x) + \tfrac{\varepsilon^3}{3} f'''(x) + \dots
# \qquad\Longrightarrow\qquad
# \boxed{\bar x_i \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon}}
# = \bar x_i + \tfrac{\varepsilon^2}{6} f''' + \dots$$
#
# the **central difference**, truncation error $O(\varepsilon^2)$ for the same two calls per
# entry. Balance it against round-off as before: $\varepsilon^2 |f'''| / 6 \approx u |f| / \varepsilon$
# at $\varepsilon \approx u^{1/3} \approx 5 \times 10^{-6}$, with a best error of about
# $u^{2/3} \approx 10^{-11}$ in float64. The same picture, with your estimate in it, and in float32:
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
# <details><summary>Hint 3 — the formula</summary>
#
# $$\operatorname{rel}(a, b) = \frac{\lVert a - b \rVert}{\max(\lVert a \rVert, \lVert b \rVert, \text{tiny})}$$
#
# In code: `norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)`.
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
# ### What you just derived: the course's relative error
#
# $$\boxed{\operatorname{rel}(a, b) = \frac{\lVert a - b \rVert}{\max(\lVert a \rVert, \lVert b \rVert, \text{tiny})}}$$
#
# Why each piece:
#
# - dividing by a norm makes it **scale-free**;
# - the **max** makes it **symmetric** and pins the readings: with $b = 0$ it is
#   $\lVert a \rVert / \lVert a \rVert = 1$; with $b = -a$ it is $2\lVert a \rVert / \lVert a \rVert = 2$; and since
#   $\lVert a - b \rVert \le \lVert a \rVert + \lVert b \rVert \le 2\max$, never more than 2. The sum
#   would read $\tfrac12$ and 1 there, the mean 2 and 2, the smaller norm $\infty$;
# - **tiny** (the smallest positive float64) keeps two all-zero gradients at $0/\text{tiny} = 0$
#   instead of $0/0 = $ NaN.
#
# Some values now name their bug on sight: exactly **2** is a flipped sign, **1** a gradient
# that came back all zeros, and $(M-1)/M$ — **0.857** at batch 7 — a gradient $M$ times too
# large, a mean over the batch written as a sum: with $a = Mb$, $\lVert a - b \rVert = (M-1)\lVert b \rVert$
# and the max is $M\lVert b \rVert$.
#
# ## 5. One chain, with real numbers
#
# Now a real chain: one example with two inputs, a linear layer to three classes, softmax,
# cross-entropy.
#
# $$x \in \mathbb{R}^{1\times 2} \;\xrightarrow{\;z = xW + b\;}\; z \in \mathbb{R}^{1\times 3}
# \;\xrightarrow{\;y = \operatorname{softmax}(z)\;}\; y \;\xrightarrow{\;L = -\log y_t\;}\; L$$
#
# **Forward** fills in the activations from left to right. **Backward** starts from
# $\bar L = \partial L / \partial L = 1$ and fills in the gradients from right to left, one
# VJP per op:
#
# 1. **Cross-entropy.** $L = -\log y_t$ depends on $y_t$ alone: $\bar y_i = -1/y_t$ if $i = t$, else $0$.
# 2. **Softmax.** $y_i = e^{z_i} / \sum_k e^{z_k}$ has the dense Jacobian
#    $\partial y_i / \partial z_j = y_i(\delta_{ij} - y_j)$, so
#    $\bar z_j = \sum_i \bar y_i\, y_i (\delta_{ij} - y_j) = y_j\,(\bar y_j - \langle y, \bar y \rangle)$.
# 3. **Linear.** $z_c = \sum_k x_k W_{kc} + b_c$. Its VJP — $\bar W$, $\bar b$ and $\bar x$ from
#    $\bar z$ — is yours to derive in Part C. The numbers below include them, so you can hold
#    your derivation against this one example.
#
# Here are the numbers — computed by autograd. Each line is one stage; `→` marks the forward
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
# ### The collapse: softmax + cross-entropy = $y - e_t$
#
# Look at step 6. Cross-entropy's derivative $-1/y_t$ blows up as $y_t \to 0$, and softmax's
# Jacobian is a dense $C \times C$ matrix. Composed, they cancel. With $\bar y = -e_t / y_t$,
# the scalar $\langle y, \bar y \rangle = y_t \cdot (-1/y_t) = -1$, so
#
# $$\bar z_j = y_j\,(\bar y_j + 1) = \begin{cases} y_t - 1 & j = t \\ y_j & j \ne t \end{cases}
# \qquad\Longrightarrow\qquad \bar z = y - e_t ,$$
#
# with $e_t$ the one-hot row of the true class. Two awkward derivatives become one
# subtraction, every entry between −1 and 1. In the table, $\bar z = (0.4404, 0.0728, -0.5132)$
# is $y = (0.4404, 0.0728, 0.4868)$ minus $e_2 = (0, 0, 1)$.
#
# This is why frameworks ship softmax and cross-entropy as **one fused op**
# (`torch.nn.functional.cross_entropy` takes logits, not probabilities). It is not only
# fewer kernels: composed in two steps, the backward can break down. Below, the model is
# confidently wrong — the true class has probability $e^{-100}$ — in float32, where
# $-1/y_t$ overflows:
# %%
z = torch.tensor([[0.0, 100.0, 0.0]])  # (1, 3) float32 logits, confidently wrong
t_wrong = 0
y = z.softmax(dim=-1)  # y_t ≈ e^-100 ≈ 4e-44: below float32's smallest normal, 1e-38
e_t = torch.nn.functional.one_hot(torch.tensor([t_wrong]), 3).to(y.dtype)  # (1, 3)

dy = torch.zeros_like(y)  # ȳ = ∂L/∂y, (1, 3)
dy[0, t_wrong] = -1 / y[0, t_wrong]  # −1/y_t ≈ −3e43 overflows float32 (max 3e38) to −inf
J = torch.diag(y[0]) - y[0][:, None] * y[0][None, :]  # (3, 3) softmax Jacobian, symmetric
print("two steps, Jᵀ ȳ :", (dy @ J)[0].tolist())
print("collapsed, y − e_t:", (y - e_t)[0].tolist())

# %% [markdown]
# ## Part C — linear_softmax_ce_backward (3 points)
#
# Now a whole batch. Inputs $x$ of shape $(M, K)$, weights $W$ $(K, C)$, bias $b$ $(C,)$,
# and integer class indices `target` of shape $(M,)$. The loss is the **mean** over the
# batch:
#
# $$z = xW + b \quad (M, C), \qquad y = \operatorname{softmax}(z) \text{ row by row}, \qquad
# L = \frac{1}{M} \sum_{m=1}^{M} -\log y_{m, t_m}.$$
#
# Derive $\bar z$ for the whole batch — the collapse above is for one example and a loss that
# is not averaged — and then the linear layer's VJP: $\bar W$, $\bar b$ and $\bar x$, each with
# the shape of what it is the gradient of. Section 5's numbers are this chain at $M = 1$.
#
# Return `(dx, dW, db)`, shaped like `(x, W, b)`, and do not call autograd — the test
# refuses it. `torch.softmax` and `torch.nn.functional.one_hot` are fine: they are the
# forward pass. The inputs may arrive non-contiguous (a transposed tensor, say).
# %% solution id=linear_softmax_ce_backward
def linear_softmax_ce_backward(x, W, b, target):
    """Gradients of L = mean over rows of cross-entropy(softmax(x @ W + b), target).

    x (M, K), W (K, C), b (C,), target (M,) int64 class indices.
    Returns (dx, dW, db), shaped like (x, W, b).
    """
    ### BEGIN SOLUTION
    M, K = x.shape  # batch, input features
    C = W.shape[1]  # classes
    z = x @ W + b  # (M, C) logits; b is broadcast to every row
    y = torch.softmax(z, dim=1)  # (M, C) probabilities; each row sums to 1
    E = torch.nn.functional.one_hot(target, C).to(y.dtype)  # (M, C) one-hot rows e_t
    dz = (y - E) / M  # (M, C) z̄: the collapse, times the mean's 1/M
    dW = x.T @ dz  # (K, M) @ (M, C) -> (K, C): a sum over the batch
    db = dz.sum(dim=0)  # (C,): b was copied to every row, so its gradient sums them
    dx = dz @ W.T  # (M, C) @ (C, K) -> (M, K): row by row, no sum over the batch
    return dx, dW, db
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — shapes first, and the mean</summary>
#
# Write down the shapes you must return: $\bar x$ is $(M, K)$, $\bar W$ is $(K, C)$, $\bar b$ is
# $(C,)$. Then $\bar z$, $(M, C)$: row $m$ of $z$ affects the loss only through row $m$'s
# cross-entropy, and that term enters $L$ with a weight. Which weight, and what does it do to
# row $m$ of $\bar z$ compared with the one-example collapse of §5?
#
# </details>
#
# <details><summary>Hint 2 — one product per gradient, one sum per copy</summary>
#
# - $\bar W$ is made of $x$ $(M, K)$ and $\bar z$ $(M, C)$: there is exactly one way to
#   multiply them, each perhaps transposed, into something $(K, C)$ — and its inner axis is
#   the batch, so every example contributes to every weight.
# - $\bar x$ is made of $\bar z$ and $W$, and must come out $(M, K)$: each example's row depends
#   on its own row of $\bar z$ only.
# - $b$ is *copied* into every row of $z$ by broadcasting. A value used $M$ times receives the
#   gradients of all $M$ uses: how do you turn $\bar z$ $(M, C)$ into something $(C,)$?
#
# </details>
#
# <details><summary>Hint 3 — the formulas</summary>
#
# $$\bar z = \frac{1}{M}(y - E), \qquad \bar W = x^\top \bar z, \qquad \bar b = \sum_m \bar z_m, \qquad \bar x = \bar z\, W^\top,$$
#
# with row $m$ of $E$ the one-hot $e_{t_m}$. In code: `dz = (y - E) / M`, `dW = x.T @ dz`,
# `db = dz.sum(dim=0)`, `dx = dz @ W.T`.
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
# ### What you just derived: the batch chain
#
# Each row's loss enters $L$ with weight $1/M$, so row by row the collapse gives
#
# $$\boxed{\bar z = \frac{1}{M}(y - E)} \quad (M, C),$$
#
# where row $m$ of $E$ is the one-hot $e_{t_m}$. Then the linear layer, with the shapes doing
# the bookkeeping:
#
# - $\boxed{\bar W = x^\top \bar z}$: $(K, M)(M, C) \to (K, C)$. Written out,
#   $\bar W_{kc} = \sum_m x_{mk}\, \bar z_{mc}$ — **a sum over the batch**: every example
#   contributes to every weight.
# - $\boxed{\bar b = \sum_m \bar z_m}$, shape $(C,)$: $b$ was *broadcast* (copied) to every row in
#   the forward pass, so its gradient *sums* the rows. Broadcast forward, reduce backward.
# - $\boxed{\bar x = \bar z\, W^\top}$: $(M, C)(C, K) \to (M, K)$. $\bar x_{mk} = \sum_c \bar z_{mc} W_{kc}$
#   — no sum over the batch: each example's $\bar x$ depends on its own row only.
#
# If you forget which side a transpose goes on, write the shapes down: there is exactly one
# way to combine $x$ $(M, K)$ and $\bar z$ $(M, C)$ into something $(K, C)$.
#
# ## 6. When a backward is wrong: the debugging order
#
# Wrong gradients are rarely random. They are the right answer with one mistake applied, and
# the same few mistakes account for nearly all of them. The grader names each one with the
# same word in every notebook (the `diagnosis:` line). Check in this order:
#
# 1. **`transpose`.** $\bar W = \bar z^\top x$ instead of $x^\top \bar z$. When $W$ is not square
#    the shape gives it away; when it is square the shapes agree and only the values are wrong.
# 2. **`batch-reduction`.** A reduction over the batch axis missing or done in the wrong place:
#    $\bar b$ taken from one row, $\bar W$ from one example. At batch 1 a sum over the batch has
#    one term, so this bug is **invisible at batch 1** and shows above it.
# 3. **`sign`.** `onehot − softmax` instead of `softmax − onehot`; relative error exactly 2.
# 4. **`scale`.** Right up to a constant factor: a missing $1/M$ (a mean written as a sum),
#    a $1/\sqrt{d}$, a $2$. A factor of $M$ is invisible at batch 1 too — test for a constant
#    factor *before* blaming a missing reduction.
# 5. **`broadcast-axis`.** A reduction over the wrong axis: $\bar b$ summed over the classes
#    instead of the rows. Usually the wrong shape; with a square $\bar z$ ($M = C$) only the
#    values tell.
# 6. **`non-atomic-scatter`.** When several outputs read the same input (an embedding row used
#    twice, repeated indices), their gradients must all be added into it; a plain store keeps
#    one. Invisible without repeated indices — notebook 06.
#
# A wrong result that none of these explains is `wrong-values`: then the derivation itself is
# off, not one step of it.
#
# Hence the rule of every check in this course: **test at batch 1 and at batch 7**. Batch 1
# pins down the per-example math; batch 7 exposes the batch reductions. And 7 is prime: no
# block size 2, 4, 8, … divides it, so a kernel that tiles the batch always has a ragged last
# block, and a missing bounds mask shows up too. Use a square *and* a non-square $W$.
#
# Here is what each bug does to the relative error, built from autograd's correct gradients
# (so this runs whether or not you have finished Part C):
# %% check-output
def correct_grads(M, K, C, seed=0):
    """Autograd's (z̄, W̄, b̄) for one random batch of the linear → softmax → cross-entropy chain."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g, dtype=F64)  # (M, K)
    W = torch.randn(K, C, generator=g, dtype=F64, requires_grad=True)  # (K, C)
    b = torch.randn(C, generator=g, dtype=F64, requires_grad=True)  # (C,)
    target = torch.randint(0, C, (M,), generator=g)  # (M,)
    z = x @ W + b
    z.retain_grad()
    torch.nn.functional.cross_entropy(z, target).backward()
    return z.grad, W.grad, b.grad


def compare(got, right):
    """The relative error, or the word 'shape' when the shapes already disagree."""
    return f"{course.relative_error(got, right):.2f}" if got.shape == right.shape else "shape"


grads = {M: correct_grads(M, K=4, C=4) for M in (1, 7)}  # square W: a transpose keeps its shape
bugs = {  # each bug applied to the correct (z̄, W̄, b̄)
    "transpose: W̄ transposed (square W)": lambda M, dz, dW, db: compare(dW.T, dW),
    "batch-reduction: b̄ from row 0 only": lambda M, dz, dW, db: compare(dz[0], db),
    "sign: −W̄": lambda M, dz, dW, db: compare(-dW, dW),
    "scale: a mean written as a sum, M·W̄": lambda M, dz, dW, db: compare(M * dW, dW),
    "broadcast-axis: b̄ summed over classes": lambda M, dz, dW, db: compare(dz.sum(dim=1), db),
}
print(f"{'bug':<40}{'batch 1':>9}{'batch 7':>9}")
for name, bug in bugs.items():
    print(f"{name:<40}" + "".join(f"{bug(M, *grads[M]):>9}" for M in (1, 7)))

# %% [markdown]
# Two of the five bugs score a perfect 0.00 at batch 1. That is the whole argument for
# batch 7. The `diagnosis:` line of every test cell in this course runs exactly this kind of
# comparison: it checks your result against the right answer *transposed, negated, scaled,
# and un-reduced*, and names the one that matches. Notebook 01 ends by asking you to write
# that classifier yourself, and to repair a broken backward with it.
#
# ## 7. Your tools, on your backward
#
# Everything in this notebook, together: check your `linear_softmax_ce_backward` at batch 7
# with your own `numerical_gradient` and `relative_error`. The loss is torch's own
# cross-entropy, so the numerical side knows nothing of your derivation.
# %%
try:
    g = torch.Generator().manual_seed(7)
    M, K, C = 7, 5, 3  # prime batch, W not square
    x = torch.randn(M, K, generator=g, dtype=F64)  # (M, K)
    W = torch.randn(K, C, generator=g, dtype=F64)  # (K, C)
    b = torch.randn(C, generator=g, dtype=F64)  # (C,)
    target = torch.randint(0, C, (M,), generator=g)  # (M,)

    def loss(x, W, b):
        return torch.nn.functional.cross_entropy(x @ W + b, target)

    dx, dW, db = linear_softmax_ce_backward(x, W, b, target)
    numeric = {
        "x̄": numerical_gradient(lambda x_: loss(x_, W, b), x),
        "W̄": numerical_gradient(lambda W_: loss(x, W_, b), W),
        "b̄": numerical_gradient(lambda b_: loss(x, W, b_), b),
    }
    for (name, num), mine in zip(numeric.items(), (dx, dW, db)):
        if mine.shape != num.shape:
            print(f"{name}: shape {tuple(mine.shape)}, but it must be {tuple(num.shape)}, the shape of its input")
            continue
        err = relative_error(mine, num)
        print(f"{name}: shape {tuple(mine.shape)}, relative error {err:.0e} — {course.gradcheck.verdict(err)}")
except NotImplementedError:
    print("Finish Parts A, B and C first: this cell uses all three of your functions.")
except Exception as exc:  # a part still has a bug; its test cell above says which
    print(f"One of your functions raised {type(exc).__name__}: {exc}. Fix the part whose test fails, then rerun.")

# %% [markdown]
# ## What to take away
#
# - $\bar x = \partial L / \partial x$ has the shape of $x$. Check shapes first.
# - A backward is a VJP: $\bar x = J^\top \bar y$, computed without ever building $J$.
# - Check gradients with central differences in float64 at $\varepsilon \approx 10^{-6}$, and
#   compare with the relative error: below $10^{-7}$ excellent, above $10^{-3}$ a bug.
# - Softmax + cross-entropy collapse to $\bar z = (y - E)/M$; the linear layer then gives
#   $\bar W = x^\top \bar z$ (a sum over the batch), $\bar b = \sum_m \bar z_m$ (broadcast ⇄ reduce),
#   $\bar x = \bar z W^\top$.
# - Debug in the order transpose → batch-reduction → sign → scale → broadcast-axis → atomic
#   scatter, and test at batch 1 *and* 7.
#
# Next, `01_matmul_from_shapes`: deriving matmul backwards from shapes alone, and what the
# batch reduction in $\bar W$ means for a GPU kernel.

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
# 3. **how to check a gradient numerically**: central differences in float64, and how to read a relative error;
# 4. **one real chain** — linear → softmax → cross-entropy — stepped through with real numbers,
#    and the collapse of softmax + cross-entropy into `softmax − onehot`;
# 5. **the debugging order** for a wrong backward, and why every check runs at batch 1 *and* batch 7.
#
# | part | you write | points |
# |---|---|---|
# | A | `numerical_gradient(f, x, eps=1e-6)` — central differences, any shape | 2 |
# | B | `relative_error(a, b)` — how far apart two gradients are | 1 |
# | C | `linear_softmax_ce_backward(x, W, b, target)` — the whole chain's backward | 3 |
#
# Each part ends with a test cell. It prints `✓ ...` when your function is right; when it is
# wrong, its first line names the kind of bug (`diagnosis: transpose — ...`) and the next
# lines say where it first went wrong.
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
# ## 3. Checking a gradient: central differences
#
# A hand-written backward is a claim; a numerical gradient is how you test it. Nudge one
# input, watch the loss. Taylor's theorem says how good that is:
#
# $$f(x \pm \varepsilon) = f(x) \pm \varepsilon f'(x) + \tfrac{\varepsilon^2}{2} f''(x) \pm \tfrac{\varepsilon^3}{6} f'''(x) + \dots$$
#
# | estimate | formula | truncation error |
# |---|---|---|
# | forward difference | $\dfrac{f(x+\varepsilon) - f(x)}{\varepsilon} = f' + \tfrac{\varepsilon}{2} f'' + \dots$ | $O(\varepsilon)$ |
# | central difference | $\dfrac{f(x+\varepsilon) - f(x-\varepsilon)}{2\varepsilon} = f' + \tfrac{\varepsilon^2}{6} f''' + \dots$ | $O(\varepsilon^2)$ — the even terms cancel |
#
# So a smaller $\varepsilon$ is better — until round-off bites. Each $f$ is computed with a
# relative error of about $u$ (the unit round-off: $u \approx 1.1 \times 10^{-16}$ in float64,
# $6 \times 10^{-8}$ in float32), and dividing a difference by $\varepsilon$ turns that into an
# error of about $u\,|f| / \varepsilon$. Truncation falls as $\varepsilon$ shrinks, round-off
# grows, and the total is smallest where they meet:
#
# - forward: $\varepsilon |f''| / 2 \approx u |f| / \varepsilon$ at $\varepsilon \approx \sqrt{u} \approx 10^{-8}$, best error $\approx \sqrt{u} \approx 10^{-8}$;
# - central: $\varepsilon^2 |f'''| / 6 \approx u |f| / \varepsilon$ at $\varepsilon \approx u^{1/3} \approx 5 \times 10^{-6}$, best error $\approx u^{2/3} \approx 10^{-11}$
#   (give or take the sizes of $f$ and its derivatives).
#
# That is why every check in this course uses **central differences, in float64, with
# $\varepsilon = 10^{-6}$**. The picture below measures it on $f(x) = e^{\sin 3x}$, whose
# derivative $3\cos(3x)\,e^{\sin 3x}$ we know exactly.
# %%
def f(x):
    return math.exp(math.sin(3 * x))


def f_prime(x):  # exact, for measuring the error
    return 3 * math.cos(3 * x) * f(x)


def f32(x):  # the same f, every operation rounded to float32
    return torch.exp(torch.sin(3 * x))


x0 = 0.4
epsilons = torch.logspace(-13, -1, 49, dtype=F64)
exact = f_prime(x0)
forward_err, central_err, central32_err = [], [], []
for eps in epsilons.tolist():
    forward_err.append(abs((f(x0 + eps) - f(x0)) / eps - exact) / abs(exact))
    central_err.append(abs((f(x0 + eps) - f(x0 - eps)) / (2 * eps) - exact) / abs(exact))
    # The same central difference with every number rounded to float32.
    x32, e32 = torch.tensor(x0, dtype=torch.float32), torch.tensor(eps, dtype=torch.float32)
    central32 = ((f32(x32 + e32) - f32(x32 - e32)) / (2 * e32)).item()
    central32_err.append(min(abs(central32 - exact) / abs(exact), 1.0))  # capped: 1 means "no digits right"

course.plots.loglog(
    epsilons,
    {"forward, float64": forward_err, "central, float64": central_err, "central, float32": central32_err},
    xlabel="step ε", ylabel="relative error of the estimate of f′(0.4)",
    title="Truncation (right) against round-off (left)", marks={"ε = 1e-6": 1e-6},
)
plt.show()
for name, errs in (("forward, float64", forward_err), ("central, float64", central_err), ("central, float32", central32_err)):
    best = min(range(len(errs)), key=errs.__getitem__)
    print(f"{name:17}: smallest error {errs[best]:.0e} at ε = {epsilons[best].item():.0e}")

# %% [markdown]
# Read the picture from the right. With a large step the truncation error dominates: the
# forward difference falls with slope 1 (error $\propto \varepsilon$), the central one with
# slope 2 ($\propto \varepsilon^2$). Further left both turn around and rise with slope −1: that
# is round-off, $u/\varepsilon$, jagged because rounding is. The central difference bottoms
# out between $10^{-12}$ and $10^{-10}$ for $\varepsilon$ near $10^{-6}$; the forward difference
# never gets much below $10^{-8}$, and at $\varepsilon = 10^{-6}$ it is off by a few $10^{-6}$ —
# a thousand times worse than the central one, for the same number of calls. In float32
# nothing works: the best central difference is off by about $10^{-5}$, and a step below a
# few $10^{-8}$ is lost in rounding altogether ($x + \varepsilon = x$: error 1). A gradient
# check in float32 cannot tell a right backward from a slightly wrong one.
#
# ## Part A — numerical_gradient (2 points)
#
# For a scalar function $f$ of a tensor $x$ of **any shape**, estimate every entry of
# $\bar x = \partial f / \partial x$ with a central difference. With $e_i$ the tensor that is
# 1 at entry $i$ and 0 elsewhere:
#
# $$\bar x_i \approx \frac{f(x + \varepsilon e_i) - f(x - \varepsilon e_i)}{2\varepsilon}.$$
#
# The rules, each of which the test checks:
#
# - the result has the shape of $x$, for any number of axes (a 3-D $x$ included), and is **float64**;
# - work in float64 whatever dtype $x$ arrives in;
# - $f$ returns a Python `float` or a 0-d tensor — accept both (`float(...)` does);
# - move **one entry at a time**, and leave the caller's `x` exactly as it was;
# - use the `eps` you are given.
#
# It costs $2n$ calls of $f$ for $n$ entries, which is why gradient checks use small tensors.
# A tip for "any shape": `t.view(-1)` of a contiguous tensor is a flat *view* — writing
# `flat[i]` writes into `t` — so one loop over `range(t.numel())` covers every shape.
# %% solution id=numerical_gradient
def numerical_gradient(f, x, eps=1e-6):
    """x̄ = ∂f/∂x by central differences, in float64, with the shape of x.

    f   : takes one tensor shaped like x and returns a scalar (a Python float or a 0-d tensor)
    x   : a tensor of any shape; it is left exactly as it was
    eps : the step ε
    """
    ### BEGIN SOLUTION
    x = x.detach().to(torch.float64, copy=True)  # our own float64 copy: nudge it, never the caller's x
    dx = torch.zeros_like(x)  # x̄ has the shape of x
    x_flat, dx_flat = x.view(-1), dx.view(-1)  # flat views of the same memory: one loop for any shape
    for i in range(x_flat.numel()):
        x_i = x_flat[i].item()
        x_flat[i] = x_i + eps
        f_plus = float(f(x))
        x_flat[i] = x_i - eps
        f_minus = float(f(x))
        x_flat[i] = x_i  # put it back before moving on: one entry moves at a time
        dx_flat[i] = (f_plus - f_minus) / (2 * eps)
    return dx
    ### END SOLUTION

# %% test id=test_numerical_gradient points=2
"""numerical_gradient: central (not forward) differences, any shape, float64, eps used, x left as it was."""
course.selfcheck.numerical_gradient(numerical_gradient)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.numerical_gradient(numerical_gradient)
### END HIDDEN TESTS

# %% [markdown]
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
# So we divide by the size of the gradients. The course's definition:
#
# $$\operatorname{rel}(a, b) = \frac{\lVert a - b \rVert}{\max(\lVert a \rVert,\ \lVert b \rVert,\ \text{tiny})}$$
#
# with $\lVert\cdot\rVert$ the Euclidean norm over *every* entry, whatever the shape
# (the Frobenius norm, for a matrix). Why each piece:
#
# - dividing by a norm makes it **scale-free**: $\operatorname{rel}(ca, cb) = \operatorname{rel}(a, b)$;
# - the **max** makes it **symmetric** — it does not matter which argument is "the truth" —
#   and bounds it: $\lVert a - b \rVert \le \lVert a \rVert + \lVert b \rVert \le 2\max$, so $0 \le \operatorname{rel} \le 2$;
# - **tiny** (the smallest positive float64) keeps two all-zero gradients at $0/\text{tiny} = 0$ instead of $0/0 = $ NaN.
#
# How to read it, for a float64 central-difference check:
#
# | relative error | verdict |
# |---|---|
# | below $10^{-7}$ | excellent — as close as central differences can tell |
# | $10^{-7}$ to $10^{-4}$ | look closer: a kink (ReLU at 0, a tie in a max), an ε too large or small, float32 somewhere |
# | $10^{-4}$ to $10^{-3}$ | probably wrong |
# | above $10^{-3}$ | a bug |
#
# Some values name their bug on sight: exactly **2** is a flipped sign ($a = -b$), **1** is a
# gradient that came back all zeros, and $(M-1)/M$ — **0.857** at batch 7 — is a gradient
# $M$ times too large: a mean over the batch written as a sum.
#
# ## Part B — relative_error (1 point)
#
# Write $\operatorname{rel}(a, b)$ above. Take norms over every entry (any shape), compute in
# float64, return a Python `float` (a 0-d tensor is accepted too), and return `0.0` — not
# NaN — when both are zero. `torch.linalg.vector_norm` flattens for you.
# %% solution id=relative_error
def relative_error(a, b):
    """‖a − b‖ / max(‖a‖, ‖b‖, tiny), norms over every entry, in float64."""
    ### BEGIN SOLUTION
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    norm = torch.linalg.vector_norm  # √(Σ entry²) over every axis, whatever the shape
    tiny = torch.finfo(torch.float64).tiny  # keeps 0/0 (both zero) at 0 instead of NaN
    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
    ### END SOLUTION

# %% test id=test_relative_error points=1
"""relative_error: scale-free (1e-6 to 1e6), symmetric, any shape, and 0 — not NaN — when both are zero."""
course.selfcheck.relative_error(relative_error)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.relative_error(relative_error)
### END HIDDEN TESTS

# %% [markdown]
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
# 3. **Linear.** $z_c = \sum_k x_k W_{kc} + b_c$, so $\bar W_{kc} = x_k \bar z_c$, i.e.
#    $\bar W = x^\top \bar z$ with shapes $(2, 1)(1, 3) \to (2, 3)$, the shape of $W$;
#    $\bar b = \bar z$; and $\bar x_k = \sum_c \bar z_c W_{kc}$, i.e. $\bar x = \bar z\, W^\top$,
#    $(1, 3)(3, 2) \to (1, 2)$, the shape of $x$.
#
# Here are the numbers — computed by autograd, so you can hold your own arithmetic
# against them. Each line is one stage; `→` marks the forward pass, `←` the backward one.
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
# Each row's loss enters $L$ with weight $1/M$, so row by row the collapse gives
#
# $$\bar z = \frac{1}{M}(y - E) \quad (M, C),$$
#
# where row $m$ of $E$ is the one-hot $e_{t_m}$. Then the linear layer, with the shapes
# doing the bookkeeping:
#
# - $\bar W = x^\top \bar z$: $(K, M)(M, C) \to (K, C)$. Written out,
#   $\bar W_{kc} = \sum_m x_{mk}\, \bar z_{mc}$ — **a sum over the batch**: every example
#   contributes to every weight.
# - $\bar b = \sum_m \bar z_m$, shape $(C,)$: $b$ was *broadcast* (copied) to every row in the
#   forward pass, so its gradient *sums* the rows. Broadcast forward, reduce backward.
# - $\bar x = \bar z\, W^\top$: $(M, C)(C, K) \to (M, K)$. $\bar x_{mk} = \sum_c \bar z_{mc} W_{kc}$
#   — no sum over the batch: each example's $\bar x$ depends on its own row only.
#
# If you forget which side a transpose goes on, write the shapes down: there is exactly one
# way to combine $x$ $(M, K)$ and $\bar z$ $(M, C)$ into something $(K, C)$.
#
# Return `(dx, dW, db)`, shaped like `(x, W, b)`, and do not call autograd — the test
# refuses it. `torch.softmax` and `torch.nn.functional.one_hot` are fine: they are the
# forward pass.
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

# %% test id=test_linear_softmax_ce_backward points=3
"""linear_softmax_ce_backward: dx, dW, db at batch 1 and 7, square and non-square W, against autograd; no autograd inside."""
course.selfcheck.linear_softmax_ce_backward(linear_softmax_ce_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_softmax_ce_backward(linear_softmax_ce_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. When a backward is wrong: the debugging order
#
# Wrong gradients are rarely random. They are the right answer with one mistake applied, and
# the same few mistakes account for nearly all of them. Check in this order:
#
# 1. **A transpose.** $\bar W = \bar z^\top x$ instead of $x^\top \bar z$. When $W$ is not
#    square the shape gives it away; when it is square the shapes agree and only the values
#    are wrong.
# 2. **A missing reduction over the batch axis.** $\bar b$ taken from one row, or a mean
#    written as a sum. At batch 1 a sum over the batch has one term and a mean divides by 1,
#    so this bug is **invisible at batch 1** and shows above it.
# 3. **A sign.** `onehot − softmax` instead of `softmax − onehot`; relative error exactly 2.
# 4. **A scatter that needed an atomic add.** When several outputs read the same input (an
#    embedding row used twice, repeated indices), their gradients must all be added into it;
#    a plain store keeps one. Invisible without repeated indices — notebook 06.
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


rel = course.relative_error  # the course's copy of what you wrote in Part B
grads = {M: correct_grads(M, K=4, C=4) for M in (1, 7)}  # square W: a transpose keeps its shape
bugs = {  # each bug applied to the correct (z̄, W̄, b̄)
    "dW transposed (square W)": lambda M, dz, dW, db: rel(dW.T, dW),
    "mean written as a sum: dW × M": lambda M, dz, dW, db: rel(M * dW, dW),
    "db from row 0 only": lambda M, dz, dW, db: rel(dz[0], db),
    "sign flipped: −dW": lambda M, dz, dW, db: rel(-dW, dW),
}
print(f"{'bug':<32}{'batch 1':>9}{'batch 7':>9}")
for name, bug in bugs.items():
    print(f"{name:<32}" + "".join(f"{bug(M, *grads[M]):>9.2f}" for M in (1, 7)))

# %% [markdown]
# Two of the four bugs score a perfect 0.00 at batch 1. That is the whole argument for
# batch 7. The `diagnosis:` line of every test cell in this course runs exactly this kind of
# comparison: it checks your result against the right answer *transposed, negated, scaled,
# and un-reduced*, and names the one that matches.
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
# - Debug in the order transpose → batch reduction → sign → atomic scatter, and test at batch 1 *and* 7.
#
# Next, `01_matmul_from_shapes`: deriving matmul backwards from shapes alone, and what the
# batch reduction in $\bar W$ means for a GPU kernel.

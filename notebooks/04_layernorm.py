# %% [markdown]
# # 04 — LayerNorm: two scalars per row, one sum across programs
#
# LayerNorm rescales each row of activations to mean 0 and variance 1, then applies a learned
# per-feature scale $\gamma$ and shift $\beta$. Every output of a row depends on every input of
# that row, through the row's mean and variance, so its Jacobian is a dense $N \times N$ matrix
# per row — the same situation as softmax in notebook 02. And like softmax's, it collapses:
# this time not to one scalar per row but to **two**.
#
# Something new comes with it. $\gamma$ and $\beta$ are shared by every row, so their gradients
# are sums **over every row of the batch**. On a GPU, where each program owns a few rows, that is
# the first gradient in this course that crosses program boundaries, and it needs a plan: partial
# sums and a second pass, or atomics.
#
# | part | you write | points |
# |---|---|---|
# | A | `layernorm_forward(x, gamma, beta, eps=1e-5)` → `(y, mean, rstd)` | 1 |
# | B | `layernorm_backward(dy, x, gamma, mean, rstd)` → `(dx, dgamma, dbeta)`, the two-scalar collapse | 3 |
# | C | `rmsnorm_backward(dy, x, g, rrms)` → `(dx, dg)`, the one-scalar variation | 2 |
# | D | `TritonLayerNorm`: a fused Triton backward kernel with partial $\bar\gamma$/$\bar\beta$ sums, and the second pass | 2 |
# | E | `triton_layernorm(x, gamma, beta, eps=1e-5)` — any leading dimensions, differentiable | 1 |
#
# Each part ends with a test cell. It prints `✓ ...` when your function is right; when it is
# wrong, its first line names the kind of bug (`diagnosis: batch-reduction — ...`) and the next
# lines say where it first went wrong.
# %%
import course

# %%
import matplotlib.pyplot as plt
import torch

from course import parameter_reduction

F64 = torch.float64  # every gradient check runs in float64
DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with Triton kernels in the interpreter


def unfinished(exc):
    """Whether `exc` comes from an exercise that still raises course.todo().

    Triton wraps what a kernel raises in its own error, so follow the chain of causes.
    """
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "course.todo()" in str(exc):
            return True
        exc = exc.__cause__
    return False

# %% [markdown]
# ## 1. The forward, with names for the code
#
# LayerNorm acts on the **last** dimension. Think of $x$ as rows of length $N$ (a token's
# features); every leading dimension (batch, sequence) just counts rows. For one row:
#
# $$\mu = \frac1N \sum_j x_j, \qquad \sigma^2 = \frac1N \sum_j (x_j - \mu)^2, \qquad
# \text{rstd} = \frac{1}{\sqrt{\sigma^2 + \varepsilon}},$$
#
# $$\hat x = (x - \mu)\cdot \text{rstd}, \qquad y = \hat x \odot \gamma + \beta .$$
#
# Shapes, once: for `x` of shape `(..., N)`, `gamma` and `beta` are `(N,)`, `y` is `(..., N)`,
# and `mean` ($\mu$) and `rstd` are **one number per row**: the shape of `x` without its last
# dimension, `x.shape[:-1]`. To use them against a row, give them back a size-1 axis,
# `mean[..., None]` or `mean.unsqueeze(-1)`, so they broadcast along the row and not across rows.
#
# Two details cost people real time:
#
# - $\sigma^2$ divides by $N$ — the **biased** variance. `torch.var` divides by $N - 1$ unless you
#   pass `correction=0` (or `unbiased=False`).
# - $\varepsilon$ goes **inside** the square root: it keeps $\text{rstd}$ finite for a constant row.
#
# The name `rstd` (reciprocal standard deviation) is what kernels store: a multiply by `rstd`
# is cheaper than a divide by $\sigma$, and it is the number the backward needs.
# %%
row = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)  # (N,) with N = 4
print("torch.var(row)               =", round(torch.var(row).item(), 4), " <- divides by N − 1")
print("torch.var(row, correction=0) =", round(torch.var(row, correction=0).item(), 4), " <- divides by N: LayerNorm's σ²")
y_torch = torch.nn.functional.layer_norm(row, (4,), eps=0.0)  # no γ, β: y = x̂
print("layer_norm(row)              =", [round(v, 4) for v in y_torch.tolist()], "= (row − 2.5) / √1.25")

# %% [markdown]
# ## Part A — layernorm_forward (1 point)
#
# Write the forward pass for `x` of shape `(..., N)` — any number of leading dimensions — and
# return `(y, mean, rstd)`: `y` shaped like `x`, `mean` and `rstd` shaped like `x` **without its
# last dimension** (so `(7,)` for `x` of shape `(7, N)`, and `(2, 3)` for `(2, 3, N)`). Use the
# `eps` you are given. No `torch.nn.functional.layer_norm` here — it is the reference.
# %% solution id=layernorm_forward
def layernorm_forward(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last dim of x (..., N), with γ and β of shape (N,).

    Returns (y, mean, rstd): y shaped like x; mean and rstd one per row, shaped x.shape[:-1].
    """
    ### BEGIN SOLUTION
    mean = x.mean(dim=-1)  # (...,): μ, one per row
    xc = x - mean.unsqueeze(-1)  # (..., N): the row minus its own mean
    var = (xc * xc).mean(dim=-1)  # (...,): σ², biased — divide by N
    rstd = torch.rsqrt(var + eps)  # (...,): 1/√(σ² + ε), ε inside the root
    xhat = xc * rstd.unsqueeze(-1)  # (..., N): x̂
    y = xhat * gamma + beta  # γ and β broadcast to every row
    return y, mean, rstd
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what shape does each statistic have, and how does it meet a row?</summary>
#
# A reduction over the last dimension leaves one number per row, shaped `x.shape[:-1]`: that is the shape
# `mean` and `rstd` must be returned in. To subtract a row's mean from that row, the statistic needs a
# size-1 last axis back, so that it broadcasts **along** its row and not across rows (§1).
#
# </details>
#
# <details><summary>Hint 2 — which variance, and where does ε go?</summary>
#
# LayerNorm's $\sigma^2$ divides by $N$, not $N - 1$: §1's first cell shows which call gives which. And
# $\varepsilon$ is added to the variance, before the square root. `rstd` is the reciprocal of the
# standard deviation, not the standard deviation.
#
# </details>
#
# <details><summary>Hint 3 — check it by hand on §1's row</summary>
#
# For the row `[1, 2, 3, 4]` of §1, with $\gamma = 1$, $\beta = 0$ and $\varepsilon = 0$: what are $\mu$ and
# $\sigma^2$ (§1's first cell printed one of them)? Then rstd is $1/\sqrt{1.25} \approx 0.894$, and $y$ should match
# the `layer_norm(row)` line §1 printed. Run your function on that row, reshaped to `(1, 4)`, and compare all
# three outputs before the test does. If `mean` comes back as `(1, 1)` or `rstd` as `(1, 4)`, look at Hint 1
# again. torch has `torch.rsqrt`, which takes the reciprocal square root in one call.
#
# </details>
# %% test id=test_layernorm_forward points=1
"""layernorm_forward: y, mean and rstd at batch 1 and 7, for 3-D x and for a
transposed (non-contiguous) x, N not a power of two, eps honoured, against
torch.nn.functional.layer_norm; mean and rstd shaped x.shape[:-1]."""
course.selfcheck.layernorm_forward(layernorm_forward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.layernorm_forward(layernorm_forward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Two reductions along each row, and one elementwise pass:
#
# $$\mu = \operatorname{mean}(x), \qquad \boxed{\;\text{rstd} = \frac{1}{\sqrt{\operatorname{mean}\big((x-\mu)^2\big) + \varepsilon}}, \qquad y = (x - \mu)\cdot\text{rstd} \odot \gamma + \beta\;}$$
#
# with $\mu$ and rstd one number per row, given a size-1 axis back to act on their row: in code the biased
# variance is `((x - mean[..., None]) ** 2).mean(dim=-1)` (or `x.var(dim=-1, correction=0)`), and
# `torch.rsqrt(var + eps)` is $1/\sqrt{\sigma^2 + \varepsilon}$. Those two numbers per row are what a LayerNorm
# keeps for its backward.
#
# </details>
# %% [markdown]
# ## 2. The Jacobian looks dense
#
# Move one input $x_j$ and the whole row moves: $\mu$ changes, so every $x_i - \mu$ changes, and
# $\sigma$ changes, so every $\hat x_i$ is rescaled. So every $\partial \hat x_i / \partial x_j$ can be
# nonzero: a dense $N \times N$ matrix per row. Here it is for one row of 8, built by autograd:
# %%
gen = torch.Generator().manual_seed(0)
N = 8
x_row = 3.0 * torch.randn(N, generator=gen, dtype=F64) + 1.0  # (N,): one row, mean and spread far from 0 and 1
mu = x_row.mean()
rs = 1.0 / torch.sqrt(((x_row - mu) ** 2).mean() + 1e-5)  # rstd of this row
xh = (x_row - mu) * rs  # x̂, (N,)


def normalise(row):  # x ↦ x̂ for one row: LayerNorm without γ and β
    return torch.nn.functional.layer_norm(row, row.shape, eps=1e-5)


J = torch.autograd.functional.jacobian(normalise, x_row)  # (N, N), built once here to look at it
ones = torch.ones(N, dtype=F64)
course.plots.matrices({"J = ∂x̂/∂x (autograd)": J}, title="A dense Jacobian")
plt.show()

# %% check-output
print(f"entries of J that are zero: {(J.abs() < 1e-12).sum().item()} of {N * N}")
print("J is symmetric:", torch.allclose(J, J.mT, rtol=0, atol=1e-12))
print("rank of J − rstd·I:", torch.linalg.matrix_rank(J - rs * torch.eye(N, dtype=F64)).item(), "of", N)

# %% [markdown]
# Dense, yet $J$ minus rstd times the identity has rank 2: the identity and two more matrices of rank one.
# Part B asks you to derive them, and what that structure makes the product cost.
#
# ## 3. The question: what does $\bar x$ need?
#
# The backward needs $\bar x$ from $\bar y$. Two things set it up; the derivation is Part B.
#
# - $y = \hat x \odot \gamma + \beta$ is **elementwise** in $\hat x$. Call the gradient that reaches $\hat x$
#   $\bar{\hat x}$ (`dxhat` in code) — what it is, you will work out. Then, row by row,
#   $\bar x = J^\top \bar{\hat x}$ with the $J$ of §2.
# - $J$ is the identity and two rank-one matrices (§2 measured the rank). What does a rank-one matrix
#   times a vector cost?
#
# Built and multiplied, $J$ costs $N^2$ work and memory per row. The title of this notebook says the
# product collapses to **two numbers per row**. Which two, and why exactly two? That is the derivation.
#
# ## 4. $\bar\gamma$ and $\bar\beta$ — and what the forward saves
#
# $\gamma$ and $\beta$ are **broadcast** in the forward: the same $N$ numbers are used by every row of a
# `(..., N)` input. Notebook 01 said what that does to a gradient. Whatever it is, $\bar\gamma$ and
# $\bar\beta$ have the shape of $\gamma$, $(N,)$, for any number of leading axes of $x$ — and a mistake
# there hides at batch 1, so the checks run at batch 7.
#
# **What the forward saves.** The backward will need $\hat x$ (it is in $J$). $\hat x$ is a full $N$ per
# row; $\mu$ and $\text{rstd}$ are one number per row each, and with $x$ they rebuild
# $\hat x = (x - \mu)\cdot\text{rstd}$ for two FLOPs an element. $x$ is kept anyway (in a transformer
# it is the residual stream), so a LayerNorm saves **$x$, $\gamma$, and two scalars per row** — not
# $\hat x$, which would be a second activation-sized tensor held from the forward to the backward.
# That is why `layernorm_backward` below takes `mean` and `rstd`, not `xhat`.
# %% [markdown]
# ## Part B — layernorm_backward (3 points)
#
# The forward is §1's: $y = \hat x \odot \gamma + \beta$ with $\hat x = (x - \mu)\cdot\text{rstd}$ row by row.
# Given the upstream gradient `dy` (shaped like `x`), the input `x` of shape `(..., N)`, `gamma`
# `(N,)`, and the `mean` and `rstd` the forward saved (shaped `x.shape[:-1]`), return
# `(dx, dgamma, dbeta)` shaped like `(x, gamma, gamma)`, for any number of leading dimensions.
#
# Rules: rebuild $\hat x$ from what was saved (nothing else is); $O(N)$ work and $O(1)$ extra numbers
# per row — no $N \times N$ matrix; no autograd (the test refuses it). Derive $\bar\gamma$, $\bar\beta$ from how
# $\gamma$ and $\beta$ are used, and $\bar x$ from $J$, one question at a time:
#
# 1. What is $\partial \mu / \partial x_j$?
# 2. What is $\partial \sigma^2 / \partial x_j$ — and what becomes of the term that goes through $\mu$?
# 3. What is $\partial\,\text{rstd} / \partial x_j$, written with rstd and $\hat x_j$?
# 4. By the product rule on $\hat x_i = (x_i - \mu)\,\text{rstd}$, what is $\partial \hat x_i / \partial x_j$? Write it
#    as a matrix: the identity times rstd, and the two rank-one pieces §2 measured.
# 5. Each rank-one piece times $\bar{\hat x}$: how many numbers per row does it need?
#
# The hints below the cell help if you get stuck; open them one at a time.
# %% solution id=layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    """Gradients of y = LayerNorm(x) ⊙ γ + β given ȳ = dy, from the saved mean and rstd.

    dy, x: (..., N); gamma: (N,); mean, rstd: x.shape[:-1].
    Returns (dx, dgamma, dbeta), shaped like (x, gamma, gamma).
    """
    ### BEGIN SOLUTION
    N = x.shape[-1]  # features
    rstd = rstd.unsqueeze(-1)  # (..., 1): one per row, broadcast along it
    xhat = (x - mean.unsqueeze(-1)) * rstd  # (..., N): rebuilt, never saved
    dxhat = gamma * dy  # (..., N): the gradient reaching x̂
    c1 = (xhat * dxhat).mean(dim=-1, keepdim=True)  # (..., 1)
    c2 = dxhat.mean(dim=-1, keepdim=True)  # (..., 1)
    dx = (dxhat - (xhat * c1 + c2)) * rstd  # (..., N), the shape of x
    dgamma = (dy * xhat).reshape(-1, N).sum(dim=0)  # (N,): γ was used by every row
    dbeta = dy.reshape(-1, N).sum(dim=0)  # (N,)
    return dx, dgamma, dbeta
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what reaches x̂, and what shape is each gradient?</summary>
#
# $y_j = \hat x_j \gamma_j + \beta_j$: output $j$ of a row depends on $\hat x_j$ alone, through one multiply.
# So what is $\bar{\hat x}_j$? As for the shapes: `dx` is `(..., N)` like `x`; `dgamma` and `dbeta` are
# `(N,)` like $\gamma$ — every leading axis of `x` must be gone from them. $\gamma$ and $\beta$ were used
# by every row. What did notebook 01 say a broadcast forward means for the backward?
#
# </details>
#
# <details><summary>Hint 2 — the derivatives through μ and σ²</summary>
#
# $\mu$ is a mean, so each $x_j$ enters it with weight $1/N$. For $\sigma^2 = \frac1N \sum_i (x_i - \mu)^2$, differentiate
# each square by $x_j$: it has a term where $i = j$ and a term through $\mu$, which carries the factor
# $\sum_i (x_i - \mu)$. What is that sum for any row? Then rstd $= (\sigma^2 + \varepsilon)^{-1/2}$ is a power: the
# chain rule gives $-\tfrac12\,\text{rstd}^3$ times $\partial \sigma^2/\partial x_j$. Simplify it with
# $\hat x_j = (x_j - \mu)\,\text{rstd}$.
#
# </details>
#
# <details><summary>Hint 3 — J times a vector, without J</summary>
#
# Step 3 comes out as $\partial\,\text{rstd}/\partial x_j = -\text{rstd}^2\, \hat x_j / N$. The product rule on
# $(x_i - \mu)\,\text{rstd}$ then gives three terms: one only where $i = j$, one the same for every $(i, j)$, and one
# that is an outer product of a vector with itself. $J$ is symmetric, so each row's $\bar x$ is $J$ times that
# row's $\bar{\hat x}$. For a rank-one piece, $(u w^\top) v = u \langle w, v \rangle$: a fixed vector times **one
# number**. On $v = (1, 2, 3)$, $N = 3$: what is $\tfrac13 \mathbf 1 \mathbf 1^\top v$? Which number does the other
# piece need — and where does the factor rstd in front of all three go? Each is one number per row: to act on its row it needs a size-1 last axis, or it broadcasts
# across rows (with as many rows as features, row $i$'s number lands on column $i$ of every row).
#
# </details>
#
# <details><summary>Hint 4 — the parameter gradients</summary>
#
# Entry $j$ of $\gamma$ multiplies $\hat x_j$ in **every** row, and each of those rows sends back its own
# $\bar y$. Collect every row's contribution to entry $j$: over every leading axis, so flatten them into
# one first. $\beta$ is the same with $\hat x$ replaced by what $\beta_j$ is multiplied by.
#
# </details>
#
# <details><summary>Hint 5 — two properties your x̄ must have</summary>
#
# Every row of $J$ sums to zero and is orthogonal to $\hat x$: $J\mathbf 1 = 0$ (adding a constant to a row
# changes nothing after the mean is subtracted) and $J \hat x = 0$ (scaling the centred row changes nothing
# after dividing by its spread, for $\varepsilon \to 0$). Since $\bar x = J \bar{\hat x}$ and $J$ is symmetric,
# each row of your `dx` must sum to about 0, and its dot product with that row's $\hat x$ must be about
# 0 — print both for the cell's case, in float64. A nonzero row sum points at the number that came from
# $\mathbf 1 \mathbf 1^\top$; a nonzero dot product with $\hat x$ points at the one from $\hat x \hat x^\top$.
# For $\bar\gamma$ at batch 7: is its shape `(N,)`, and does it change when you change one row of `dy`
# other than the first?
#
# </details>
# %% test id=test_layernorm_backward points=3
"""layernorm_backward: dx, dgamma, dbeta at batch 1 and 7 (a square case
too), for 3-D x and for transposed (non-contiguous) x and dy, N not a power
of two, against autograd through torch.nn.functional.layer_norm; no autograd
inside."""
course.selfcheck.layernorm_backward(layernorm_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.layernorm_backward(layernorm_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The Jacobian.** $\partial \mu / \partial x_j = 1/N$; $\partial \sigma^2 / \partial x_j = \frac2N (x_j - \mu)$ (the term through
# $\mu$ vanishes because $\sum_i (x_i - \mu) = 0$); $\partial\,\text{rstd} / \partial x_j
# = -\tfrac12 \text{rstd}^3 \cdot \tfrac2N (x_j - \mu) = -\text{rstd}^2\, \hat x_j / N$. With the product rule:
#
# $$\frac{\partial \hat x_i}{\partial x_j} = \text{rstd}\Big(\delta_{ij} - \frac1N - \frac{\hat x_i \hat x_j}{N}\Big)
# \qquad\Longleftrightarrow\qquad
# J = \text{rstd}\,\Big(I - \tfrac1N \mathbf 1 \mathbf 1^\top - \tfrac1N \hat x \hat x^\top\Big).$$
#
# **The collapse.** $y = \hat x \odot \gamma + \beta$ is elementwise in $\hat x$, so the gradient reaching $\hat x$ is
# $\bar{\hat x} = \gamma \odot \bar y$. $J$ is symmetric, and each rank-one piece of it multiplies a vector
# by doing one dot product, $(u w^\top) v = u \langle w, v \rangle$:
#
# $$\mathbf 1 \mathbf 1^\top \bar{\hat x} = \mathbf 1 \cdot \textstyle\sum_j \bar{\hat x}_j, \qquad
# \hat x \hat x^\top \bar{\hat x} = \hat x \cdot \sum_j \hat x_j\, \bar{\hat x}_j .$$
#
# Divided by $N$ and named, they are the only two numbers that couple the row:
#
# $$c_1 = \operatorname{mean}(\hat x \odot \bar{\hat x}), \qquad c_2 = \operatorname{mean}(\bar{\hat x}),
# \qquad \boxed{\;\bar x = \big(\bar{\hat x} - (\hat x\, c_1 + c_2)\big)\cdot \text{rstd}\;}$$
#
# Two reductions over the row, then one elementwise pass: $O(N)$ work and $O(1)$ extra memory per row
# instead of an $N \times N$ matrix. $\gamma$ and $\beta$ are broadcast in the forward, so their gradients
# reduce over every row (notebook 01's law):
#
# $$\boxed{\;\bar\gamma = \sum_{\text{rows}} \bar y \odot \hat x, \qquad \bar\beta = \sum_{\text{rows}} \bar y\;}$$
#
# In code: $\hat x$ rebuilt from `mean[..., None]` and `rstd[..., None]`, `gamma * dy` for $\bar{\hat x}$, $c_1$ and
# $c_2$ each a `.mean(dim=-1, keepdim=True)`, $\bar x$ as `(dxhat - (xhat * c1 + c2)) * rstd`, and $\bar\gamma$ as
# `(dy * xhat).reshape(-1, N).sum(dim=0)` — every leading axis flattened into one, then summed.
#
# </details>
#
# §2's row of 8 again, its autograd Jacobian beside the three pieces you derived:
# %%
N = x_row.numel()  # 8
course.plots.matrices({
    "J = ∂x̂/∂x (autograd)": J,
    "rstd · I": rs * torch.eye(N, dtype=F64),
    "− rstd/N · 1 1ᵀ": -rs / N * torch.outer(ones, ones),
    "− rstd/N · x̂ x̂ᵀ": -rs / N * torch.outer(xh, xh),
}, title="A dense Jacobian that is the identity minus two rank-one matrices")
plt.show()
J_formula = rs * (torch.eye(N, dtype=F64) - torch.outer(ones, ones) / N - torch.outer(xh, xh) / N)
print("autograd's J equals rstd·(I − 11ᵀ/N − x̂x̂ᵀ/N):", torch.allclose(J, J_formula, rtol=0, atol=1e-12))

# %% [markdown]
# **Without $\gamma$ and $\beta$** ($\gamma = 1$, $\beta = 0$, so $y = \hat x$ and $\bar{\hat x} = \bar y$) it reads,
# with $\sigma = \sqrt{\sigma^2 + \varepsilon} = 1/\text{rstd}$,
#
# $$\bar x = \frac{\bar y - \operatorname{mean}(\bar y) - y \cdot \operatorname{mean}(\bar y \odot y)}{\sigma}:$$
#
# subtract the mean of the gradient (the centring), subtract the part of it along $y$ (the scaling),
# divide by $\sigma$. Here it is against central differences of the forward, which know nothing of the
# derivation:
# %% check-output
gen = torch.Generator().manual_seed(1)
x = 2.0 * torch.randn(3, 6, generator=gen, dtype=F64) + 0.5  # (M, N) = (3, 6)
dy = torch.randn(3, 6, generator=gen, dtype=F64)  # ȳ, shaped like y


def normalise_rows(x):  # y = x̂ row by row: LayerNorm without γ, β
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5)


y = normalise_rows(x)
sigma = torch.sqrt(x.var(dim=-1, correction=0, keepdim=True) + 1e-5)  # (M, 1)
dx_formula = (dy - dy.mean(-1, keepdim=True) - y * (dy * y).mean(-1, keepdim=True)) / sigma  # (M, N)
(dx_numeric,) = course.gradcheck.numerical_vjp(normalise_rows, (x,), dy)  # central differences, ε = 1e-6
err = course.relative_error(dx_formula, dx_numeric)
print("x̄ = (ȳ − mean ȳ − y·mean(ȳ⊙y)) / σ agrees with central differences:", err < 1e-8)

# %% [markdown]
# The naive backward builds the Jacobian of each row and multiplies — correct, and $N^2$ work and
# memory per row:
# %%
def layernorm_backward_dense(dy, x, gamma, mean, rstd):
    """x̄ for x (M, N) by building each row's N×N Jacobian: the version the collapse replaces."""
    M, N = x.shape  # rows, features
    dx = torch.empty_like(x)
    for m in range(M):
        r = rstd[m]
        xh_m = (x[m] - mean[m]) * r  # (N,)
        J_m = r * (torch.eye(N, dtype=x.dtype) - 1.0 / N - torch.outer(xh_m, xh_m) / N)  # (N, N): write N²
        dx[m] = J_m @ (gamma * dy[m])  # read N² + N, write N; J is symmetric
    return dx

# %% [markdown]
# Your collapse against the dense version, and the cost of each, for rows of 4096:
# %%
try:
    gen = torch.Generator().manual_seed(2)
    M, N = 5, 9  # rows, features
    x = 2.0 * torch.randn(M, N, generator=gen, dtype=F64) + 1.0
    gamma = torch.randn(N, generator=gen, dtype=F64)
    dy = torch.randn(M, N, generator=gen, dtype=F64)
    mean = x.mean(-1)  # (M,)
    rstd = 1.0 / torch.sqrt(x.var(-1, correction=0) + 1e-5)  # (M,)
    dx, dgamma, dbeta = layernorm_backward(dy, x, gamma, mean, rstd)
    err = course.relative_error(dx, layernorm_backward_dense(dy, x, gamma, mean, rstd))
    print(f"x̄: collapsed vs dense Jacobian, relative error {err:.0e} — {course.gradcheck.verdict(err)}")
except NotImplementedError:
    print("Finish Part B first: this cell compares your layernorm_backward with the dense version.")
except Exception as exc:  # the test cell above says what is wrong
    print(f"layernorm_backward raised {type(exc).__name__}: {exc}. Fix Part B, then rerun.")
N = 4096
print(f"per row of {N}: the dense Jacobian holds {N * N:,} numbers; the collapse keeps 2 (c1, c2)")

# %% [markdown]
# ## 5. RMSNorm: the same skeleton, fewer pieces
#
# RMSNorm (LLaMA, T5) drops the centring and the shift: no $\mu$, no $\beta$.
#
# $$\text{rrms} = \frac{1}{\sqrt{\operatorname{mean}(x^2) + \varepsilon}}, \qquad \hat x = x\cdot\text{rrms},
# \qquad y = \hat x \odot g .$$
#
# The forward saves `rrms`, one number per row. Its backward is yours to derive: redo Part B's
# questions without $\mu$ and see which pieces of the Jacobian survive, then Part B's collapse with what is left.
# %% [markdown]
# ## Part C — rmsnorm_backward (2 points)
#
# Given `dy` and `x` of shape `(..., N)`, the weight `g` `(N,)` and the `rrms` the forward saved
# (shape `x.shape[:-1]`), return `(dx, dg)`, shaped like `(x, g)`, for any number of leading
# dimensions. Same rules as Part B: $O(N)$ per row, no $N \times N$ matrix, no autograd.
# %% solution id=rmsnorm_backward
def rmsnorm_backward(dy, x, g, rrms):
    """Gradients of y = x · rrms ⊙ g, rrms = 1/√(mean(x²) + ε), from the saved rrms.

    dy, x: (..., N); g: (N,); rrms: x.shape[:-1].
    Returns (dx, dg), shaped like (x, g).
    """
    ### BEGIN SOLUTION
    N = x.shape[-1]  # features
    rrms = rrms.unsqueeze(-1)  # (..., 1)
    xhat = x * rrms  # (..., N)
    dxhat = g * dy  # (..., N): the gradient reaching x̂
    c1 = (xhat * dxhat).mean(dim=-1, keepdim=True)  # (..., 1): the one scalar left
    dx = (dxhat - xhat * c1) * rrms  # (..., N)
    dg = (dy * xhat).reshape(-1, N).sum(dim=0)  # (N,): g was used by every row
    return dx, dg
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which pieces of J survive without μ?</summary>
#
# Redo Part B's questions 1–3 with $\mu = 0$: there is no $\partial\mu/\partial x_j$. What is
# $\partial\,\text{rrms}/\partial x_j$, with rrms $= (\operatorname{mean}(x^2) + \varepsilon)^{-1/2}$? Which of LayerNorm's two
# rank-one pieces came from $\mu$? What is left is symmetric again.
#
# </details>
#
# <details><summary>Hint 2 — the structure</summary>
#
# As in Part B: find the gradient that reaches $\hat x$, multiply it by $J$ without building $J$ (one
# rank-one piece, so one number per row, kept with a size-1 last axis), and sum $g$'s gradient over
# every row, because $g$ is used by every row.
#
# </details>
#
# <details><summary>Hint 3 — the one derivative that changes</summary>
#
# With no $\mu$, the only way $x_j$ reaches $\hat x_i$ besides the diagonal is through
# $\text{rrms} = (\operatorname{mean}(x^2) + \varepsilon)^{-1/2}$. Differentiate the power first, then the mean:
# how does $\partial\,\text{rrms}/\partial x_j$ read in terms of $\text{rrms}$ and $\hat x_j$ alone?
#
# Put it into the product rule for $\hat x_i = x_i \cdot \text{rrms}$ and compare the $J$ you get with Part B's:
# which of Part B's rank-one pieces does it lose, and what happens to the row scalar that piece made? The
# properties of Part B's Hint 5 then become one: each row of your `dx` must be orthogonal to its $\hat x$ (it
# need not sum to zero any more — why not?).
#
# </details>
# %% test id=test_rmsnorm_backward points=2
"""rmsnorm_backward: dx and dg at batch 1 and 7 (a square case too), for 3-D
x and for transposed (non-contiguous) x and dy, N not a power of two,
against autograd; no autograd inside."""
course.selfcheck.rmsnorm_backward(rmsnorm_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.rmsnorm_backward(rmsnorm_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **One scalar per row.**
# Without $\mu$, $\partial\,\text{rrms}/\partial x_j = -\text{rrms}^2\, \hat x_j / N$ and
#
# $$\frac{\partial \hat x_i}{\partial x_j} = \text{rrms}\Big(\delta_{ij} - \frac{\hat x_i \hat x_j}{N}\Big)
# \qquad\Longleftrightarrow\qquad J = \text{rrms}\,\Big(I - \tfrac1N \hat x \hat x^\top\Big).$$
#
# The $\mathbf 1 \mathbf 1^\top$ piece is gone — it came from $\mu$ — and with it $c_2$. With
# $\bar{\hat x} = g \odot \bar y$ and $c_1 = \operatorname{mean}(\hat x \odot \bar{\hat x})$,
#
# $$\boxed{\;\bar x = (\bar{\hat x} - \hat x\, c_1)\cdot\text{rrms}, \qquad \bar g = \sum_{\text{rows}} \bar y \odot \hat x\;}$$
#
# Part B with a piece removed: $\bar g$ sums over the batch for the same reason $\bar\gamma$ does. In code,
# $\bar x$ is `(dxhat - xhat * c1) * rrms` with `rrms[..., None]`, and $\bar g$ is Part B's $\bar\gamma$.
#
# </details>
# %% [markdown]
# ## 6. On a GPU: x̄ is parallel, γ̄ is a reduction across programs
#
# A fused LayerNorm backward gives each program some rows. For $\bar x$ that is all it needs: a row's
# $\bar x$ reads that row of $x$ and $\bar y$, its two saved scalars, and $\gamma$ — nothing another program
# computes. $\bar\gamma$ and $\bar\beta$ are different: **every** row adds into **every** entry, so the
# programs must combine their work. Two ways to do it:
#
# 1. **Partial sums, then a second pass.** Program $p$ walks its own contiguous group of rows and
#    collects $\sum \bar y \odot \hat x$ and $\sum \bar y$ for those rows in **row $p$** of a `(n_programs, N)`
#    buffer. No other program ever touches that row, so no synchronisation is needed. A second, tiny
#    pass sums the buffer over its `n_programs` rows.
# 2. **Atomics, or a lock.** Each program adds its partial sums into memory that other programs
#    add into too: entry by entry with `tl.atomic_add`, or — as Triton's LayerNorm tutorial does,
#    into one of a few shared rows — by taking a lock (spinning on `tl.atomic_cas` until a flag is
#    free), loading the row, adding, storing, and releasing the flag. Less buffer memory; the final
#    sum needs no second pass (or a much smaller one).
#
# | | partial sums + second pass | atomics or a lock |
# |---|---|---|
# | result | **deterministic**: the same sum in the same order, bit for bit, every run | depends on which program adds first: floating-point addition is not associative, so the last bits change run to run |
# | contention | none: each program owns its buffer row | programs queue on the same addresses (and spin on the lock); worse with many programs and short rows |
# | cost | a `(n_programs, N)` buffer and a second launch (tiny: `n_programs` rows, not `M`) | a zero-initialised output, and a lock flag per shared row |
#
# The course's kernels take the first way, as Liger-Kernel does. The number of programs is a
# choice: enough to fill the GPU (a few per SM), few enough that the buffer stays small. Which rows
# each program touches, for 7 rows and 3 programs:
# %%
parameter_reduction.plot_parameter_reduction(n_rows=7, n_cols=6, n_programs=3)
plt.show()

# %% [markdown]
# **Why row $p$ needs no atomic — and what a shared row does.** Triton's interpreter runs a grid's
# programs one after another, so on a CPU *any* way of combining them gives the right numbers, a wrong
# one included. The accesses tell them apart. Inside `with course.sanitize() as report:` the
# course records every load, store and atomic of every program of each launch, and reports a **race**:
# an address where two programs meet and at least one of them stores without an atomic or a lock, with
# both programs and both lines. `report.plot(name)` draws which programs touched which elements of the
# tensor argument `name`.
#
# A small kernel, simpler than Part D's: program $p$ adds up its group of rows of a matrix, column by
# column, then reads the row of `OUT` that `out_row_stride` points it to, adds its total and writes it
# back. Launched twice: with `out_row_stride` $= N$ each program has its own row of a `(n_programs, N)`
# buffer; with `out_row_stride` $= 0$ every program adds into the one row of a `(1, N)` buffer.
# %%
import triton
import triton.language as tl


@triton.jit
def column_sums_kernel(
    X_ptr,  # (n_rows, n_cols) input, contiguous
    OUT_ptr,  # program p adds into the n_cols elements from OUT_ptr + p * out_row_stride
    n_rows,  # M, rows in all
    n_cols,  # N, the length of a row
    rows_per_program,  # program p sums rows p·rows_per_program, … (fewer for the last program)
    out_row_stride,  # N: each program its own row of OUT; 0: every program the same row
    BLOCK: tl.constexpr,  # a power of two ≥ n_cols
):
    """OUT[p · out_row_stride + c] += Σ over program p's rows r of X[r, c]: one read-add-store per program."""
    p = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    total = tl.zeros([BLOCK], dtype=tl.float64)
    for r in range(p * rows_per_program, tl.minimum((p + 1) * rows_per_program, n_rows)):
        total += tl.load(X_ptr + r * n_cols + cols, mask=mask, other=0.0)  # read N per row
    out = OUT_ptr + p * out_row_stride + cols
    tl.store(out, tl.load(out, mask=mask) + total, mask=mask)  # read, add, write back: no atomic


gen = torch.Generator().manual_seed(46)
acts = torch.randn(7, 6, generator=gen, dtype=F64).to(DEVICE)  # (M, N): 7 rows; 3 programs of 3, 3 and 1
own = torch.zeros(3, 6, dtype=F64, device=DEVICE)  # (n_programs, N): row p is program p's
shared = torch.zeros(1, 6, dtype=F64, device=DEVICE)  # (1, N): one row for every program
with course.sanitize() as report:
    column_sums_kernel[(3,)](acts, own, 7, 6, 3, 6, BLOCK=8)  # out_row_stride = N
    column_sums_kernel[(3,)](acts, shared, 7, 6, 3, 0, BLOCK=8)  # out_row_stride = 0
expected = acts.sum(dim=0)  # (N,)
print("own rows, then a second pass:", torch.allclose(own.sum(dim=0), expected))  # read 3N, write N
print("one shared row:              ", torch.allclose(shared[0], expected))
print(report)
if course.INTERPRETED:  # on a GPU the programs really run at once, and nothing is recorded
    report.plot("OUT_ptr", launch=0)
    report.plot("OUT_ptr", launch=1)
    plt.show()

# %% [markdown]
# Both sums are right on the CPU. In the first picture every element of `OUT` has one colour: one program
# read it and wrote it, and no other program touched it, so nothing can fall between its read and its
# write — on a GPU either. In the second, three programs read, add and write the same six elements, and
# the report calls it a race. On a GPU, where the three run at once, what can row 0 hold at the end? Try
# two programs first: both read zeros, then both store. Which of §6's two ways would make the shared row
# safe, and what does each cost?
#
# Part D's check runs your kernel under the same sanitizer: programs that meet at an address without an
# atomic or a lock fail with `race`, and a load or store that is no element of any tensor argument — a
# lane past the end of a row that no mask stopped — fails with `out-of-bounds`.
#
# Why determinism is not a detail: here are the same 64 partial rows of $\bar\gamma$ summed in float32,
# once in a fixed order (the second pass) and in the orders programs might reach an atomic.
# %% check-output
gen = torch.Generator().manual_seed(3)
partials = 100.0 * torch.randn(64, 5, generator=gen)  # (n_programs, N) float32 partial sums


def sum_in_order(order):
    total = torch.zeros(5)  # float32
    for p in order:
        total = total + partials[p]  # one rounding per addition
    return total


fixed = {tuple(sum_in_order(range(64)).tolist()) for _ in range(20)}
arrival = {tuple(sum_in_order(torch.randperm(64, generator=gen).tolist()).tolist()) for _ in range(20)}
print(f"second pass, fixed order, 20 runs : {len(fixed)} distinct result")
print(f"atomics, arrival order,   20 runs : {len(arrival)} distinct results")

# %% [markdown]
# Every one of those results is "right" to float32 precision, yet a training run that cannot be
# reproduced bit for bit is hard to debug. That, and zero contention, is what the second pass buys.
#
# ## 7. The Triton forward (given)
#
# The forward is one program per row, like notebook 03's softmax: load the row, two reductions
# ($\mu$, then $\sigma^2$), normalise, apply $\gamma$ and $\beta$, store $y$, and store the two scalars the
# backward needs. It is given; read it — your backward kernel mirrors it. Every tensor here has
# contiguous rows, so row `r` starts `r * n_cols` elements after the start.
#
# **The statistics are float32 even when $x$ is not.** A training run keeps activations in float16 or
# bfloat16, and a sum of $N$ of them held in that dtype loses the last bits of every term once the
# running total is large: float16 keeps 11 significant bits, so past a total of 2048 an added 1 rounds
# away entirely. $\mu$ and rstd are such sums, and every output of the row is divided by them. So the
# forward loads the row, converts it to the dtype of the saved statistics — `torch.promote_types(x.dtype,
# torch.float32)`: float32 for half-precision inputs, float64 for float64 — sums there, and rounds only
# $y$, once, to $x$'s dtype on the way out. The backward will follow the same rule for its own sums.
# Notebook 08 measures how large the error of a half-precision sum grows with its length.
# %%
import triton
import triton.language as tl


@triton.jit
def layernorm_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input x, contiguous
    Y_ptr,  # (n_rows, n_cols) output y
    W_ptr,  # (n_cols,) γ
    B_ptr,  # (n_cols,) β
    Mean_ptr,  # (n_rows,) μ per row, saved for the backward
    Rstd_ptr,  # (n_rows,) rstd per row, saved for the backward
    n_cols,  # N, the length of a row
    eps,  # ε, inside the square root
    BLOCK: tl.constexpr,  # a power of two ≥ n_cols
):
    """y = (x − μ)·rstd ⊙ γ + β over one row per program; stores μ and rstd.

    Per row: reads N (x) + 2N (γ, β), writes N (y) + 2 (μ, rstd).
    """
    r = tl.program_id(0).to(tl.int64)  # int64: r · n_cols can pass 2³¹ on a large activation
    offsets = tl.arange(0, BLOCK)
    in_row = offsets < n_cols  # the lanes past the end of the row hold nothing
    acc = Mean_ptr.dtype.element_ty  # the statistics' dtype: float32, or float64 for float64 inputs
    # Sum in the statistics' dtype, not in x's: a float16 running total drops the low bits of each term.
    xs = tl.load(X_ptr + r * n_cols + offsets, mask=in_row, other=0.0).to(acc)  # read N
    mu = tl.sum(xs, axis=0) / n_cols
    # Zero the lanes past the row, so that they add nothing to the variance.
    centred = tl.where(in_row, xs - mu, 0.0)
    inv_std = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
    w = tl.load(W_ptr + offsets, mask=in_row, other=0.0).to(acc)  # read N
    b = tl.load(B_ptr + offsets, mask=in_row, other=0.0).to(acc)  # read N
    y = centred * inv_std * w + b
    tl.store(Y_ptr + r * n_cols + offsets, y.to(Y_ptr.dtype.element_ty), mask=in_row)  # write N, rounded once
    tl.store(Mean_ptr + r, mu)  # write 1
    tl.store(Rstd_ptr + r, inv_std)  # write 1


def layernorm_fwd(x, gamma, beta, eps):
    """Launch layernorm_fwd_kernel on x (n_rows, N) with contiguous rows: returns y, mean (n_rows,), rstd (n_rows,).

    mean and rstd are float32 for float16/bfloat16/float32 x and float64 for float64 x; y has x's dtype.
    """
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)  # (n_rows, N)
    stats = torch.promote_types(x.dtype, torch.float32)  # at least float32: the dtype the row is summed in
    mean_out = torch.empty(n_rows, dtype=stats, device=x.device)  # (n_rows,)
    rstd_out = torch.empty(n_rows, dtype=stats, device=x.device)  # (n_rows,)
    BLOCK = triton.next_power_of_2(n_cols)  # the whole row in one block
    layernorm_fwd_kernel[(n_rows,)](x, y, gamma, beta, mean_out, rstd_out, n_cols, eps, BLOCK=BLOCK,
                                    num_warps=min(max(BLOCK // 256, 1), 8))  # more threads for longer rows
    return y, mean_out, rstd_out

# %%
gen = torch.Generator().manual_seed(4)
x = torch.randn(7, 13, generator=gen, dtype=F64).to(DEVICE)  # (M, N): batch 7, N not a power of two
gamma = torch.randn(13, generator=gen, dtype=F64).to(DEVICE)
beta = torch.randn(13, generator=gen, dtype=F64).to(DEVICE)
y_fwd, mean_fwd, rstd_fwd = layernorm_fwd(x, gamma, beta, 1e-5)
y_ref = torch.nn.functional.layer_norm(x, (13,), gamma, beta, 1e-5)
print("Triton forward matches torch.nn.functional.layer_norm:", torch.allclose(y_fwd, y_ref, rtol=0, atol=1e-12))
print("saved per row: mean", tuple(mean_fwd.shape), "and rstd", tuple(rstd_fwd.shape), "— not x̂", tuple(x.shape))

# %% [markdown]
# ### How much of a row one program can hold
#
# A program's block lives in registers, spread over its threads: `num_warps` warps of 32 threads on an
# NVIDIA GPU. With the default 4 warps, a block of 16,384 lanes is 128 lanes per thread for every
# row-long vector the kernel keeps. A thread gets at most 255 registers, and an SM has 65,536 of them
# for all its threads; whatever does not fit **spills** to local memory — DRAM behind the cache — and
# every trip there is one the fused kernel was written to avoid. So `layernorm_fwd` gives long rows more
# warps, as Triton's LayerNorm tutorial does: `num_warps = min(max(BLOCK // 256, 1), 8)`, 8 warps for a
# row of 16,384, 64 lanes per thread.
#
# The backward needs more. For a row it needs $x$, $\bar y$, $\hat x$ and $\bar{\hat x}$, and across its rows a
# program collects $\bar\gamma$ and $\bar\beta$ for every column. At $N = 16{,}384$ in float32, $\hat x$,
# $\bar{\hat x}$ and two running sums of length $N$ are $4 \times 64$ KiB: the whole 256 KiB register file of
# an SM, before a single address is kept. More warps do not help — they cut the same bytes into more
# pieces. So the backward kernel never holds a whole row. It works on one **block** of at most `MAX_BLOCK`
# lanes of a row at a time, and the running sums of $\bar\gamma$ and $\bar\beta$ live where they end up anyway:
# in the program's own row of the partial buffers.
# %% [markdown]
# ## Part D — TritonLayerNorm (2 points)
#
# Two things to write in one cell: a backward kernel that does Part B's work for a group of rows,
# and the `autograd.Function` around it. This is the contract; the code is yours.
#
# **The kernel `layernorm_bwd_kernel`.** Its signature is fixed (the test launches it too). All
# `(n_rows, n_cols)` tensors have contiguous rows: row `r` starts `r * n_cols` elements in. The grid
# is `(n_programs,)`, and program `p`:
#
# - owns rows `p * rows_per_program` up to, not including, `min((p + 1) * rows_per_program, n_rows)` —
#   the last program may get fewer rows; row offsets can pass $2^{31}$ on a large activation;
# - for each of its rows reads that row of $x$ and $\bar y$, the row's `mean` and `rstd`, and $\gamma$;
# - writes that row of $\bar x$ into `DX_ptr`, and nothing else of `DX_ptr`;
# - adds the share of $\bar\gamma$ and of $\bar\beta$ of **each** of its rows into **row `p`** of
#   `DW_partial` and `DB_partial` (shape `(n_programs, n_cols)`, all zeros when the kernel starts).
#   No other program touches that row.
#
# `BLOCK` is a power of two, and it may be shorter than a row: a row of `n_cols` spans
# `triton.cdiv(n_cols, BLOCK)` blocks of `BLOCK` lanes — one when `BLOCK` $\ge$ `n_cols` — and the kernel
# never holds more than one block of a row at a time. The lanes past the end of a row are neither data
# to add into any sum nor places to store.
#
# **Sum in the statistics' dtype.** `mean` and `rstd` arrive in float32 for half-precision $x$ (float64 for
# float64, §7). Every sum the kernel makes — $c_1$, $c_2$, and the partial sums of $\bar\gamma$ and $\bar\beta$ —
# is held in that dtype, whatever the dtype of $x$ and $\bar y$: convert each block as you load it, and let
# the store of $\bar x$ round it to $x$'s dtype, once.
#
# **The class `TritonLayerNorm`**, for `x` of shape `(n_rows, N)` with contiguous rows:
#
# - `forward(ctx, x, gamma, beta, eps)`: run the given `layernorm_fwd`, save what the backward needs —
#   $x$, $\gamma$, `mean`, `rstd`; **not** $\hat x$ — and return `y`.
# - `backward(ctx, dy)`: launch the kernel on `min(n_rows, MAX_PROGRAMS)` programs (call it `n_programs`) with
#   `rows_per_program` rows each (rounded up) and blocks of `min(triton.next_power_of_2(n_cols), MAX_BLOCK)`
#   lanes, into partial buffers that start at zero, in the statistics' dtype (float32 for half-precision
#   $x$); then a **second pass** turns the partial buffers into $\bar\gamma$ and $\bar\beta$ of shape `(N,)`,
#   rounded once to $\gamma$'s dtype. Return `dx, dgamma, dbeta, None` — one gradient per input
#   of `forward`, `None` for `eps`. No autograd in here. Autograd may hand `backward` a `dy` whose rows
#   are not contiguous (a transposed view, say); the kernel's contract is contiguous rows.
# %% solution id=TritonLayerNorm
MAX_PROGRAMS = 4  # programs sharing the rows in the backward; on a GPU, a few per SM
MAX_BLOCK = 2048  # the most lanes of a row the backward holds at once: 16 per thread of the default 4 warps


@triton.jit
def layernorm_bwd_kernel(
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ, contiguous
    X_ptr,  # (n_rows, n_cols) input x, contiguous
    W_ptr,  # (n_cols,) γ
    Mean_ptr,  # (n_rows,) μ per row, saved by the forward
    Rstd_ptr,  # (n_rows,) rstd per row, saved by the forward
    DX_ptr,  # (n_rows, n_cols) result x̄
    DW_partial_ptr,  # (n_programs, n_cols) row p: program p's partial sum of γ̄
    DB_partial_ptr,  # (n_programs, n_cols) row p: program p's partial sum of β̄
    n_rows,  # M, rows in all
    n_cols,  # N, the length of a row
    rows_per_program,  # program p handles rows p·rows_per_program, … (fewer for the last program)
    BLOCK: tl.constexpr,  # a power of two, the lanes of one block; a row spans cdiv(n_cols, BLOCK) blocks
):
    """Program p: the backward of LayerNorm for rows p·rows_per_program … min((p + 1)·rows_per_program, n_rows) − 1.

    Stores those rows of x̄ into DX, and adds their shares of γ̄ and β̄ into row p of DW_partial and DB_partial.
    Per row: reads x, ȳ (2N), γ (N) and μ, rstd (2); writes x̄ (N); adds 2N into this program's partial rows.
    """
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    first = pid.to(tl.int64) * rows_per_program  # int64: row · n_cols can pass 2³¹ on a large activation
    last = tl.minimum(first + rows_per_program, n_rows)  # the last program may have fewer rows
    for row in range(first, last):
        mean = tl.load(Mean_ptr + row)  # read 1; float32 (float64 for float64 x): the dtype every sum is held in
        rstd = tl.load(Rstd_ptr + row)  # read 1
        # Pass 1: c1 and c2 are sums over the whole row, so no x̄ can be written before its last block is read.
        # Masked lanes load ȳ = 0: they add nothing to either sum.
        sum_xhat_dxhat = tl.zeros([BLOCK], dtype=mean.dtype)  # lane by lane, over the row's blocks
        sum_dxhat = tl.zeros([BLOCK], dtype=mean.dtype)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            # Convert on load: a half-precision x, ȳ or γ is summed in the statistics' dtype, not its own.
            x = tl.load(X_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N over the row
            dy = tl.load(DY_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N
            w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(mean.dtype)  # read N: the same γ for every row
            xhat = (x - mean) * rstd  # rebuilt from two scalars instead of read back
            dxhat = w * dy
            sum_xhat_dxhat += xhat * dxhat
            sum_dxhat += dxhat
        c1 = tl.sum(sum_xhat_dxhat, axis=0) / n_cols
        c2 = tl.sum(sum_dxhat, axis=0) / n_cols
        # Pass 2: the same blocks again, now writing x̄ and adding this row's shares into row pid of the buffers.
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(X_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N again
            dy = tl.load(DY_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N again
            w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(mean.dtype)
            xhat = (x - mean) * rstd
            dxhat = w * dy
            dx = (dxhat - (xhat * c1 + c2)) * rstd
            tl.store(DX_ptr + row * n_cols + cols, dx.to(DX_ptr.dtype.element_ty), mask=mask)  # write N, rounded once
            # Row pid of each buffer is this program's alone: read, add, write back needs no atomic. The buffers
            # are in the statistics' dtype, so this running sum over the program's rows is never rounded to half.
            part = pid * n_cols + cols
            tl.store(DW_partial_ptr + part, tl.load(DW_partial_ptr + part, mask=mask) + dy * xhat, mask=mask)
            tl.store(DB_partial_ptr + part, tl.load(DB_partial_ptr + part, mask=mask) + dy, mask=mask)
    ### END SOLUTION


class TritonLayerNorm(torch.autograd.Function):
    """LayerNorm over the rows of x (n_rows, N) with contiguous rows; γ, β of shape (N,).

    forward(ctx, x, gamma, beta, eps): layernorm_fwd; saves x, γ, mean, rstd; returns y.
    backward(ctx, dy): layernorm_bwd_kernel on a few programs, then the second pass; returns (dx, dgamma, dbeta, None).
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, eps):
        ### BEGIN SOLUTION
        y, mean, rstd = layernorm_fwd(x, gamma, beta, eps)
        ctx.save_for_backward(x, gamma, mean, rstd)  # two scalars per row, not x̂
        return y
        ### END SOLUTION

    @staticmethod
    def backward(ctx, dy):
        ### BEGIN SOLUTION
        x, gamma, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()  # the kernel steps through rows as if contiguous
        n_rows, n_cols = x.shape
        n_programs = min(n_rows, MAX_PROGRAMS)
        rows_per_program = triton.cdiv(n_rows, n_programs)
        dx = torch.empty_like(x)  # (n_rows, N)
        # (n_programs, N), the kernel adds into them: in mean's dtype (float32 for half x), never x's, because
        # each row's share is added into a running sum that a half-precision buffer would round after every row.
        dgamma_partial = torch.zeros(n_programs, n_cols, dtype=mean.dtype, device=x.device)
        dbeta_partial = torch.zeros(n_programs, n_cols, dtype=mean.dtype, device=x.device)
        layernorm_bwd_kernel[(n_programs,)](
            dy, x, gamma, mean, rstd, dx, dgamma_partial, dbeta_partial,
            n_rows, n_cols, rows_per_program, BLOCK=min(triton.next_power_of_2(n_cols), MAX_BLOCK),
            num_warps=16 if n_cols > MAX_BLOCK // 2 else 4,  # a 2048-lane row on 4 or 8 warps spills 8 B on a T4 or an H100
        )
        # Second pass: n_programs rows, summed in the same order every run.
        dgamma = dgamma_partial.sum(dim=0).to(gamma.dtype)  # (N,): read n_programs·N, write N; rounded once
        dbeta = dbeta_partial.sum(dim=0).to(gamma.dtype)  # (N,)
        return dx, dgamma, dbeta, None
        ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which rows, and what does x̄ need first?</summary>
#
# Start from `tl.program_id(0)`: the first row is `pid * rows_per_program` (cast to int64 before
# multiplying by `n_cols`), the end is the smaller of the next group's first row and `n_rows`. Triton
# accepts a Python `for` loop whose bounds are computed in the kernel, and loops inside loops. Then look
# at Part B's $\bar x$ for one row: which numbers must be known before its first lane can be computed,
# and how much of the row do they depend on? If the kernel may hold only one block of the row at a time,
# how many times must it go through the row?
#
# </details>
#
# <details><summary>Hint 2 — the lanes past the end of the row</summary>
#
# A block is `BLOCK` lanes starting at some column of the row; lanes at columns $\ge$ `n_cols` are not
# data. What must such a lane add to $c_1$, $c_2$ and the partial sums? Whatever a masked load puts there
# flows into every sum, so choose the fill value that adds nothing. The means divide by the row's
# length, not by `BLOCK`. A store without a mask writes all `BLOCK` lanes — past the row, into the next
# one or past the buffer. The check launches your kernel both ways: with `BLOCK` $\ge$ `n_cols` (one
# block, its tail masked) and with `BLOCK` $<$ `n_cols` (several blocks, the last one ragged). A kernel
# that is right with one block and wrong with several has treated a block as if it were the whole row.
# If the check says `out-of-bounds`, it names the line and the program: which lane of which block went
# past the row, and which tensor's memory would it have read or overwritten on a GPU?
#
# </details>
#
# <details><summary>Hint 3 — the partial sums and the second pass</summary>
#
# Row `pid` of each buffer belongs to this program alone, and it starts at zero. When the second row of the
# group brings its share, what must become of the first row's, already stored there — and does that need an
# atomic, when no other program reads or writes those addresses? If the check says `race`, it names two
# programs and an element of a partial buffer: in whose row is that element, and how did the other
# program's address reach it? On the host: what turns the
# `(n_programs, N)` buffers into `(N,)`? Careful: if `backward` returns the buffer itself as $\bar\gamma$,
# autograd quietly sums it to `(N,)` for you and a training run never notices; the test looks at what your
# `backward` returns, before autograd touches it.
#
# </details>
#
# <details><summary>Hint 4 — how many passes over a row, and the dtype of its sums</summary>
#
# How many times must the kernel go through each row when it holds one block at a time, and why? Which
# numbers does the first lane of $\bar x$ need, and after which block are they known? Which of the row's
# results can be produced on the last of those passes?
#
# On the host, what dtype do the partial buffers get? The kernel adds every row of the group into them and
# stores the total back, so their dtype is the dtype of a running sum over the group. In float16 each store
# rounds that total to 11 significant bits: after one row with a large $\bar y$ (a token with a large loss),
# how large must a later row's share be to change it at all? Rounding once, at the end, loses a relative
# $2^{-11}$ at most. A test failure named `half-accumulation` means some sum over rows or over a row was
# held in float16.
#
# </details>
# %% test id=test_TritonLayerNorm points=2
"""TritonLayerNorm: layernorm_bwd_kernel launched on 1 and 3 programs (a
ragged last group, N a power of two or not, float32 and float64); then the
class through autograd at batch 1 and 7, with a contiguous and a transposed
(non-contiguous) dy: y, dx, dgamma, dbeta as backward returns them, what
forward saves, no autograd in backward; last the kernel on rows longer than
BLOCK (several blocks per row, the last one ragged)."""
course.selfcheck.TritonLayerNorm(TritonLayerNorm)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.TritonLayerNorm(TritonLayerNorm)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Part B's formulas, one row at a time inside a program and one block at a time inside a row, plus the
# cross-program reduction of §6:
#
# $$\text{DW\_partial}[p] = \sum_{r \in \text{rows}(p)} \bar y_r \odot \hat x_r, \qquad
# \boxed{\;\bar\gamma = \sum_{p} \text{DW\_partial}[p]\;} \quad(\text{and the same for } \bar\beta).$$
#
# $c_1$ and $c_2$ are sums over the whole row, so no lane of $\bar x$ can be written before the row's last
# block has been read: the kernel goes through each row twice, `for start in range(0, n_cols, BLOCK)`
# each time — pass 1 for $c_1$ and $c_2$, pass 2 for $\bar x$ and for the row's shares, added into row $p$
# of the buffers with `tl.load(DW_partial_ptr + part, mask=mask) + dy * xhat` and stored back:
#
# ```
# for each row of my group (int64 row numbers):
#     load the row's mean and rstd (two scalars, float32 for half-precision x)
#     two running vectors of BLOCK lanes, zeros, in mean's dtype
#     for each block of the row:                        # pass 1
#         load x, ȳ, γ of the block (masked, 0 past the row), each converted to mean's dtype
#         rebuild x̂ and the gradient reaching it; add this block's share of c1's and c2's sums
#     reduce the two vectors to c1 and c2 (divide by n_cols, not BLOCK)
#     for each block of the row:                        # pass 2
#         load and rebuild as in pass 1
#         store this block of x̄ (masked; the store rounds it to x's dtype)
#         read row pid of each partial buffer at these columns, add the row's share, store it back (masked)
# ```
#
# Every load and store is masked to the row's `n_cols` lanes. No two programs touch the same address, so there is no
# race — on the interpreter, or on a GPU where the programs really run at once. The sanitizer shows it below.
#
# The second pass reads $x$ and $\bar y$ again, and every row reads and writes the program's buffer rows:
# that is what a row longer than the registers costs. On a GPU those accesses stay in the cache (the row
# was just read; the buffer rows are the program's own), which §8 counts.
#
# Every sum is held in the statistics' dtype: each block is converted as it is loaded, the buffers are
# allocated in `mean.dtype`, and the only roundings to a half-precision $x$'s dtype are the store of $\bar x$
# and the final `dgamma_partial.sum(dim=0)` converted to $\gamma$'s dtype. A float16 buffer would round the group's
# running total at every row's store: after one row with a large $\bar y$, the shares of the rows after it fall
# below half a unit in its last place and are rounded away, one after another. Notebook 08 takes this rule apart
# for every sum of a backward, and measures what it is worth.
#
# </details>
#
# Your kernel under the sanitizer, through `TritonLayerNorm` on 7 rows: 4 programs, each adding into its own
# row of the partial buffers.
# %%
try:
    gen = torch.Generator().manual_seed(47)
    x = torch.randn(7, 13, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)  # (M, N)
    gamma = torch.randn(13, generator=gen, dtype=F64).to(DEVICE)
    beta = torch.randn(13, generator=gen, dtype=F64).to(DEVICE)
    with course.sanitize() as report:
        TritonLayerNorm.apply(x, gamma, beta, 1e-5).backward(torch.randn(7, 13, generator=gen, dtype=F64).to(DEVICE))
    print(report)
    if course.INTERPRETED:
        report.plot("DW_partial_ptr")  # the backward kernel's launch, the last one
        plt.show()
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Part D first: this cell runs your TritonLayerNorm.")
# %% [markdown]
# ## Part E — triton_layernorm (1 point)
#
# The function users call: LayerNorm over the **last** dimension of `x` of any rank (1-D, a batch
# of rows, `(batch, tokens, N)`), differentiable in `x`, `gamma` and `beta`, with `y` shaped like `x`.
# It runs on `TritonLayerNorm`, whose contract is `(n_rows, N)` with contiguous rows — and `x` may be
# a transposed (non-contiguous) view. The way `x` goes in and `y` comes out is notebook 03's
# `triton_softmax` wrapper (Part D there, and its recap): take it as given. What is new are the two
# parameters:
#
# - Check the inputs first, with a message a user can act on: `gamma` and `beta` must be `(N,)`, and
#   raise a `ValueError` otherwise.
# - $\gamma$ and $\beta$ go to `TritonLayerNorm` as they are. For a 3-D `x` of shape `(B, T, N)`, over which
#   axes does $\bar\gamma$'s sum run, and what makes it run over all of them?
# %% solution id=triton_layernorm
def triton_layernorm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last dimension of x (any rank) by TritonLayerNorm; y has the shape of x."""
    ### BEGIN SOLUTION
    if x.ndim == 0:
        raise ValueError("x is a 0-d tensor: LayerNorm needs a last dimension to normalise over")
    N = x.shape[-1]  # features
    for name, p in (("gamma", gamma), ("beta", beta)):
        if tuple(p.shape) != (N,):
            raise ValueError(f"{name} has shape {tuple(p.shape)}; it must be ({N},), the size of x's last dimension")
    rows = x.reshape(-1, N).contiguous()  # (n_rows, N), each row contiguous
    return TritonLayerNorm.apply(rows, gamma, beta, eps).view(x.shape)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what is notebook 03's wrapper, here?</summary>
#
# Look up notebook 03 Part D's recap: the rows go in lined up and contiguous, the result comes back in the
# shape of `x`. Nothing about that changes for LayerNorm; the extra arguments of `TritonLayerNorm.apply`
# are `gamma`, `beta` and `eps`, in the order of its `forward`.
#
# </details>
#
# <details><summary>Hint 2 — γ̄ over every leading axis</summary>
#
# After the reshape, a `(2, 3, N)` input is six rows of `N` to `TritonLayerNorm`. Its backward sums
# $\bar y \odot \hat x$ over the rows it was given: which $(b, t)$ positions are those? Does your wrapper need
# to sum anything itself, or reshape $\gamma$?
#
# </details>
#
# <details><summary>Hint 3 — the check that comes first</summary>
#
# A `gamma` of shape `(1, N)` or `(N, 1)` would broadcast in torch, and a `gamma` of the wrong length would
# read past its end in the kernel: which shape does the kernel's `W_ptr + cols` assume? Raise a `ValueError`
# before anything runs, whose message names the argument, the shape it has and the shape `(N,)` it needs.
#
# </details>
# %% test id=test_triton_layernorm points=1
"""triton_layernorm: y and the gradients of x, gamma and beta for 1-D, 2-D
(batch 1 and 7) and 3-D x, a transposed view, eps honoured, float32 and
float64, run through TritonLayerNorm."""
course.selfcheck.triton_layernorm(triton_layernorm)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.triton_layernorm(triton_layernorm)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;\text{triton\_layernorm}(x) = \text{TritonLayerNorm}\big(x \text{ as } (n_{\text{rows}}, N) \text{ contiguous rows}\big) \text{ in the shape of } x\;}$$
#
# The leading dimensions only count rows, and the kernels' one layout assumption — contiguous rows —
# is met once, at the boundary, instead of inside every kernel: `x.reshape(-1, N).contiguous()` lines up the
# rows (a copy only for a strided `x`), and `.view(x.shape)` gives the result the shape of `x`.
#
# </details>
# %% [markdown]
# ## 8. gradcheck, and the traffic
#
# `torch.autograd.gradcheck` perturbs every input entry — of $x$, $\gamma$ and $\beta$ — runs your
# forward twice per entry, and compares the difference quotients with what your backward returns.
# It needs float64. On a CPU the interpreter runs your kernels' code itself, one program after
# another, with numpy: the same operations in the same dtype as on a GPU, so a float64 gradcheck
# there tests your formulas and your indexing. It is not a GPU, though. The order in which a
# `tl.sum` adds its lanes and the math library behind `tl.sqrt` differ, so the last bits of a result
# can differ from a GPU's; and because programs never overlap, a race between programs cannot change
# a value here — the sanitizer of §6 finds it in the accesses instead.
# It is slow in the interpreter (a hundred launches), so the input is small: batch 3, N = 5.
# %%
try:
    gen = torch.Generator().manual_seed(5)
    x = (2.0 * torch.randn(3, 5, generator=gen, dtype=F64) + 1.0).to(DEVICE).requires_grad_(True)
    gamma = torch.randn(5, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)
    beta = torch.randn(5, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)
    ok = torch.autograd.gradcheck(triton_layernorm, (x, gamma, beta), raise_exception=False)
    print("gradcheck of triton_layernorm in x, γ and β (float64):", ok)
except Exception as exc:
    if unfinished(exc):
        print("Finish Parts D and E first: this cell runs triton_layernorm.")
    else:  # the test cells of Parts D and E say what is wrong
        print(f"triton_layernorm raised {type(exc).__name__}: {exc}. Fix the part whose test fails, then rerun.")

# %% [markdown]
# Now count what each backward moves for a $4096 \times 4096$ float32 activation, with the fused
# kernel on 528 programs (4 per SM of a 132-SM H100). The op-by-op count is Part B run as PyTorch
# ops, each reading its inputs from memory and writing its result back. The fused kernel is counted
# twice: what crosses DRAM when its repeated accesses hit the cache — $x$, $\bar y$ and two scalars per
# row read, $\bar x$ written, plus $\gamma$ and the partial buffers — and every access it makes, as if
# nothing stayed in any cache.
# %%
M, N, P = 4096, 4096, 528  # rows, features, programs
MN = M * N
op_by_op = {  # (elements read, elements written) per PyTorch op of Part B
    "xhat = (x − μ)·rstd": (2 * MN + 2 * M, 2 * MN),  # two ops
    "dxhat = γ ⊙ ȳ": (MN + N, MN),
    "c1 = mean(xhat ⊙ dxhat)": (3 * MN, MN + M),  # a product, then a mean
    "c2 = mean(dxhat)": (MN, M),
    "dx = (dxhat − (xhat·c1 + c2))·rstd": (5 * MN + 3 * M, 4 * MN),  # four ops
    "dγ = Σ ȳ ⊙ xhat, dβ = Σ ȳ": (4 * MN, MN + 2 * N),
}
naive = sum(r + w for r, w in op_by_op.values())
# DRAM: read x, ȳ (2MN) and μ, rstd (2M), write x̄ (MN), γ once per program (PN), each program's two
# partial rows written back once (2PN); then the second pass reads them (2PN) and writes γ̄, β̄ (2N).
fused = (2 * MN + 2 * M + MN + P * N + 2 * P * N) + (2 * P * N + 2 * N)
# Every access: x, ȳ and γ in both passes (6MN), μ and rstd, x̄, and for every row a read and a write of the
# program's two partial rows (4MN); then the second pass.
fused_every_access = (6 * MN + 2 * M + MN + 4 * MN) + (2 * P * N + 2 * N)
dense = M * (N * N + N * N + 2 * N)  # write each row's J, read it back, read dxhat, write x̄
for name, count in (("dense Jacobian", dense), ("op by op (Part B)", naive),
                    ("fused, DRAM", fused), ("fused, every access", fused_every_access)):
    print(f"{name:20} {count / MN:8.2f} elements per element of x   {4 * count / 2**30:9.2f} GiB in float32")
# %% [markdown]
# The fused kernel moves about 3.6 elements per element of $x$ through DRAM — the $3MN$ it cannot avoid
# (read $x$, read $\bar y$, write $\bar x$), plus $\gamma$ once per program and the partial buffers written and
# read back, $5PN$ in all: a small fraction of $MN$ when $M \gg P$. Its other accesses — the second pass
# over each row, and each row's additions into the program's buffer rows — bring it to about 11, but
# they hit the cache: a program's two rows of $x$ and $\bar y$ and its two buffer rows are 64 KiB, and all
# 528 programs' together about 33 MiB, inside an H100's 50 MiB of L2. Part B as separate ops moves about
# 25, and the dense Jacobian thousands. LayerNorm's backward does a few FLOPs per element, far left of
# any GPU's ridge point (notebook 03), so the bytes are the time: fusing buys about 7×.
#
# ## What to take away
#
# - LayerNorm's Jacobian is dense but structured: the identity minus two rank-one matrices, times
#   rstd. Its VJP never builds it: two dot products per row ($c_1$, $c_2$), then one elementwise pass.
# - Save $\mu$ and $\text{rstd}$ (two numbers per row) and rebuild $\hat x$; do not save $\hat x$.
# - $\bar\gamma$ and $\bar\beta$ sum over every row: invisible at batch 1, so test at batch 7.
# - On a GPU that sum crosses programs. Partial sums per program plus a second pass are
#   deterministic and contention-free; atomics save the pass but not the nondeterminism. A
#   read-add-store into a row other programs share is a race, even when the CPU's numbers are right:
#   `course.sanitize()` names it from the accesses.
# - A row longer than the registers hold is walked in blocks. When the row's own sums ($c_1$, $c_2$)
#   come before its output, that is two passes over the row — the second one from the cache.
# - RMSNorm is the same skeleton with one rank-one piece fewer, so one scalar per row.
#
# Next, notebook 05: attention, where the saved scalar per row is the log-sum-exp and the tensor
# you avoid saving is $T \times T$.

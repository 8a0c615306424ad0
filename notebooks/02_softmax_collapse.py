# %% [markdown]
# # 02 · The softmax collapse
#
# Softmax couples every output of a row to every input of that row: each $y_i$ has the whole
# row's sum in its denominator. So its Jacobian is dense — an $N \times N$ matrix **per row**.
# For a row of $N = 4096$ logits that is $4096^2 \approx 16.8$ million numbers, 64 MiB in
# float32, for one row of one batch. And yet the softmax backward that real kernels run reads
# two vectors, writes one, and keeps a single number on the side.
#
# This notebook derives why. You write the dense Jacobian, multiply it by $\bar y$, and watch
# one scalar per row fall out of the algebra. Then three facts a kernel writer leans on: the
# backward needs $y$, not $x$; the max subtracted for stability costs nothing in the backward;
# and softmax fused with cross-entropy collapses further, into a gradient that survives where
# the unfused chain dies.
#
# | Part | you write | points |
# |---|---|---|
# | A | `softmax_jacobian(y) -> J`, shape $(\dots, N, N)$ | 1 |
# | B | `softmax_backward(y, dy) -> dx` without building $J$ | 3 |
# | C | `softmax_cross_entropy_backward(logits, target) -> dlogits` | 2 |
#
# **Notation** (from notebook 00). $L$ is a scalar loss; $\bar t = \partial L / \partial t$ is
# the gradient of a tensor $t$ and has exactly its shape; in code $\bar t$ is `dt`. Softmax acts
# on the last axis: `x` of shape $(\dots, N)$ holds rows of $N$ logits, and every leading axis
# is a batch axis.
# %%
import course
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course.memory import AllocationRecorder

F64 = torch.float64  # the experiments run in float64 unless they are about float32 on purpose


def randn(gen, *shape, dtype=F64):
    """Standard-normal values of the given shape, drawn from the generator `gen`."""
    return torch.randn(shape, generator=gen, dtype=dtype)


def autograd_vjp(forward, x, dy):
    """x̄ = Jᵀ ȳ for y = forward(x), from torch's autograd: the answer key for the experiments here."""
    x = x.detach().clone().requires_grad_(True)
    return torch.autograd.grad(forward(x), x, dy)[0]

# %% [markdown]
# ## 1 · The forward pass, and what it moves
#
# For one row $x \in \mathbb{R}^N$,
#
# $$y_i = \frac{e^{x_i}}{\sum_j e^{x_j}} .$$
#
# Every $y_i$ is positive and the row sums to 1. A kernel never computes $e^{x_i}$ directly:
# $e^{89}$ already overflows float32. It subtracts the row maximum $m = \max_j x_j$ first, so
# every exponent is $\le 0$; §5 shows why that shift needs nothing in the backward.
#
# The comments count what one row moves through memory, the unit of cost for a kernel as
# memory-bound as this one.
# %% check-output
def softmax_forward(x):
    """Softmax over the last axis of x, shape (..., N), the way a kernel does it."""
    m = x.amax(dim=-1, keepdim=True)  # (..., 1) row max: read N, keep 1
    e = (x - m).exp()  # (..., N), every exponent ≤ 0: no overflow
    z = e.sum(dim=-1, keepdim=True)  # (..., 1) the row's normaliser
    return e / z  # (..., N): write N. A fused kernel reads N and writes N per row, nothing else


gen = torch.Generator().manual_seed(0)
x = randn(gen, 3, 6)  # (B, N) = 3 rows of 6 logits
y = softmax_forward(x)
print("matches torch.softmax:       ", torch.allclose(y, torch.softmax(x, dim=-1)))
print("each row sums to 1:          ", torch.allclose(y.sum(-1), torch.ones(3, dtype=F64)))
big = torch.tensor([1000.0, 999.0, 0.0])  # float32 logits whose exp overflows
print("stable with huge logits:     ", softmax_forward(big).isfinite().all().item(),
      "  naive exp(x)/sum:", (big.exp() / big.exp().sum()).tolist())

# %% [markdown]
# ## 2 · The dense Jacobian
#
# Differentiate $y_i = e^{x_i} / Z$ with $Z = \sum_k e^{x_k}$ by the quotient rule. The
# numerator depends on $x_j$ only when $j = i$; the denominator depends on every $x_j$, with
# $\partial Z / \partial x_j = e^{x_j}$:
#
# $$\frac{\partial y_i}{\partial x_j}
#   = \frac{\delta_{ij}\, e^{x_i}}{Z} - \frac{e^{x_i}\, e^{x_j}}{Z^2}
#   = y_i\,\delta_{ij} - y_i\, y_j .$$
#
# As a matrix, with $\operatorname{diag}(y)$ the $N \times N$ matrix with $y$ on its diagonal and
# $y y^\top$ the outer product of the row with itself:
#
# $$J = \frac{\partial y}{\partial x} = \operatorname{diag}(y) - y\, y^\top \qquad (N \times N).$$
#
# Three things to read off before writing any code:
#
# - **$J$ is symmetric**: $y_i y_j = y_j y_i$. So $J^\top \bar y = J \bar y$.
# - **$J$ is made of $y$ alone.** The logits $x$ do not appear: whoever saved $y$ can backprop.
# - **Every row of $J$ sums to zero**: $\sum_j (y_i \delta_{ij} - y_i y_j) = y_i - y_i \cdot 1 = 0$,
#   that is, $J\,\mathbf{1} = 0$. Adding the same constant to every logit changes nothing (§5).
#
# The naive way to get $J$ is to ask autograd for it: `torch.autograd.functional.jacobian`
# runs one backward pass per output, $N$ passes for an $N \times N$ matrix.
# %%
gen = torch.Generator().manual_seed(1)
x = randn(gen, 5)  # one row, N = 5
y = torch.softmax(x, dim=-1)  # (N,)
J_auto = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), x)  # (N, N), N backward passes
print("J has shape", tuple(J_auto.shape))
print("symmetric:                     ", torch.allclose(J_auto, J_auto.mT))
print("rows sum to 0 (J·1 = 0):       ", torch.allclose(J_auto.sum(-1), torch.zeros(5, dtype=F64)))
print("diagonal is y_i (1 − y_i):     ", torch.allclose(J_auto.diagonal(), y * (1 - y)))

# %% [markdown]
# ## Part A — softmax_jacobian (1 point)
#
# Write `softmax_jacobian(y)`: the Jacobian $J = \operatorname{diag}(y) - y y^\top$ of every
# row, from the softmax output `y` of shape $(\dots, N)$. The result has shape $(\dots, N, N)$:
# one $N \times N$ matrix per row, `J[..., i, j]` $= \partial y_i / \partial x_j$. A single row
# of shape $(N,)$ gives one $(N, N)$ matrix.
#
# - `torch.diag_embed` puts the last axis of a tensor on the diagonal of a new pair of axes.
# - The outer product of each row with itself is a broadcast: a $(\dots, N, 1)$ column times a
#   $(\dots, 1, N)$ row. `unsqueeze` makes both.
# - The test cell compares with torch's own Jacobian at one row, batch 1, batch 7 and a 3-D
#   input. This is the one exercise in the course that *should* build $J$: the next one must not.
# %% solution id=softmax_jacobian
def softmax_jacobian(y):
    """Jacobian of softmax for every row, from its output.

    y: (..., N), softmax output (each row positive, summing to 1).
    Returns J: (..., N, N) with J[..., i, j] = ∂y_i/∂x_j = y_i δ_ij − y_i y_j.
    """
    ### BEGIN SOLUTION
    column, row = y.unsqueeze(-1), y.unsqueeze(-2)  # (..., N, 1) and (..., 1, N)
    return torch.diag_embed(y) - column * row  # diag(y) − y yᵀ: write N² per row
    ### END SOLUTION

# %% test id=test_softmax_jacobian points=1
"""softmax_jacobian: J has shape (..., N, N) and equals torch's Jacobian of softmax, for one row, batch 1, batch 7 and a 3-D y."""
course.selfcheck.softmax_jacobian(softmax_jacobian)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_jacobian(softmax_jacobian)
### END HIDDEN TESTS

# %% [markdown]
# ## 3 · Multiply by $\bar y$, and watch $s$ fall out
#
# The backward of softmax is the vector–Jacobian product $\bar x = J^\top \bar y = J \bar y$
# ($J$ is symmetric). The naive version builds $J$ and multiplies:
# %%
def naive_softmax_backward(y, dy):
    """x̄ = J ȳ with J built in full: the dense way, for comparison. Uses your softmax_jacobian."""
    J = softmax_jacobian(y)  # (..., N, N): write N² per row
    return (J @ dy.unsqueeze(-1)).squeeze(-1)  # (..., N): read N² + N, write N per row; N² multiply-adds


gen = torch.Generator().manual_seed(2)
x, dy = randn(gen, 7, 10), randn(gen, 7, 10)  # (B, N) logits and ȳ
y = torch.softmax(x, dim=-1)
try:
    dx_naive = naive_softmax_backward(y, dy)
    dx_auto = autograd_vjp(lambda x: torch.softmax(x, dim=-1), x, dy)
    print("J ȳ matches autograd:", torch.allclose(dx_naive, dx_auto))
except course.ExerciseNotDone:
    print("Finish Part A first: this cell multiplies your Jacobian by ȳ.")

# %% [markdown]
# It is right, and it is hopeless at scale: $N^2$ numbers written and read again per row, to
# produce $N$. Now do the multiplication on paper instead, entry by entry:
#
# $$\bar x_j = \sum_i J_{ij}\, \bar y_i
#   = \sum_i \left(y_i \delta_{ij} - y_i y_j\right) \bar y_i
#   = y_j\, \bar y_j \;-\; y_j \sum_i y_i\, \bar y_i .$$
#
# The sum at the end does not depend on $j$. It is **one number per row**, the same for every
# entry — call it the hub:
#
# $$s = \langle y, \bar y \rangle = \sum_i y_i\, \bar y_i ,
#   \qquad\qquad
#   \boxed{\;\bar x = y \odot (\bar y - s)\;}$$
#
# ($\odot$ is the elementwise product.) The whole $N \times N$ matrix only ever acted through
# that one scalar. What it costs, per row of length $N$:
#
# | | time | extra memory | memory traffic |
# |---|---|---|---|
# | dense: build $J$, then $J \bar y$ | $O(N^2)$ | $N^2$ numbers | write $N^2$, read $N^2 + 2N$, write $N$ |
# | collapsed: $s$, then $y \odot (\bar y - s)$ | $O(N)$ | **one** number, $s$ | read $2N$, write $N$ |
#
# A kernel does it in two sweeps over the row held on chip: one accumulates $s$, one writes
# $\bar x$. Here is a row of 12 drawn both ways — everything the dense product uses on the
# left, everything the collapsed one uses on the right:
# %%
gen = torch.Generator().manual_seed(3)
N = 12
x, dy = randn(gen, N), randn(gen, N)  # one row of logits, and ȳ
y = torch.softmax(x, dim=-1)  # (N,)
J = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), x)  # (N, N), from autograd
s = torch.dot(y, dy)  # the hub: one number
dx = J @ dy  # (N,), the same x̄ either way

fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.2), gridspec_kw={"width_ratios": [1, 1.5]})
lim = J.abs().max().item()
left.imshow(J, cmap="RdBu_r", vmin=-lim, vmax=lim)
left.set_title(f"dense: J is {N}×{N} = {N * N} numbers,\nthen J ȳ costs {N * N} multiply-adds", fontsize=9)
left.set_xticks([]), left.set_yticks([])

# The collapsed backward, one vector per line; each line on its own colour scale, blank = nothing stored.
lines = {"y": y, "ȳ": dy, "s = ⟨y, ȳ⟩": s.reshape(1), "x̄ = y ⊙ (ȳ − s)": dx}
grid = torch.full((2 * len(lines) - 1, N), float("nan"), dtype=F64)
for k, v in enumerate(lines.values()):
    grid[2 * k, : v.numel()] = v / v.abs().max()
cmap = plt.get_cmap("RdBu_r").copy()
cmap.set_bad("white")
right.imshow(grid, cmap=cmap, vmin=-1, vmax=1)
right.set_yticks(range(0, grid.shape[0], 2), list(lines)), right.set_xticks([])
right.annotate(f"{s.item():+.2f}", (0, 4), ha="center", va="center", fontsize=7, color="white")
right.annotate("← one number per row", (0.7, 4), va="center", fontsize=9)
right.set_title("collapsed: read y and ȳ, keep one scalar, write x̄", fontsize=9)
for spine in right.spines.values():
    spine.set_visible(False)
fig.suptitle("softmax backward for one row of N = 12: N² numbers, or one")
fig.tight_layout()
plt.show()

# %% [markdown]
# And the bytes, as $N$ grows. The dense Jacobian of one row grows as $N^2$; the collapsed
# backward needs one float on top of the three vectors every backward must touch ($y$ and
# $\bar y$ read, $\bar x$ written).
# %%
Ns = [2**k for k in range(6, 16)]  # 64 … 32768
FLOAT = 4  # bytes in a float32
course.plots.loglog(
    Ns,
    {"dense Jacobian, N² floats": [FLOAT * n * n for n in Ns],
     "y, ȳ and x̄ themselves, 3N floats": [FLOAT * 3 * n for n in Ns],
     "collapsed: the hub s, 1 float": [FLOAT for _ in Ns]},
    xlabel="row length N", ylabel="bytes per row", title="what a softmax backward holds, per row",
    marks={"N = 4096": 4096},
)
plt.show()
n = 4096
print(f"N = {n}: the dense Jacobian holds {n * n:,} floats ({FLOAT * n * n / 2**20:.0f} MiB) per row; the hub holds 1.")

# %% [markdown]
# ## Part B — softmax_backward (3 points)
#
# Write `softmax_backward(y, dy)`: $\bar x = y \odot (\bar y - s)$ with $s = \langle y, \bar y\rangle$
# taken **along each row**, for `y` and `dy` of shape $(\dots, N)$. `dx` has the shape of `y`.
#
# - $s$ is one number per row: a sum over the last axis. Keep that axis (`keepdim=True`), so
#   that $s$ has shape $(\dots, 1)$ and broadcasts down the row it belongs to. Without it, $s$
#   of shape $(B,)$ meets $\bar y$ of shape $(B, N)$ aligned from the right — along the wrong
#   axis — and when $B = N$ nothing even complains.
# - **Do not build $J$**, nor anything else with $N^2$ entries. The check records every tensor
#   your function allocates (with `course.memory.AllocationRecorder`, below) and, on rows of
#   $N \ge 256$, a tensor of $N^2$ elements or more fails with `materialized-jacobian` — even
#   when the values are right.
# - The visible check uses batch 1, batch 7 (once with as many rows as columns), a 3-D input,
#   and rows of 300. Grading adds more shapes on random inputs.
# %% solution id=softmax_backward
def softmax_backward(y, dy):
    """Gradient of the loss with respect to the logits of y = softmax(x), from y alone.

    y: (..., N), softmax output; dy: (..., N), ȳ, the gradient at y.
    Returns dx: (..., N), x̄ = y ⊙ (ȳ − s) with s = ⟨y, ȳ⟩ for each row. Nothing N×N is built.
    """
    ### BEGIN SOLUTION
    s = torch.sum(y * dy, dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩: read 2N, keep 1 per row
    return y * (dy - s)  # (..., N): x̄ = y ⊙ (ȳ − s), write N per row
    ### END SOLUTION

# %% test id=test_softmax_backward points=3
"""softmax_backward: dx has the shape of y and matches autograd at one row, batch 1, batch 7 and a 3-D y, and no tensor of N² elements is allocated for rows of N = 300."""
course.selfcheck.softmax_backward(softmax_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_backward(softmax_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## 4 · Watching the allocations
#
# The check of Part B sees what your function builds through `AllocationRecorder`, a
# `TorchDispatchMode`: inside its `with` block, every aten op that runs reports its outputs,
# and the recorder keeps those that live in new memory. Views (`unsqueeze`, `expand`,
# `transpose`) and the inputs themselves are not allocations. Here it is on both backwards, for
# 4 rows of 1024:
# %%
gen = torch.Generator().manual_seed(4)
B, N = 4, 1024
y, dy = torch.softmax(randn(gen, B, N), dim=-1), randn(gen, B, N)  # (B, N) each
for backward in (naive_softmax_backward, softmax_backward):
    try:
        with AllocationRecorder() as rec:
            backward(y, dy)
    except course.ExerciseNotDone:
        print(f"{backward.__name__}: finish Parts A and B first.")
        continue
    print(f"{backward.__name__}: {len(rec.allocations)} allocations, {rec.total_bytes / 2**20:.2f} MiB; largest: {rec.largest}")

# %% [markdown]
# The dense version allocates several $B \times N \times N$ tensors — each 32 MiB in float64
# here — to produce an answer of $B \times N$. The collapsed one allocates nothing bigger than
# its inputs.
#
# ## 5 · Two facts for free
#
# **The backward needs $y$, not $x$.** $\bar x = y \odot (\bar y - s)$ never mentions the
# logits. So the forward pass saves its output $y$ for the backward and can drop $x$. A fused
# kernel can do even better and save *one number per row*, the log-sum-exp
# $\ell = m + \log \sum_j e^{x_j - m}$, then rebuild $y = e^{x - \ell}$ from $x$ whenever it
# needs it. FlashAttention does exactly that (notebook 05), because its $y$ is a $T \times T$
# matrix too big to save.
#
# **The max shift costs nothing.** Softmax ignores a constant added to the whole row:
# $\operatorname{softmax}(x - c\mathbf{1}) = \operatorname{softmax}(x)$ for any $c$. That is
# $J\mathbf{1} = 0$ from §2. So the shift $c = \max_j x_j$ gets the gradient
#
# $$\bar c = -\mathbf{1}^\top J \bar y = -(J \mathbf{1})^\top \bar y = 0$$
#
# (using $J^\top = J$): nothing flows back through the max, whichever entry it picks, even at a
# tie where max has no derivative at all. The backward of the stable softmax is the backward
# of the plain one. Equivalently, every $\bar x$ row sums to zero:
# $\sum_j \bar x_j = \sum_j y_j \bar y_j - s \sum_j y_j = s - s = 0$.
# %% check-output
gen = torch.Generator().manual_seed(5)
x, dy = randn(gen, 7, 10), randn(gen, 7, 10)  # (B, N)


def shifted_through_max(x):
    return torch.softmax(x - x.amax(dim=-1, keepdim=True), dim=-1)  # autograd differentiates the max too


def shifted_by_constant(x):
    return torch.softmax(x - x.amax(dim=-1, keepdim=True).detach(), dim=-1)  # the shift treated as a constant


dx_plain = autograd_vjp(lambda x: torch.softmax(x, dim=-1), x, dy)
print("gradient through the max = plain gradient:   ", torch.allclose(autograd_vjp(shifted_through_max, x, dy), dx_plain))
print("shift as a constant      = plain gradient:   ", torch.allclose(autograd_vjp(shifted_by_constant, x, dy), dx_plain))
print("every row of x̄ sums to 0:                    ", torch.allclose(dx_plain.sum(-1), torch.zeros(7, dtype=F64)))
lse = torch.logsumexp(x, dim=-1, keepdim=True)  # (B, 1): one saved number per row
print("y rebuilt from x and one number per row:     ", torch.allclose((x - lse).exp(), torch.softmax(x, dim=-1)))

# %% [markdown]
# ## 6 · Softmax + cross-entropy: the second collapse
#
# A classifier's loss for $M$ rows of logits $x_r$ with target classes $t_r$ is the mean
# negative log-probability of the target, exactly as `torch.nn.functional.cross_entropy` computes it:
#
# $$L = \frac{1}{M} \sum_{r=1}^{M} -\log y_{r, t_r}, \qquad y_r = \operatorname{softmax}(x_r).$$
#
# Take one row and drop its index $r$. The loss touches only entry $t$ of $y$, so
# $\bar y = -\frac{1}{M\, y_t}\, e_t$, where $e_t$ is the one-hot vector of the target. Feed it to
# the softmax backward. The hub:
#
# $$s = \langle y, \bar y \rangle = y_t \cdot \left(-\frac{1}{M\, y_t}\right) = -\frac{1}{M},$$
#
# and then
#
# $$\bar x = y \odot (\bar y - s) = -\frac{y_t}{M\, y_t}\, e_t + \frac{y}{M}
#   \qquad\Longrightarrow\qquad
#   \boxed{\;\bar x = \frac{y - e_t}{M}\;} .$$
#
# The $1/y_t$ from the logarithm met the factor $y_t$ from the softmax and cancelled, exactly.
# What is left needs no division, no logarithm, and no $\bar y$: the softmax of the row, minus 1
# at the target, over $M$. That is why every framework ships softmax and cross-entropy as one
# op (`cross_entropy` takes logits, never probabilities), and why a fused cross-entropy kernel
# needs to save only one log-sum-exp per row for its backward.
# %% [markdown]
# ## Part C — softmax_cross_entropy_backward (2 points)
#
# Write `softmax_cross_entropy_backward(logits, target)`: the gradient of
# `F.cross_entropy(logits, target)` — the mean over rows — with respect to the logits.
#
# - `logits` has shape $(M, C)$: $M$ rows of $C$ class scores. `target` has shape $(M,)$ and
#   dtype int64, one class index per row. Leading axes are batch axes here too: logits of shape
#   $(B, T, C)$ with targets $(B, T)$ are $M = B \cdot T$ rows, and the mean runs over all of them.
# - `dlogits` has the shape of `logits`. Compute it fused, $(y - e_t)/M$ — not through $-1/y_t$.
# - `torch.softmax` subtracts the row max for you; `F.one_hot(target, C)` makes $e_t$ (`F` is
#   `torch.nn.functional`; the one-hot comes out in int64: convert it to the dtype of the logits).
# - The check includes a batch of saturated logits, where the target's probability is below the
#   smallest float64. The fused gradient is perfectly finite there.
# %% solution id=softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    """Gradient of F.cross_entropy(logits, target) (mean over rows) with respect to the logits.

    logits: (M, C) class scores, or (..., C): every leading axis is a batch axis.
    target: (M,) int64 class indices, or the leading shape of logits.
    Returns dlogits: the shape of logits, (softmax(logits) − onehot(target)) / M.
    """
    ### BEGIN SOLUTION
    C = logits.shape[-1]  # classes
    M = logits.numel() // C  # rows, over every leading axis
    y = torch.softmax(logits, dim=-1)  # (..., C): read C, write C per row
    e_t = torch.nn.functional.one_hot(target, num_classes=C).to(y.dtype)  # (..., C), 1 at the target
    return (y - e_t) / M  # no log, no 1/y_t: finite however saturated the row
    ### END SOLUTION

# %% test id=test_softmax_cross_entropy_backward points=2
"""softmax_cross_entropy_backward: dlogits has the shape of logits and matches autograd through F.cross_entropy at batch 1, batch 7, 3-D logits and saturated logits."""
course.selfcheck.softmax_cross_entropy_backward(softmax_cross_entropy_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_cross_entropy_backward(softmax_cross_entropy_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## 7 · Saturation: where the unfused chain dies
#
# In exact arithmetic the fused and the unfused chain give the same $\bar x$. In floating point
# they part ways exactly when training needs the gradient most: when the model is confidently
# **wrong**, and the target's probability $y_t$ is tiny.
#
# The experiment below takes one row of 4 logits in float32, puts the target's logit $g$ below
# the others, and computes the target's gradient $\bar x_t$ three ways ($M = 1$):
#
# - **fused**: $y_t - 1$. It tends to $-1$: push the target's logit up, hard.
# - **unfused**: $\bar y_t = -1/y_t$, then the softmax backward. When $1/y_t$ overflows
#   float32 ($y_t < 3 \cdot 10^{-39}$), $\bar y_t = -\infty$, and the arithmetic that follows
#   ($\infty - \infty$, $0 \cdot \infty$) makes a NaN.
# - **unfused with a guard**, $-\log(y_t + \varepsilon)$ with $\varepsilon = 10^{-8}$, the usual
#   patch against $\log 0$: now $\bar y_t = -1/(y_t + \varepsilon)$ stays finite, and the softmax
#   backward multiplies it by $y_t$. Once $y_t \ll \varepsilon$, $\bar x_t \approx -y_t/\varepsilon \to 0$:
#   the gradient **vanishes** — the softmax's Jacobian entries $y_t(1 - y_t)$ go to zero as it
#   saturates, and nothing is left to cancel them.
# %% check-output
def target_grad_fused(x, t):
    return torch.softmax(x, dim=-1)[t] - 1  # (y − e_t)[t]


def target_grad_unfused(x, t, eps=0.0):
    y = torch.softmax(x, dim=-1)
    dy = torch.zeros_like(y)
    dy[t] = -1 / (y[t] + eps)  # the backward of −log(y_t + eps)
    s = torch.dot(y, dy)  # the hub, as in Part B
    return (y * (dy - s))[t]


gaps = [1, 5, 10, 20, 40, 60, 80, 90, 120]
rows = []
print(f"{'gap g':>6} {'exact y_t':>10} {'fused':>10} {'unfused':>10} {'guarded':>10}")
for g in gaps:
    x = torch.tensor([-float(g), 0.0, 0.0, 0.0])  # float32; the target, class 0, is g below the rest
    y_t = torch.softmax(x.double(), dim=-1)[0].item()  # what float32 is trying to hold
    row = [target_grad_fused(x, 0).item(), target_grad_unfused(x, 0).item(), target_grad_unfused(x, 0, eps=1e-8).item()]
    rows.append(row)
    print(f"{g:>6} {y_t:>10.1e} " + " ".join(f"{v:>10.2g}" for v in row))

# %% [markdown]
# The fused gradient stays at $-1$ however wrong the model is. The unfused one holds on while
# $1/y_t$ fits in float32, then turns into NaN, which would poison every weight it reaches. The
# guarded one never overflows, but it fades to zero long before — by a gap of 20 it has lost
# 94% of the gradient — so a confidently wrong model stops learning from exactly the examples it
# gets most wrong. Drawn (NaN leaves gaps in a line):
# %%
gaps_t = torch.tensor(gaps, dtype=F64)
grads = torch.tensor(rows, dtype=F64).abs()  # (len(gaps), 3); NaN is left out of the plot
fig, ax = plt.subplots(figsize=(6.4, 3.6))
for i, label in enumerate(["fused (y − e_t)", "unfused, −1/y_t", "unfused, −1/(y_t + 1e-8)"]):
    ax.semilogy(gaps_t, grads[:, i].clamp_min(1e-45), marker="o", markersize=3, label=label)  # 0 drawn at 1e-45
ax.annotate("exactly 0", (gaps[-1], 1e-45), xytext=(-10, 8), textcoords="offset points", ha="right", fontsize=8)
ax.set(xlabel="target's logit below the others, g", ylabel="|x̄_t|", title="softmax + cross-entropy in float32, one row")
ax.grid(True, alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# ## What to take away
#
# - A dense Jacobian is a derivation tool, not a data structure. Multiply it by $\bar y$ on
#   paper and the structure shows: here one scalar per row, $s = \langle y, \bar y\rangle$, and
#   $\bar x = y \odot (\bar y - s)$ — $O(N)$ time and $O(1)$ extra memory instead of $O(N^2)$.
# - The softmax backward needs $y$ (or $x$ and one log-sum-exp per row), not the logits alone.
# - The max shift is free: $J\mathbf{1} = 0$.
# - Softmax + cross-entropy collapse to $(y - e_t)/M$, which stays finite and of order one where
#   the unfused chain overflows or vanishes.
#
# Next, notebook 03 writes this backward as a Triton kernel: one row per program, $s$
# accumulated in registers, and masks for rows whose length is not a power of two.

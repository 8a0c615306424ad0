# %% [markdown]
# # 02 · The softmax collapse
#
# Softmax couples every output of a row to every input of that row: each $y_i$ has the whole
# row's sum in its denominator. So its Jacobian is dense — an $N \times N$ matrix **per row**.
# For a row of $N = 4096$ logits that is $4096^2 \approx 16.8$ million numbers, 64 MiB in
# float32, for one row of one batch. And yet the softmax backward that real kernels run reads
# two vectors, writes one, and keeps a single number on the side.
#
# This notebook has you find out why. You write the dense Jacobian, then multiply it by
# $\bar y$ on paper and see what is left of it. Then the questions a kernel writer needs
# answered: does the backward need the logits $x$, or is the output $y$ enough? What does a
# number subtracted from every logit of a row do to the forward and to the backward? What
# happens when softmax meets the cross-entropy loss that usually follows it? And what is the
# backward of log-softmax, the op that loss is built on?
#
# | Part | you write | points |
# |---|---|---|
# | A | `softmax_jacobian(y) -> J`, shape $(\dots, N, N)$ | 1 |
# | B | `softmax_backward(y, dy) -> dx` without building $J$ | 3 |
# | C | `shifted_softmax_vjp(x, c, dy) -> (y, dx, dc)`: softmax of $x - c$ for a shift $c$ per row, and the gradients of both, in float32 too | 2 |
# | D | `softmax_cross_entropy_backward(logits, target) -> dlogits` | 2 |
# | E | `log_softmax_backward(z, dz) -> dx` for $z = \log \operatorname{softmax}(x)$, without building a Jacobian | 2 |
#
# **Notation** (from notebook 00). $L$ is a scalar loss; $\bar t = \partial L / \partial t$ is
# the gradient of a tensor $t$ and has exactly its shape; in code $\bar t$ is `dt`. Softmax acts
# on the last axis: `x` of shape $(\dots, N)$ holds rows of $N$ logits, and every leading axis
# is a batch axis. A batch of rows is $B$, as in notebooks 00 and 01; Part D writes $M$ for the
# number of rows over every leading axis ($M = B \cdot T$ for logits of shape $(B, T, C)$).
#
# Each exercise is followed by collapsed hints: open the first only when you are stuck, and the
# next only when that was not enough. They ask the question to ask and work a small case (a
# $2 \times 2$ Jacobian, one term of a sum); none of them gives the answer. The answer is in a
# collapsed recap after the test cell — open it once your check passes, and compare.
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
# ## 1 · The forward pass, what it moves, and where it breaks
#
# For one row $x \in \mathbb{R}^N$,
#
# $$y_i = \frac{e^{x_i}}{\sum_j e^{x_j}} .$$
#
# Every $y_i$ is positive and the row sums to 1. Here it is exactly as the formula reads. The
# comments count what one row moves through memory, the unit of cost for an op as
# memory-bound as this one.
# %% check-output
def naive_softmax(x):
    """Softmax over the last axis of x, shape (..., N), exactly as the formula reads."""
    e = x.exp()  # (..., N): read N
    z = e.sum(dim=-1, keepdim=True)  # (..., 1) the row's normaliser: keep 1
    return e / z  # (..., N): write N. Fused into one kernel: read N, write N per row, nothing else


gen = torch.Generator().manual_seed(0)
x = randn(gen, 3, 6)  # (B, N) = 3 rows of 6 logits
y = naive_softmax(x)
print("matches torch.softmax:   ", torch.allclose(y, torch.softmax(x, dim=-1)))
print("each row sums to 1:      ", torch.allclose(y.sum(-1), torch.ones(3, dtype=F64)))
big = torch.tensor([1000.0, 999.0, 0.0])  # float32 logits whose exp overflows
print("float32 logits [1000, 999, 0]")
print("  naive_softmax:         ", naive_softmax(big).tolist())
print("  torch.softmax:         ", [round(v, 4) for v in torch.softmax(big, dim=-1).tolist()])

# %% [markdown]
# The formula as written is right on ordinary logits and useless on large ones: $e^{1000}$ is
# inf in float32 (so is anything above $e^{88.7}$), and inf / inf is NaN. Large logits are not
# exotic: attention scores are dot products of vectors with hundreds of entries, and a
# classifier trained to be confident pushes its logits apart. `torch.softmax` gives finite
# numbers there. What it does differently, and what that does to the backward, is Part C's
# question; until then the experiments use `torch.softmax`.
#
# ## 2 · The dense Jacobian
#
# The Jacobian of one row is the $N \times N$ matrix $J$ with $J_{ij} = \partial y_i / \partial x_j$.
# Before Part A, two questions to settle on paper. With $Z = \sum_k e^{x_k}$ and
# $y_i = e^{x_i} / Z$: which of $e^{x_i}$ and $Z$ depend on $x_j$ — when $j = i$, and when
# $j \ne i$? And can the result be written with $y$ alone, without $x$?
#
# Autograd gives you something to test a guess against. `torch.autograd.functional.jacobian`
# builds $J$ by running one backward pass per output: $N$ passes for an $N \times N$ matrix.
# %%
gen = torch.Generator().manual_seed(1)
x = randn(gen, 5)  # one row, N = 5
y = torch.softmax(x, dim=-1)  # (N,)
J_auto = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), x)  # (N, N), N backward passes
print("y =", [round(v, 4) for v in y.tolist()])
print("J has shape", tuple(J_auto.shape), "and holds")
print(J_auto.numpy().round(4))

# %% [markdown]
# ## Part A — softmax_jacobian (1 point)
#
# Write `softmax_jacobian(y)`: the Jacobian of softmax for every row, from the softmax output
# `y` of shape $(\dots, N)$ alone. The result has shape $(\dots, N, N)$: one $N \times N$
# matrix per row, `J[..., i, j]` $= \partial y_i / \partial x_j$. A single row of shape $(N,)$
# gives one $(N, N)$ matrix.
#
# - You get $y$, not $x$: write every entry of $J$ in terms of $y$.
# - Every row is a softmax of its own, so no entry of $J$ mixes two rows.
# - The test cell compares with torch's own Jacobian at one row, batch 1, batch 7, a 3-D input
#   and a transposed (non-contiguous) view. This is the one exercise in the course that
#   *should* build $J$: the next one must not.
# %% solution id=softmax_jacobian
def softmax_jacobian(y):
    """Jacobian of softmax for every row, from its output.

    y: (..., N), softmax output (each row positive, summing to 1).
    Returns J: (..., N, N) with J[..., i, j] = ∂y_i/∂x_j.
    """
    ### BEGIN SOLUTION
    column, row = y.unsqueeze(-1), y.unsqueeze(-2)  # (..., N, 1) and (..., 1, N)
    return torch.diag_embed(y) - column * row  # diag(y) − y yᵀ: write N² per row
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what depends on x_j?</summary>
#
# Write $y_i = e^{x_i} / Z$ with $Z = \sum_k e^{x_k}$. Which of the two, $e^{x_i}$ and $Z$, changes
# when $x_j$ changes — when $j = i$, and when $j \ne i$? What is $\partial Z / \partial x_j$? You
# should end with two cases, and a term from $Z$ in both.
#
# </details>
#
# <details><summary>Hint 2 — N = 2, by hand</summary>
#
# Take one row of two logits, $Z = e^{x_1} + e^{x_2}$. Work out one entry off the diagonal with the
# quotient rule $(u / v)' = u' / v - u\, v' / v^2$:
#
# $$J_{12} = \frac{\partial}{\partial x_2} \frac{e^{x_1}}{Z} = 0 - \frac{e^{x_1}\, e^{x_2}}{Z^2}.$$
#
# Every $e^{x_k} / Z$ in it is a $y_k$: rewrite it with $y$ alone. Now do $J_{11}$, where the numerator
# depends on $x_1$ too, and write both cases as one expression with the Kronecker delta $\delta_{ij}$
# (1 when $i = j$, else 0). Check your signs against autograd's $J$ above: its diagonal is positive,
# everything off it negative.
#
# </details>
#
# <details><summary>Hint 3 — one matrix per row, in torch</summary>
#
# Your expression has a part that lives only on the diagonal and a part that pairs every entry of a
# row with every entry of the same row. `torch.diag_embed` puts the last axis of a tensor on the
# diagonal of a new pair of axes, $(\dots, N) \to (\dots, N, N)$. For the other part: how do you form,
# for every row, the $N \times N$ table of the products $y_i y_j$ — with broadcasting, and without
# pairing entries of two different rows?
#
# </details>
# %% test id=test_softmax_jacobian points=1
"""softmax_jacobian: J has shape (..., N, N) and equals torch's Jacobian of
softmax, for one row, batch 1, batch 7, a 3-D y and a transposed view."""
course.selfcheck.softmax_jacobian(softmax_jacobian)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_jacobian(softmax_jacobian)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The softmax Jacobian.** By the quotient rule — the numerator depends on $x_j$ only when
# $j = i$, the denominator $Z = \sum_k e^{x_k}$ on every $x_j$, with $\partial Z / \partial x_j = e^{x_j}$:
#
# $$\frac{\partial y_i}{\partial x_j}
#   = \frac{\delta_{ij}\, e^{x_i}}{Z} - \frac{e^{x_i}\, e^{x_j}}{Z^2}
#   = y_i\,\delta_{ij} - y_i\, y_j ,
#   \qquad\qquad
#   \boxed{\;J = \operatorname{diag}(y) - y\, y^\top\;} \quad (N \times N),$$
#
# in code `torch.diag_embed(y) - column * row`, where `column` is `y` unsqueezed at $-1$ and `row` at $-2$.
#
# </details>
#
# Two things to read off $J$ before the backward:
#
# - **$J$ is symmetric**: the entry in row $i$, column $j$ equals the one in row $j$, column $i$.
#   So $J^\top \bar y = J \bar y$.
# - **$J$ is made of $y$ alone.** The logits $x$ do not appear: whoever saved $y$ can backprop, so
#   the forward saves its output $y$ for the backward and can drop $x$. Notebook 03 builds its
#   Triton softmax on exactly that.
#
# ## 3 · Multiply by $\bar y$
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
# It is right, and it is hopeless at scale. Per row of length $N$:
#
# | | time | extra memory | memory traffic |
# |---|---|---|---|
# | dense: build $J$, then $J \bar y$ | $O(N^2)$ | $N^2$ numbers | write $N^2$, read $N^2 + 2N$, write $N$ |
#
# $N^2$ numbers written and read back, to produce $N$. But $J$ is not just any matrix: you wrote
# every entry of it in Part A. Part B asks you to do the product $J \bar y$ on paper, entry by
# entry, and to find out how much of $J$ the answer really needs.
#
# ## Part B — softmax_backward (3 points)
#
# Write `softmax_backward(y, dy)`: $\bar x = J^\top \bar y$ for every row, for `y` and `dy` of
# shape $(\dots, N)$, **without building $J$**. `dx` has the shape of `y`.
#
# - What you have: $y$ (the forward saved it) and $\bar y$. Not $x$.
# - The memory rule: nothing with $N^2$ entries. The check records every tensor your function
#   allocates (with `course.memory.AllocationRecorder`, §4) and, on rows of $N \ge 256$, a
#   tensor of $N^2$ elements or more fails with `materialized-jacobian` — even when the values
#   are right.
# - No autograd, and none of torch's own backward kernels: the gradient is yours to derive.
# - The question: write $\bar x_j = \sum_i J_{ij}\, \bar y_i$ with the entries of $J$ from Part A.
#   Which part of it depends on $j$, and which is the same for every $j$?
# - The visible check uses one row, batch 1, batch 7 (once with as many rows as columns), a
#   3-D input, a transposed view, and rows of 300. Grading adds more shapes on random inputs.
# %% solution id=softmax_backward
def softmax_backward(y, dy):
    """Gradient of the loss with respect to the logits of y = softmax(x), from y alone.

    y: (..., N), softmax output; dy: (..., N), ȳ, the gradient at y.
    Returns dx: (..., N), x̄, the shape of y. Nothing N×N is built.
    """
    ### BEGIN SOLUTION
    s = torch.sum(y * dy, dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩: read 2N, keep 1 per row
    return y * (dy - s)  # (..., N): x̄ = y ⊙ (ȳ − s), write N per row
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — N = 2, on paper</summary>
#
# Take one row of two and write the product out: $\bar x_1 = J_{11}\, \bar y_1 + J_{21}\, \bar y_2$, with
# the entries of $J$ from Part A. Expand it, and collect everything that is multiplied by $y_1$.
# Do the same for $\bar x_2$. What appears in both results, unchanged?
#
# </details>
#
# <details><summary>Hint 2 — any N: split the sum</summary>
#
# Substitute Part A's $J_{ij}$ into $\bar x_j = \sum_i J_{ij}\, \bar y_i$ and split it into the sum of
# the $\delta_{ij}$ terms and the sum of the rest. A Kronecker delta inside a sum picks one term,
# $\sum_i \delta_{ij}\, a_i = a_j$: which term is left of the first sum? In the rest, $y_j$ can come
# out of the sum over $i$ — and what is left inside does not depend on $j$ at all: a number you
# compute once per row. How many such numbers does a row need? Mind the sign of each part.
#
# </details>
#
# <details><summary>Hint 3 — the shapes of a row reduction</summary>
#
# A number per row is a sum over the last axis. Keep the axis (`keepdim=True`), so that it has shape
# $(\dots, 1)$ and broadcasts down the row it belongs to. Without it, a tensor of shape $(B,)$ meets
# one of shape $(B, N)$ aligned from the right — along the wrong axis — and when $B = N$ nothing
# even complains. Sum over the last axis only: each row has its own number.
#
# </details>
# %% test id=test_softmax_backward points=3
"""softmax_backward: dx has the shape of y and matches autograd at one row,
batch 1, batch 7, a 3-D y and a transposed view, and no tensor of N²
elements is allocated for rows of N = 300."""
course.selfcheck.softmax_backward(softmax_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_backward(softmax_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The collapse to one scalar per row.** Entry by entry,
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
# ($\odot$ is the elementwise product): in code, `s` is the sum of `y * dy` over the last axis,
# kept as a column (`keepdim=True`), then `y * (dy - s)`. The whole $N \times N$ matrix only ever acted through that one scalar.
#
# </details>
#
# What it costs, per row of length $N$:
#
# | | time | extra memory | memory traffic |
# |---|---|---|---|
# | dense: build $J$, then $J \bar y$ | $O(N^2)$ | $N^2$ numbers | write $N^2$, read $N^2 + 2N$, write $N$ |
# | collapsed: the hub, then $\bar x$ | $O(N)$ | **one** number, $s$ | read $2N$, write $N$ |
#
# Here is a row of 12 drawn both ways — everything the dense product uses on the left,
# everything the collapsed one uses on the right:
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
# ## 5 · A shift per row
#
# Back to the question §1 left open: `torch.softmax` survives logits of 1000 where the formula
# as written gives NaN. The cheapest change a forward can make is to subtract one number $c$
# from every logit of a row before exponentiating. Part C asks what that does: to $y$, to
# $\bar x$, and to the gradient of $c$ itself. That last one matters whenever $c$ is computed
# from the logits, as a stabilising shift would be: whatever $\bar c$ is, autograd sends it back
# through $c$ into the logits, and a hand-written backward has to do the same. (Part E meets
# another op that subtracts a number per row computed from the logits, so keep your working.)
#
# ## Part C — shifted_softmax_vjp (2 points)
#
# Write `shifted_softmax_vjp(x, c, dy)`: the forward $y = \operatorname{softmax}(x - c)$ over
# the last axis, with one shift $c$ per row subtracted from every logit of that row, and its
# vector–Jacobian product — the gradients $\bar x$ and $\bar c$ for an upstream $\bar y$.
#
# - The questions, to derive first: how does $y$ change when $c$ does? What are $\bar x$ and
#   $\bar c$ — derive them from Parts A and B and the chain rule, do not guess them from a picture.
# - `x`: $(\dots, N)$ logits, float32 or float64. `c`: $(\dots, 1)$, one shift per row,
#   broadcast along it. `dy`: $(\dots, N)$, $\bar y$. Return `(y, dx, dc)`: `y` and `dx` of the
#   shape of `x`, `dc` of the shape of `c`.
# - **Forward**:
#   - `y` must be finite and right for **float32 logits as large as ±1000, whatever `c` you are
#     handed**: the check hands you $c = 0$, $c$ above the row's largest logit, $c$ at its
#     smallest, and rows a thousand apart in one batch;
#   - write it yourself, from `exp` and row reductions (`amax`, `sum`): `torch.softmax`,
#     `log_softmax` and `logsumexp` are refused here, because they stabilise for you.
# - **Backward**: `dx` and `dc` from your derivation, without autograd.
# - The visible check uses one row, batch 1, batch 7 (once square), a 3-D input, a transposed
#   view in float64, and three float32 batches of large logits.
# %% solution id=shifted_softmax_vjp
def shifted_softmax_vjp(x, c, dy):
    """y = softmax(x − c) over the last axis, with one shift per row, and the gradients for x and c.

    x: (..., N) logits, float32 or float64; c: (..., 1), one shift per row; dy: (..., N), ȳ = ∂L/∂y.
    Returns (y, dx, dc): y and dx of shape (..., N); dc of shape (..., 1), the shape of c.
    """
    ### BEGIN SOLUTION
    # softmax(x − c) = softmax(x − m) for any c: shift by the row max m instead, so that every
    # exponent is ≤ 0 (no overflow) and the largest is 0 (ℓ ≥ 1: no 0/0).
    m = x.amax(dim=-1, keepdim=True)  # (..., 1), one per row
    e = (x - m).exp()  # (..., N), in (0, 1]
    y = e / e.sum(dim=-1, keepdim=True)  # (..., N)
    s = (y * dy).sum(dim=-1, keepdim=True)  # (..., 1) the hub of Part B
    dx = y * (dy - s)  # the plain softmax backward: c appears nowhere
    dc = torch.zeros_like(c)  # c̄ = −1ᵀ J ȳ = −(J 1)ᵀ ȳ = 0: every row of J sums to zero
    return y, dx, dc
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — where does c enter?</summary>
#
# Name the shifted logits $z = x - c\mathbf{1}$, so that $y = \operatorname{softmax}(z)$. The chain rule
# through $z$ needs two small derivatives: $\partial z_j / \partial x_k$ and $\partial z_j / \partial c$.
# What are they? Write $\bar x$ and $\bar c$ in terms of $\bar z$ — one of them is a sum over the row,
# of the shape of `c`. And $\bar z$ itself is a backward you already wrote.
#
# </details>
#
# <details><summary>Hint 2 — the forward, in float32</summary>
#
# $e^z$ is inf above $z \approx 88.7$ in float32 and rounds to 0 below $z \approx -103.9$; both
# inf / inf and 0 / 0 are NaN, and the $c$ you are handed may leave $x - c$ anywhere. Write one entry,
# $y_i = e^{x_i - c} / \sum_j e^{x_j - c}$, split each exponential as $e^{x_i}\, e^{-c}$, and look at
# where $e^{-c}$ ends up. What does that allow a forward to do with the $c$ it was given? If you
# choose a number of your own, which one, computed from each row, makes every exponent $\le 0$ and
# the largest exactly 0 (so that the denominator is at least 1)? It must be one number per row.
#
# </details>
#
# <details><summary>Hint 3 — c̄ for N = 2</summary>
#
# With Hint 1, $\bar c = -(\bar z_1 + \bar z_2)$, and $\bar z = J \bar y$ with Part A's $2 \times 2$ $J$:
#
# $$\bar z_1 = y_1 (1 - y_1)\, \bar y_1 - y_1 y_2\, \bar y_2, \qquad \bar z_2 = \dots$$
#
# Fill in $\bar z_2$, add the two, and collect the coefficient of $\bar y_1$. Then use what every row
# of a softmax sums to. (Differentiating only the numerator $e^{x_i - c}$ forgets that $c$ sits in every
# exponent of the denominator too.)
#
# </details>
#
# <details><summary>Hint 4 — any N</summary>
#
# For any $N$, $\bar c = -\sum_j \bar z_j = -\mathbf{1}^\top J \bar y$: the coefficient of $\bar y_i$ is minus
# the sum of row $i$ of $J$ ($J$ is symmetric). Add up row $i$ of Part A's $J$ with
# $\sum_j y_j = 1$. Is the answer special to softmax, or would any function of $z$ give it?
#
# </details>
# %% test id=test_shifted_softmax_vjp points=2
"""shifted_softmax_vjp: y, dx and dc against autograd at one row, batch 1,
batch 7, a 3-D x and a transposed view, finite and right for float32 logits
up to ±1000 whatever the shift, with the forward written by hand."""
course.selfcheck.shifted_softmax_vjp(shifted_softmax_vjp)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.shifted_softmax_vjp(shifted_softmax_vjp)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The max shift is free.** The factor $e^{-c}$ is in the numerator and in every term of the
# denominator, so it cancels:
#
# $$\boxed{\;\operatorname{softmax}(x - c\mathbf{1}) = \operatorname{softmax}(x)\ \text{ for every } c\;}$$
#
# So a forward may subtract whatever keeps the arithmetic safe, and the kernels do: the row max
# $m = \max_j x_j$ (in code `x.amax` over the last axis, kept as a column) makes every exponent $\le 0$ and the
# largest exactly 0, so the sum is at least 1 — no overflow, and no 0/0.
#
# And the backward? $y$ does not depend on $c$, so $\bar x$ is Part B's for every $c$, and the
# gradient of $c$ itself is
#
# $$\bar c = -\mathbf{1}^\top J \bar y = -(J \mathbf{1})^\top \bar y = 0 ,
#   \qquad\text{since}\quad J\mathbf{1} = 0 :$$
#
# every row of $J$ sums to $y_i - y_i \sum_j y_j = 0$ — in code `dc = torch.zeros_like(c)`. That is
# special to softmax: it holds because the output is normalised, so a shift of the whole row
# cannot move it. For $e^{x - c}$, or for log-softmax (Part E), the same chain rule gives a
# $\bar c$ that is not zero.
#
# When the shift is computed from the logits, $c = \max_j x_j$, autograd would send $\bar c$
# back through the max to the entry it picked — and $\bar c = 0$, so nothing flows, whichever entry
# the max picks, even at a tie where max has no derivative at all. **The backward of the stable
# softmax is the backward of the plain one.** Equivalently, every row of $\bar x$ sums to zero.
#
# </details>
#
# Autograd agrees — through the max, with the shift held constant, and without one:
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

# The same chain rule for another op of x − c: the shift's gradient is zero for softmax only.
c = torch.zeros(7, 1, dtype=F64)  # (B, 1), one shift per row
for name, op in (("softmax(x − c)", lambda x, c: torch.softmax(x - c, dim=-1)), ("exp(x − c)    ", lambda x, c: (x - c).exp())):
    c_leaf = c.clone().requires_grad_(True)
    dc = torch.autograd.grad(op(x, c_leaf), c_leaf, dy)[0]  # (B, 1)
    print(f"c̄ for {name}: largest |entry| {dc.abs().max().item():.1e}")

# %% [markdown]
# The last line is the other use of the shift. A fused kernel can save *one number per row*, the
# log-sum-exp $\operatorname{lse} = m + \log \sum_j e^{x_j - m}$ (computed with the shift, so it
# never overflows), and rebuild $y = e^{x - \operatorname{lse}}$ from $x$ whenever it needs it. FlashAttention does exactly that
# (notebook 05), because its $y$ is a $T \times T$ matrix too big to save.
#
# In float32 the difference the shift makes is all or nothing. Rows of 64 logits drawn at a
# growing scale, through the formula as written and through the shifted one:
# %%
def shifted_softmax(x):
    """Softmax over the last axis with the row max subtracted first."""
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


gen = torch.Generator().manual_seed(6)
scales = torch.logspace(0, 3, 31).tolist()  # logits of size 1 … 1000
rows = [randn(gen, 256, 64, dtype=torch.float32) * sc for sc in scales]  # (256, 64) float32 each
broken = {name: [(~torch.isfinite(f(r))).any(dim=-1).float().mean().item() for r in rows]
          for name, f in (("as written, exp(x) / Σ exp(x)", naive_softmax), ("shifted by the row max", shifted_softmax))}
fig, ax = plt.subplots(figsize=(6.4, 3.4))
for name, frac in broken.items():
    ax.semilogx(scales, frac, marker="o", markersize=3, label=name)
ax.axvline(88.7 / 2.5, color="grey", linestyle="--", linewidth=1)  # the largest of 64 normals is about 2.5σ
ax.annotate("largest logit of a row ≈ 88.7:\nexp(x) overflows", (88.7 / 2.5 * 1.15, 0.15), fontsize=8, color="grey")
ax.set(xlabel="scale of the logits (standard deviation)", ylabel="fraction of rows with NaN or inf",
       title="softmax in float32, rows of 64")
ax.grid(True, alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 6 · Softmax + cross-entropy
#
# A classifier's loss for $M$ rows of logits $x_r$ with target classes $t_r$ is the mean
# negative log-probability of the target, exactly as `torch.nn.functional.cross_entropy`
# computes it:
#
# $$L = \frac{1}{M} \sum_{r=1}^{M} -\log y_{r, t_r}, \qquad y_r = \operatorname{softmax}(x_r).$$
#
# Its gradient with respect to the logits can always be had by chaining two backwards: the
# backward of $-\log$, which gives $\bar y$, then Part B's softmax backward. Part D asks what
# that chain collapses to when you do it on paper — and whether the result survives where the
# chain, computed in floating point, does not: at a target whose probability rounds to zero.
# %% [markdown]
# ## Part D — softmax_cross_entropy_backward (2 points)
#
# Write `softmax_cross_entropy_backward(logits, target)`: the gradient of the mean
# cross-entropy over all rows with respect to the logits.
#
# - `logits` has shape $(M, C)$: $M$ rows of $C$ class scores. `target` has shape $(M,)$ and
#   dtype int64, one class index per row. Leading axes are batch axes here too: logits of shape
#   $(B, T, C)$ with targets $(B, T)$ are $M = B \cdot T$ rows, and the mean runs over all of
#   them. That is the loss `F.cross_entropy(logits.reshape(-1, C), target.reshape(-1))`
#   computes. Flatten first if you try it on 3-D logits: `F.cross_entropy` reads axis 1 as the
#   classes, so on a $(B, T, C)$ tensor it raises (or, when $T = C$, quietly normalises over the
#   wrong axis).
# - `dlogits` has the shape of `logits`. No autograd and none of torch's own backward kernels;
#   `torch.softmax` is fine here (Part C is why it is safe).
# - The questions: what is $\bar y$ for this loss, and what does Part B's backward make of it?
#   Does the result still need $1/y_t$?
# - The check includes a batch of saturated logits, where the target's probability is below the
#   smallest float64, and a transposed view.
# %% solution id=softmax_cross_entropy_backward
def softmax_cross_entropy_backward(logits, target):
    """Gradient of the mean cross-entropy over rows with respect to the logits.

    logits: (M, C) class scores, or (..., C): every leading axis is a batch axis.
    target: (M,) int64 class indices, or the leading shape of logits.
    Returns dlogits: the shape of logits.
    """
    ### BEGIN SOLUTION
    C = logits.shape[-1]  # classes
    M = logits.numel() // C  # rows, over every leading axis
    y = torch.softmax(logits, dim=-1)  # (..., C): read C, write C per row
    e_t = torch.nn.functional.one_hot(target, num_classes=C).to(y.dtype)  # (..., C), 1 at the target
    return (y - e_t) / M  # no log, no 1/y_t: finite however saturated the row
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what is ȳ?</summary>
#
# Take one row and drop its index $r$. The loss touches only entry $t$ of $y$, through
# $-\frac{1}{M} \log y_t$. So $\bar y$ is zero everywhere but at $t$ — what is it there? Write it as a
# number times the one-hot vector $e_t$ of the target.
#
# </details>
#
# <details><summary>Hint 2 — feed it to Part B, one piece at a time</summary>
#
# Part B's backward needs the hub first. With a $\bar y$ that is zero but at $t$, the sum
# $\sum_i y_i\, \bar y_i$ has one term: write it out. What happens to the $1/y_t$ that the logarithm
# brought? Then put that hub and your $\bar y$ into Part B's expression, entry $j \ne t$ first, then
# entry $t$. Does anything that is left still divide by $y_t$? It had better not: $y_t$ can round to 0
# (the saturated case), where $1/y_t$ is inf and the chain gives NaN. The softmax itself must be the
# stable one of Part C (`torch.softmax` is).
#
# </details>
#
# <details><summary>Hint 3 — M, and each row's own target</summary>
#
# $M$ counts the rows over every leading axis: how many elements does `logits` hold, and how many of
# them are in one row? The target of row $r$ is a column of that row only: `F.one_hot(target, C)`
# gives a $(\dots, C)$ tensor with a 1 at each row's own target (in int64: convert it to the dtype of
# the logits). Indexing `[:, target]` instead hits every row at every row's target.
#
# </details>
#
# <details><summary>Hint 4 — the two-class case</summary>
#
# With $N = 2$, target $t = 1$ and $M = 1$: $\bar y = (-1/y_1,\ 0)$, so the hub is $y_1 \cdot (-1/y_1)$.
# Put it into Part B's expression for both entries and simplify with $y_1 + y_2 = 1$. The general
# row is the same computation.
#
# </details>
# %% test id=test_softmax_cross_entropy_backward points=2
"""softmax_cross_entropy_backward: dlogits has the shape of logits and
matches autograd through F.cross_entropy on the flattened rows, at batch 1,
batch 7, 3-D logits, saturated logits and a transposed view."""
course.selfcheck.softmax_cross_entropy_backward(softmax_cross_entropy_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_cross_entropy_backward(softmax_cross_entropy_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The second collapse.** For one row, the loss touches only entry $t$ of $y$, so
# $\bar y = -\frac{1}{M\, y_t}\, e_t$, where $e_t$ is the one-hot vector of the target. Feed it to the
# softmax backward. The hub:
#
# $$s = \langle y, \bar y \rangle = y_t \cdot \left(-\frac{1}{M\, y_t}\right) = -\frac{1}{M},$$
#
# and then
#
# $$\bar x = y \odot (\bar y - s) = -\frac{y_t}{M\, y_t}\, e_t + \frac{y}{M}
#   \qquad\Longrightarrow\qquad
#   \boxed{\;\bar x = \frac{y - e_t}{M}\;} ,$$
#
# in code `(y - e_t) / M`, with `y` the softmax of the logits over the last axis, `e_t` the one-hot
# of the targets in the logits' dtype, and `M = logits.numel() // C`.
#
# The $1/y_t$ from the logarithm met the factor $y_t$ from the softmax and cancelled, exactly.
# What is left needs no division, no logarithm, and no $\bar y$: the softmax of the row, minus 1
# at the target, over $M$. That is why every framework ships softmax and cross-entropy as one
# op (`cross_entropy` takes logits, never probabilities), and why a fused cross-entropy kernel
# needs to save only one log-sum-exp per row for its backward.
#
# </details>
#
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
# ## 8 · Log-softmax: a shift that is not free
#
# `F.cross_entropy` never forms $y$. It computes the log-probabilities
#
# $$z = \log \operatorname{softmax}(x) = x - \operatorname{lse}\,\mathbf{1}, \qquad \operatorname{lse} = \log \sum_j e^{x_j},$$
#
# one log-sum-exp $\operatorname{lse}$ per row (computed with the max shift, so it never overflows), and reads off
# $-z_t$. Language models, samplers and RL losses keep $z$ for its own sake: it is the stable way to
# hold probabilities that underflow. So log-softmax needs a backward of its own.
#
# Look at the forward: it is $x$ minus one number per row, like Part C's — but this number is
# computed from $x$, and nothing divides it away. Here is autograd's $\bar x$ next to $\bar z$ for one
# row, with the sum of each:
# %% check-output
gen = torch.Generator().manual_seed(7)
x, dz = randn(gen, 6), randn(gen, 6)  # one row of logits, and z̄
dx_auto = autograd_vjp(lambda x: torch.log_softmax(x, dim=-1), x, dz)
print("z̄         :", [round(v, 3) for v in dz.tolist()], f" sum {dz.sum().item():+.3f}")
print("x̄ autograd:", [round(v, 3) for v in dx_auto.tolist()], f" sum {dx_auto.sum().item():+.3f}")

# %% [markdown]
# The two differ, and $\bar x$ sums to zero where $\bar z$ does not. Part E asks why.
#
# ## Part E — log_softmax_backward (2 points)
#
# Write `log_softmax_backward(z, dz)`: $\bar x$ for $z = \log \operatorname{softmax}(x)$ over the last
# axis, from the saved output `z` and its gradient `dz` $= \bar z$, both of shape $(\dots, N)$. `dx`
# has the shape of `z`.
#
# - What you have: $z$ (the forward saved it) and $\bar z$. Not $x$, not $y$.
# - The memory rule of Part B: nothing with $N^2$ entries (checked on rows of $N \ge 256$).
# - No autograd, and none of torch's own backward kernels.
# - The questions: what is $\partial \operatorname{lse} / \partial x_j$ — have you met it before? Through how many
#   paths does $x_j$ reach $z_i$? And can you rebuild from $z$ alone what that derivative needs?
# - The visible check uses one row, batch 1, batch 7 (once square), a 3-D input, a transposed view,
#   and rows of 300.
# %% solution id=log_softmax_backward
def log_softmax_backward(z, dz):
    """Gradient of the loss with respect to the logits of z = log_softmax(x), from z alone.

    z: (..., N), log-softmax output; dz: (..., N), z̄, the gradient at z.
    Returns dx: (..., N), x̄, the shape of z. Nothing N×N is built.
    """
    ### BEGIN SOLUTION
    y = z.exp()  # (..., N): softmax(x) = e^z, rebuilt from the output
    g = dz.sum(dim=-1, keepdim=True)  # (..., 1): Σ_j z̄_j, all that reaches the shift lse, one per row
    return dz - y * g  # x̄ = z̄ − y Σ_j z̄_j: read 2N, write N per row
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — two paths from x_j to z_i</summary>
#
# $z_i = x_i - \operatorname{lse}$. The logit $x_j$ reaches $z_i$ directly (only when $i = j$) and through
# $\operatorname{lse}$ (always). So $\partial z_i / \partial x_j = \delta_{ij} - \partial \operatorname{lse} / \partial x_j$, and
# $\bar x_j = \sum_i (\partial z_i / \partial x_j)\, \bar z_i$. Do the $\delta_{ij}$ part of that sum first:
# what does it leave?
#
# </details>
#
# <details><summary>Hint 2 — the other path, for N = 2</summary>
#
# With $\operatorname{lse} = \log(e^{x_1} + e^{x_2})$, work out $\partial \operatorname{lse} / \partial x_1$ by the
# chain rule through the logarithm. Have you seen that expression before, under another name? Then
# the second part of $\bar x_1$ is $-\frac{\partial \operatorname{lse}}{\partial x_1} (\bar z_1 + \bar z_2)$: what is summed, and is that sum the
# same for both entries of the row? Compare Part C: there $\bar c$ was minus a sum of gradients too —
# what made it vanish there, and is it there here?
#
# </details>
#
# <details><summary>Hint 3 — from z alone, one number per row</summary>
#
# The derivative of $\operatorname{lse}$ is a function of $x$, and you hold only $z$: which elementwise
# function of $z$ gives it back? (Write $z_j$ with $\operatorname{lse}$ and exponentiate.) The sum
# over the row is a reduction over the last axis with the axis kept, $(\dots, 1)$, so that it
# broadcasts down its own row.
#
# </details>
# %% test id=test_log_softmax_backward points=2
"""log_softmax_backward: dx has the shape of z and matches autograd of
log_softmax at one row, batch 1, batch 7, a 3-D z and a transposed view, and
no tensor of N² elements is allocated for rows of N = 300."""
course.selfcheck.log_softmax_backward(log_softmax_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.log_softmax_backward(log_softmax_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The log-softmax backward.** Two paths from $x_j$ to $z_i$, directly and through $\operatorname{lse}$, with
# $\partial \operatorname{lse} / \partial x_j = e^{x_j} / \sum_k e^{x_k} = y_j = e^{z_j}$:
#
# $$\bar x_j = \sum_i \left(\delta_{ij} - y_j\right) \bar z_i = \bar z_j - y_j \sum_i \bar z_i ,
#   \qquad\qquad
#   \boxed{\;\bar x = \bar z - e^{z} \textstyle\sum_i \bar z_i\;}$$
#
# in code `y = z.exp()`, `g` the sum of `dz` over the last axis kept as a column, then `dz - y * g`. Again one number per
# row — here the plain sum of $\bar z$, not a weighted one — and again $O(N)$ work and no Jacobian.
#
# Part C's shift and this one are the same chain rule with opposite outcomes. In Part C the shift's
# gradient was $-\mathbf 1^\top J \bar y$, and softmax's normalisation made it vanish. Here $z$ is not
# normalised by anything that could absorb $\operatorname{lse}$: what reaches $\operatorname{lse}$ is $\sum_i \bar z_i$, and it flows back
# into every logit in proportion to $y_j$. So every row of $\bar x$ sums to
# $\sum_j \bar z_j - \sum_j y_j \sum_i \bar z_i = 0$, as autograd showed above.
#
# Two checks you can do in your head. Cross-entropy is $-\frac{1}{M} z_t$, so $\bar z = -e_t / M$,
# $\sum_i \bar z_i = -1/M$, and this backward gives $(y - e_t)/M$: Part D again, by a second road. And
# the log-sum-exp $\operatorname{lse}$ that a fused kernel saves per row (notebooks 05 and 07) is exactly
# this forward's shift; its gradient, $y$, is why a saved $\operatorname{lse}$ is enough to rebuild
# $y = e^{x - \operatorname{lse}}$ in the backward.
#
# </details>
# %% [markdown]
# ## What to take away
#
# - A dense Jacobian is a derivation tool, not a data structure. Multiply it by $\bar y$ on
#   paper and the structure shows: here one scalar per row, $s = \langle y, \bar y\rangle$, and
#   $\bar x = y \odot (\bar y - s)$ — $O(N)$ time and $O(1)$ extra memory instead of $O(N^2)$.
# - The softmax backward needs $y$ (or $x$ and one log-sum-exp per row), not the logits alone.
# - The max shift is free: $\operatorname{softmax}(x - c\mathbf{1}) = \operatorname{softmax}(x)$, so
#   the forward subtracts the row max, and $\bar c = -(J\mathbf{1})^\top \bar y = 0$, so the
#   backward does nothing about it. That is softmax's normalisation at work, not a property of
#   shifts: for $e^{x - c}$ or log-softmax the shift's gradient is not zero.
# - Softmax + cross-entropy collapse to $(y - e_t)/M$, which stays finite and of order one where
#   the unfused chain overflows or vanishes.
# - Log-softmax's backward is $\bar z - e^{z} \sum_i \bar z_i$: one plain row sum, from the saved
#   output alone.
#
# Next, notebook 03 writes this backward as a Triton kernel: one row per program, $s$
# accumulated in registers, and masks for rows whose length is not a power of two.

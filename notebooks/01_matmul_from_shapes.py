# %% [markdown]
# # 01 · Matmul backward from shapes
#
# Every linear layer is a matmul, and its backward pass is two more matmuls: one for the
# input, one for the weights. In this notebook you derive both without looking anything up,
# from shapes alone. Then you look at them the way a kernel writer does: which entries each
# output element reads, which of the two needs a sum over the whole batch, and why that sum
# is the hard half of a GPU backward. It ends with the rule behind every bias gradient:
# **a value that is copied in the forward pass is summed in the backward pass.**
#
# | Part | you write | points |
# |---|---|---|
# | A | `linear_backward(x, w, dy) -> (dx, dw)` | 3 |
# | B | `linear_bias_backward(x, w, b, dy) -> (dx, dw, db)` | 2 |
# | C | `reduce_to_shape(grad, shape)` | 2 |
#
# **Notation** (from notebook 00). $L$ is a scalar loss. For any tensor $t$, the bar
# $\bar t = \partial L / \partial t$ is its gradient, and it has **exactly the shape of $t$**.
# In code $\bar t$ is `dt`: $\bar y$ is `dy`, $\bar x$ is `dx`. The weight matrix is $W$ in the
# math and `w` in the code. A backward function receives $\bar y$ and returns the gradient of
# each input.
# %%
import course
import torch
import matplotlib.pyplot as plt

from course.access_patterns import plot_backward_reads

F64 = torch.float64  # every experiment here runs in float64, so no rounding noise can hide a bug


def randn(gen, *shape):
    """Standard-normal float64 values of the given shape, drawn from the generator `gen`."""
    return torch.randn(shape, generator=gen, dtype=F64)


def autograd_grads(forward, inputs, dy):
    """The gradient of ⟨forward(*inputs), dy⟩ with respect to each input, from torch's autograd.

    The answer key for this notebook's experiments. Your own functions must not use autograd.
    """
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    return torch.autograd.grad(forward(*leaves), leaves, dy)

# %% [markdown]
# ## 1 · Let the shapes place the transposes
#
# Is it $x^\top \bar y$ or $\bar y\, x^\top$? $\bar y W^\top$ or $W^\top \bar y$? There is no
# need to remember: the shapes decide.
#
# Take one linear layer with a batch of $B$ rows, $K$ input features and $N$ output features:
#
# $$y = x W, \qquad x \in \mathbb{R}^{B\times K},\quad W \in \mathbb{R}^{K\times N},\quad y \in \mathbb{R}^{B\times N}.$$
#
# The backward pass receives $\bar y$, of shape $(B, N)$, and must return $\bar x$, of shape
# $(B, K)$, and $\bar W$, of shape $(K, N)$. Since $y$ is linear in $x$, $\bar x$ is made of
# $\bar y$ and $W$ alone: one product of the two, each perhaps transposed. Ask which product
# comes out $(B, K)$:
#
# - Its rows must be $B$, and only $\bar y$ has a $B$ axis: $\bar y$ goes on the left.
# - Its columns must be $K$, and only $W$ has a $K$ axis, as its rows: $W$ goes on the right, transposed.
# - The inner axes then agree, $N$ against $N$, and the product sums over them.
#
# $$\bar x = \bar y\, W^\top: \qquad (B, N)\,(N, K) \to (B, K).$$
#
# The same three questions for $\bar W$, made of $x$ and $\bar y$: rows $K$ (only $x$ has it,
# as columns, so $x^\top$ on the left), columns $N$ ($\bar y$ on the right), inner axis $B$:
#
# $$\bar W = x^\top \bar y: \qquad (K, B)\,(B, N) \to (K, N).$$
#
# Exactly one arrangement fits. The cell below tries all eight — both orders, each operand
# transposed or not — and keeps those whose shapes chain into the shape of the gradient.
# %% check-output
def arrangements(a_name, a, b_name, b, target):
    """Every product of a and b (either order, either one transposed) whose result has shape `target`."""
    fits = []
    for (n1, t1), (n2, t2) in [((a_name, a), (b_name, b)), ((b_name, b), (a_name, a))]:
        for flip1 in (False, True):
            for flip2 in (False, True):
                left, right = (t1.mT if flip1 else t1), (t2.mT if flip2 else t2)
                chains = left.shape[1] == right.shape[0]  # the inner axes must agree
                if chains and (left.shape[0], right.shape[1]) == target:
                    fits.append(f"{n1}{'ᵀ' * flip1} {n2}{'ᵀ' * flip2}")
    return fits


B, K, N = 7, 5, 3  # batch, in features, out features: three different sizes on purpose
x, w, dy = torch.empty(B, K), torch.empty(K, N), torch.empty(B, N)
print("x̄ (B, K) from ȳ and W:", arrangements("ȳ", dy, "W", w, (B, K)))
print("W̄ (K, N) from x and ȳ:", arrangements("x", x, "ȳ", dy, (K, N)))

K = N = 4  # a square W: now the shapes cannot tell ȳ W from ȳ Wᵀ
w, dy = torch.empty(K, N), torch.empty(B, N)
print("x̄ with a square W:    ", arrangements("ȳ", dy, "W", w, (B, K)))

# %% [markdown]
# With three different sizes, exactly one product fits, and it is the right one. With a
# square $W$, $\bar y W$ fits as well — and is wrong. The shape argument needs distinct sizes
# to bite: test your backward with $K \neq N$. The checks in this notebook also use a square
# $W$ on purpose: there a transposed placement passes every shape test, and only the values
# give it away (the `transpose` diagnosis).
# %% [markdown]
# ## 2 · The elementwise view: which index is summed
#
# Shapes tell you where the transposes go. Indices tell you what each output element costs.
# Entry by entry, the forward pass is
#
# $$y_{bn} = \sum_k x_{bk}\, W_{kn}.$$
#
# Nudge one input entry $x_{bk}$ and only row $b$ of $y$ moves: $y_{bn}$ by $W_{kn}$ times the
# nudge, for every $n$. The chain rule adds up those effects, each weighted by how much the
# loss cares about that output, $\bar y_{bn}$:
#
# $$\bar x_{bk} = \sum_{n} \bar y_{bn}\, W_{kn} \qquad \text{a sum over the features } n.$$
#
# Nudge one weight $W_{kn}$ instead and *every* row moves, because every sample is multiplied
# by the same weight:
#
# $$\bar W_{kn} = \sum_{b} x_{bk}\, \bar y_{bn} \qquad \text{a sum over the batch } b.$$
#
# The two formulas use the same three matrices; what differs is the index summed away, and it is
# the inner axis of each product in §1. The rest of this notebook follows from that difference:
# each entry of $\bar x$ is its own short sum of $N$ terms, while every entry of $\bar W$
# collects a contribution from every sample in the batch.
#
# One entry of each, by hand, against autograd:
# %%
gen = torch.Generator().manual_seed(0)
B, K, N = 7, 5, 3
x, w, dy = randn(gen, B, K), randn(gen, K, N), randn(gen, B, N)  # (B, K), (K, N), (B, N)
dx_ref, dw_ref = autograd_grads(torch.matmul, (x, w), dy)

b, k, n = 2, 4, 1
dx_bk = sum(dy[b, j] * w[k, j] for j in range(N))  # Σ over n of ȳ[b, n] W[k, n]: N terms
dw_kn = sum(x[i, k] * dy[i, n] for i in range(B))  # Σ over b of x[b, k] ȳ[b, n]: B terms
print(f"x̄[{b}, {k}]: sum over n = {dx_bk:+.6f}   autograd = {dx_ref[b, k]:+.6f}")
print(f"W̄[{k}, {n}]: sum over b = {dw_kn:+.6f}   autograd = {dw_ref[k, n]:+.6f}")

# %% [markdown]
# ## 3 · Many leading axes: every one is a batch axis
#
# In a transformer the input of a linear layer has shape $(B, T, K)$ — a batch of sequences of
# tokens — and `x @ w` multiplies every token's row by $W$. A matmul does not care how the rows
# are stacked: $(B, T, K)$ behaves exactly like $B \cdot T$ rows of length $K$. So for $x$ of
# shape $(\dots, K)$:
#
# - $\bar x = \bar y W^\top$ keeps all the leading axes. `dy @ w.mT` broadcasts over them and
#   comes out with the shape of `x`.
# - $\bar W$ sums over **every** leading axis, because every row — every token of every
#   sequence — used the same $W$. The simplest way: flatten both to rows first,
#   `x.reshape(-1, K)` and `dy.reshape(-1, N)`, then use the two-axis formula.
#
# Careful with `.T` on a tensor of more than two axes: it reverses *all* of them (and PyTorch
# warns that this use is deprecated). `.mT` swaps the last two.
# %%
gen = torch.Generator().manual_seed(1)
x3 = randn(gen, 4, 3, 5)  # (B, T, K)
w = randn(gen, 5, 2)  # (K, N)
y3 = x3 @ w  # (B, T, N)
y_rows = x3.reshape(-1, 5) @ w  # (B·T, N): the same 12 rows, stacked flat
print("x @ w on (4, 3, 5) equals x @ w on its 12 rows:", torch.allclose(y3.reshape(-1, 2), y_rows))

# %% [markdown]
# ## Part A — linear_backward (3 points)
#
# Write the backward pass of $y = xW$ for `x` of shape $(\dots, K)$ — any number of leading
# axes — and `w` of shape $(K, N)$:
#
# $$\bar x = \bar y\, W^\top, \qquad \bar W = x^\top \bar y \quad \text{(summed over every leading axis)}.$$
#
# - `dx` must have the shape of `x`, and `dw` the shape of `w`.
# - Use plain tensor operations, not autograd: the checks stop any call into it.
# - The test cell first runs a visible check — batch 1, batch 7, a 3-D input and a square `w`,
#   compared with torch's autograd. A failure's first line names the kind of bug. Grading then
#   runs more shapes on random inputs.
# %% solution id=linear_backward
def linear_backward(x, w, dy):
    """Gradients of y = x @ w.

    x: (..., K) input; w: (K, N) weights; dy: (..., N), the gradient ȳ of the loss with respect to y.
    Returns (dx, dw): x̄ with the shape of x and W̄ with the shape of w.
    """
    ### BEGIN SOLUTION
    K, N = w.shape  # in features, out features
    dx = dy @ w.mT  # x̄ = ȳ Wᵀ: (..., N) @ (N, K) -> (..., K); the leading axes ride along
    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)  # (R, K), (R, N): all leading axes are batch
    dw = x_rows.mT @ dy_rows  # W̄ = xᵀ ȳ: (K, R) @ (R, N) -> (K, N); the inner axis sums over all R rows
    return dx, dw
    ### END SOLUTION

# %% test id=test_linear_backward points=3
"""linear_backward: dx has the shape of x and dw that of w, with the right values at batch 1 and batch 7, for a 3-D x and for a square w."""
course.selfcheck.linear_backward(linear_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_backward(linear_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## 4 · Picture: what one output element reads
#
# Now draw the two backward matmuls as a GPU kernel sees them. The batch below has $B = 16$
# rows, cut by the dashed lines into 4 blocks of rows — the way a kernel hands rows to
# different programs (thread blocks). The filled squares are what one output element reads.
# %%
plot_backward_reads(B=16, K=5, N=4, b=5, k=1, n=2, blocks=4)
plt.show()

# %% [markdown]
# **$\bar x$ parallelises like the forward pass.** $\bar x_{bk}$ reads one row of $\bar y$ and one
# row of $W$, $N$ values each. A program that owns a block of rows of $\bar x$ needs the same
# rows of $\bar y$, and $W$, and nothing that another program computes. A bigger batch is just
# more independent programs.
#
# **$\bar W$ is a reduction over the batch.** $\bar W_{kn}$ reads a whole column of $x$ and a
# whole column of $\bar y$: $B$ values each. In training the rows are every token of the batch —
# tens of thousands — while $W$ keeps its size. If each tile of $\bar W$ went to one program
# looping over all the rows, a small $W$ would make only a handful of programs and leave most of
# the GPU idle. So the batch itself is split across programs, as the dashed lines show, and then
# each program holds only a *partial* sum of $\bar W$. Programs cannot add into each other's
# registers, so the partial sums meet in memory. With $S$ row blocks, the choices are:
#
# | strategy | how | price |
# |---|---|---|
# | atomics | each program atomically adds its partial tile into $\bar W$ | contention on the same addresses; the order of float additions varies, so results are not bit-for-bit reproducible |
# | split-K and a second pass | each program writes its partial to a buffer of shape $(S, K, N)$; a second, small kernel sums the $S$ partials | $S$ times the memory of $\bar W$ and one more launch, but deterministic |
# | don't split the batch | one program per tile of $\bar W$ loops over every row itself | nothing to combine, but few programs when $W$ is small |
#
# ("Split-K" is GEMM's name for it: in a matmul the summed inner axis is traditionally called K,
# and in $x^\top \bar y$ that inner axis is the batch.)
#
# Count the work, too: each backward matmul costs $2BKN$ FLOPs, as much as the forward one, so
# a linear layer's backward costs about twice its forward. The two halves are not equally easy,
# though: when the batch is long and $W$ is small, expect the $\bar W$ half, with its combining
# step, to dominate. LayerNorm's parameter gradients (notebook 04) are batch reductions of the
# same kind.
#
# You can watch both facts with your own `linear_backward`: run it on the four row blocks
# separately, as four programs would.
# %%
gen = torch.Generator().manual_seed(2)
x, w, dy = randn(gen, 16, 5), randn(gen, 5, 4), randn(gen, 16, 4)  # (B, K), (K, N), (B, N)
try:
    dx, dw = linear_backward(x, w, dy)
    blocks = [linear_backward(x_blk, w, dy_blk) for x_blk, dy_blk in zip(x.chunk(4), dy.chunk(4))]  # 4 programs, 4 rows each
    dx_stacked = torch.cat([dx_blk for dx_blk, _ in blocks])  # each program writes its own rows of x̄
    dw_partials = [dw_blk for _, dw_blk in blocks]  # each program holds a partial W̄
    print("x̄: the blocks' rows, stacked, are x̄:         ", torch.allclose(dx_stacked, dx))
    print("W̄: one block's partial alone is W̄:           ", torch.allclose(dw_partials[0], dw))
    print("W̄: the 4 partials added (a second pass) are W̄:", torch.allclose(sum(dw_partials), dw))
except NotImplementedError:
    print("Finish Part A first: this cell runs your linear_backward on four blocks of rows.")

# %% [markdown]
# ## 5 · Batch 1 hides a missing reduction
#
# At $B = 1$ the sum $\sum_b x_{bk}\,\bar y_{bn}$ has a single term. Anything that forgets to
# sum over the batch still gets that one term right, and so passes every test run at batch 1.
# Four tempting ways to get $\bar W$ wrong:
#
# | tempting $\bar W$ | what went wrong |
# |---|---|
# | the first sample's outer product $x_0^\top \bar y_0$ | an index left at 0 |
# | the last sample's outer product | a loop that assigns, `dw = ...`, where it must add, `dw += ...` |
# | $\big(\sum_b x_b\big)^\top \big(\sum_b \bar y_b\big)$ | sum first, multiply after: this also adds $x$ of one sample times $\bar y$ of *another* |
# | $\frac{1}{B}\, x^\top \bar y$ | a mean over the batch where the chain rule sums |
#
# All four are exact at batch 1. Measure each one's relative error against autograd at batch 1
# and at batch 7:
# %% check-output
def dw_first_sample(x, dy):
    return torch.outer(x[0], dy[0])


def dw_last_sample(x, dy):
    for b in range(x.shape[0]):
        dw = torch.outer(x[b], dy[b])  # the bug: = where += belongs
    return dw


def dw_outer_of_sums(x, dy):
    return torch.outer(x.sum(0), dy.sum(0))


def dw_batch_mean(x, dy):
    return x.mT @ dy / x.shape[0]


gen = torch.Generator().manual_seed(3)
for B in (1, 7):
    x, w, dy = randn(gen, B, 5), randn(gen, 5, 3), randn(gen, B, 3)  # (B, K), (K, N), (B, N)
    dw_ref = autograd_grads(torch.matmul, (x, w), dy)[1]
    errors = [f"{f.__name__} {course.relative_error(f(x, dy), dw_ref):.2f}"
              for f in (dw_first_sample, dw_last_sample, dw_outer_of_sums, dw_batch_mean)]
    print(f"batch {B}:  " + "   ".join(errors))

# %% [markdown]
# Batch 1 passes all four; batch 7 catches every one (the mean is off by exactly
# $1 - 1/7 \approx 0.86$). That is why every check in this course runs at batch 1 *and* at
# batch 7: the first separates a missing reduction from a wrong formula, the second exposes it.
# Seven is prime on purpose — it never splits evenly into power-of-two blocks, so the kernels of
# later notebooks also meet a ragged last block.
# %% [markdown]
# ## 6 · Broadcast forward ⇄ reduce backward
#
# Add a bias: $y = xW + b$ with $b \in \mathbb{R}^{N}$. PyTorch broadcasts $b$, which copies it
# into every row:
#
# $$y_{bn} = \sum_k x_{bk}\, W_{kn} + b_n \qquad \text{for every row } b.$$
#
# Nudge $b_n$ and all $B$ entries of column $n$ move. So $b_n$ collects the gradient of every copy:
#
# $$\bar b_n = \sum_b \bar y_{bn}: \qquad \bar b \text{ is the column sums of } \bar y, \text{ shape } (N,).$$
#
# This is a law, not a special case: **a value used $m$ times in the forward pass receives the
# sum of those $m$ gradients in the backward pass.** $\bar W$ in §2 obeys it too — one $W$, used
# by every row. And it works in both directions: a sum in the forward pass copies $\bar y$ back
# to every term of the sum.
#
# | forward | backward |
# |---|---|
# | broadcast $b$, $(N,)$, to $(B, N)$: a bias | $\bar b$ = $\bar y$ summed over the rows, shape $(N,)$ |
# | `t.expand(B, N)` from $(1, N)$ | $\bar t$ = $\bar y$ summed over the rows *keeping* the size-1 axis, shape $(1, N)$ |
# | `x.sum(0)`, $(B, N) \to (N,)$ | $\bar x$ = $\bar y$ copied into all $B$ rows |
# | `x.mean(0)`, $(B, N) \to (N,)$ | $\bar x$ = $\bar y / B$ copied into all $B$ rows |
#
# The last row is where the `scale` bug lives. When a loss averages over the batch, the $1/B$
# arrives already inside $\bar y$; the matmul backward itself never divides. A $\bar W$ that
# divides by $B$ once more is a mean where the law says sum.
#
# Each row of the table, checked against autograd:
# %% check-output
gen = torch.Generator().manual_seed(4)
B, N = 7, 3
b, t, x = randn(gen, N), randn(gen, 1, N), randn(gen, B, N)  # (N,), (1, N), (B, N)
dy, dy_row = randn(gen, B, N), randn(gen, N)  # the gradient at a (B, N) output, and at an (N,) one

table = [  # (forward, its input, ȳ at its output, what the law predicts for the input's gradient)
    ("bias x + b", lambda b: x + b, b, dy, dy.sum(0)),
    ("t.expand(B, N)", lambda t: t.expand(B, N), t, dy, dy.sum(0, keepdim=True)),
    ("x.sum(0)", lambda x: x.sum(0), x, dy_row, dy_row.expand(B, N)),
    ("x.mean(0)", lambda x: x.mean(0), x, dy_row, dy_row.expand(B, N) / B),
]
for name, forward, inp, upstream, law in table:
    grad = autograd_grads(forward, (inp,), upstream)[0]
    shapes = f"{tuple(inp.shape)} → {tuple(forward(inp).shape)}"
    print(f"{name:15s} {shapes:16s} the law matches autograd: {torch.allclose(grad, law)}")

# %% [markdown]
# ## Part B — linear_bias_backward (2 points)
#
# Write the backward pass of $y = xW + b$, for `x` of shape $(\dots, K)$, `w` of shape
# $(K, N)$ and `b` of shape $(N,)$. $\bar x$ and $\bar W$ are those of Part A; $\bar b$ sums
# $\bar y$ over every leading axis — every row the bias was copied into — and has the shape of
# `b`. (You may call your `linear_backward`; a bug there will then cost points here as well.)
# %% solution id=linear_bias_backward
def linear_bias_backward(x, w, b, dy):
    """Gradients of y = x @ w + b.

    x: (..., K) input; w: (K, N) weights; b: (N,) bias, added to every row; dy: (..., N), the gradient ȳ.
    Returns (dx, dw, db) with the shapes of x, w and b.
    """
    ### BEGIN SOLUTION
    K, N = w.shape
    dy_rows = dy.reshape(-1, N)  # (R, N): all leading axes are batch
    dx = dy @ w.mT  # x̄ = ȳ Wᵀ: (..., N) @ (N, K) -> (..., K)
    dw = x.reshape(-1, K).mT @ dy_rows  # W̄ = xᵀ ȳ summed over all R rows: (K, R) @ (R, N) -> (K, N)
    db = dy_rows.sum(dim=0)  # b̄: b was copied into all R rows, so their gradients add up -> (N,)
    return dx, dw, db
    ### END SOLUTION

# %% test id=test_linear_bias_backward points=2
"""linear_bias_backward: dx, dw and db have the shapes of x, w and b, with the right values at batch 1 and batch 7, for a 3-D x and for a square w."""
course.selfcheck.linear_bias_backward(linear_bias_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_bias_backward(linear_bias_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## 7 · The backward of any broadcast
#
# A bias is one case of broadcasting. PyTorch broadcasts whenever two shapes differ, by two rules:
#
# 1. Line the shapes up **from the right**. Where one has fewer axes, prepend size-1 axes to it.
# 2. A size-1 axis stretches to the other tensor's size: its one entry is copied along it.
#
# So $(3,)$ against $(7, 3)$ becomes $(1, 3)$ and is copied to $(7, 3)$; $(7, 1)$ against
# $(4, 7, 3)$ becomes $(1, 7, 1)$ and is copied to $(4, 7, 3)$. A tensor of shape `shape`
# broadcast to `grad.shape` was copied along two kinds of axes, and its gradient sums over both:
#
# - the **leading axes** that broadcasting prepended: sum them away, since `shape` does not have them;
# - its own **size-1 axes** that got stretched: sum them with `keepdim=True`, since `shape` has them, with size 1.
#
# | `grad.shape` | `shape` | sum over |
# |---|---|---|
# | (7, 3) | (3,) | axis 0, removed |
# | (7, 3) | (1, 3) | axis 0, kept with size 1 |
# | (4, 7, 3) | (7, 1) | axis 0 removed and axis 2 kept with size 1: (7, 1) |
# | (4, 3) | () | everything: a scalar |
# | (5, 3) | (5, 3) | nothing: `grad` as it is |
#
# Two traps. On a square `grad`, summing the wrong axis still gives the right *shape*; only the
# values tell (the `broadcast-axis` diagnosis). And an empty tuple does not mean "no axes":
# `grad.sum(dim=())` sums over **all** of them.
# %%
grad = torch.ones(5, 3)
print("grad.sum(dim=()) has shape", tuple(grad.sum(dim=()).shape), "— not (5, 3)")

# %% [markdown]
# ## Part C — reduce_to_shape (2 points)
#
# Write `reduce_to_shape(grad, shape)`: the gradient of a tensor of shape `shape` that was
# broadcast to `grad.shape`. `shape` may be a tuple or a `torch.Size`; it may equal
# `grad.shape` (nothing to do) or be `()` (a scalar). The result must have exactly the shape
# `shape`. Build it from `sum`. (PyTorch has it built in as `Tensor.sum_to_size`; compare with
# that afterwards, if you like.)
# %% solution id=reduce_to_shape
def reduce_to_shape(grad, shape):
    """Sum grad, the gradient of a broadcast result, back to the shape the tensor had before broadcasting.

    grad: the gradient at the broadcast result; shape: a tuple or torch.Size that broadcasts to grad.shape.
    Returns a tensor of exactly that shape.
    """
    ### BEGIN SOLUTION
    shape = tuple(shape)
    lead = grad.ndim - len(shape)  # how many axes broadcasting prepended
    if lead > 0:  # guarded, because grad.sum(dim=()) would sum over everything
        grad = grad.sum(dim=tuple(range(lead)))
    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if stretched:  # size-1 axes that were copied along: sum them, but keep them
        grad = grad.sum(dim=stretched, keepdim=True)
    return grad
    ### END SOLUTION

# %% test id=test_reduce_to_shape points=2
"""reduce_to_shape: the result has exactly `shape` and sums grad over the prepended leading axes and the stretched size-1 axes — for a bias, a kept size-1 axis, both at once, a square grad, a scalar, and nothing to reduce."""
course.selfcheck.reduce_to_shape(reduce_to_shape)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.reduce_to_shape(reduce_to_shape)
### END HIDDEN TESTS

# %% [markdown]
# ## 8 · Every broadcasting op gets its backward for free
#
# With `reduce_to_shape`, the backward of *any* elementwise op that broadcasts takes two steps:
# compute each input's gradient as if nothing had been broadcast, then reduce it to that
# input's shape. For $z = a \odot c$ (an elementwise product):
#
# $$\bar a = \mathrm{reduce}\big(\bar z \odot c,\ \text{shape of } a\big), \qquad \bar c = \mathrm{reduce}\big(\bar z \odot a,\ \text{shape of } c\big).$$
# %%
gen = torch.Generator().manual_seed(5)
pairs = [((3,), (7, 3)), ((7, 1), (4, 7, 3)), ((1, 5), (6, 1)), ((), (2, 3))]
try:
    for a_shape, c_shape in pairs:
        a, c = randn(gen, *a_shape), randn(gen, *c_shape)
        dz = randn(gen, *torch.broadcast_shapes(a_shape, c_shape))  # z̄ has the broadcast shape
        da_ref, dc_ref = autograd_grads(torch.mul, (a, c), dz)
        da = reduce_to_shape(dz * c, a.shape)  # ∂z/∂a = c, then undo the broadcast of a
        dc = reduce_to_shape(dz * a, c.shape)
        ok = da.shape == a.shape and dc.shape == c.shape and torch.allclose(da, da_ref) and torch.allclose(dc, dc_ref)
        print(f"a {str(a_shape):7s} * c {str(c_shape):10s} ā and c̄ match autograd: {'✓' if ok else '✗'}")
except NotImplementedError:
    print("Finish Part C first: this cell uses your reduce_to_shape.")

# %% [markdown]
# ## What to take away
#
# - **Write the shapes down and let them place the transposes.** $\bar x = \bar y W^\top$ and
#   $\bar W = x^\top \bar y$. Test with $K \neq N$ — and with a square $W$, where only the values
#   can catch a transpose.
# - **$\bar x$ sums over the features; $\bar W$ sums over the batch.** $\bar x$ splits into
#   independent programs. $\bar W$'s partial sums must be combined across programs on a GPU: atomics,
#   split-K with a second pass, or one program looping over the whole batch.
# - **Copied forward, summed backward** — and summed forward, copied backward. Leading axes are
#   summed away; stretched size-1 axes are summed and kept.
# - **Test at batch 1 and at batch 7.** When a backward is wrong, suspect in this order: a
#   transpose (the shapes agree, the values don't), a missing sum over the batch (right at 1,
#   wrong at 7), a sign, a scale.
#
# Next, notebook 02: softmax's $N \times N$ Jacobian collapses to one scalar per row.

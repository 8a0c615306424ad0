# %% [markdown]
# # 01 · Matmul backward from shapes
#
# Every linear layer is a matmul, and its backward pass is two more matmuls: one for the
# input, one for the weights. In this notebook you derive both without looking anything up,
# from shapes alone. Then you look at them the way a kernel writer does: which entries each
# output element reads, which of the two needs a sum over the whole batch, and why that sum
# is the hard half of a GPU backward. Then the rule behind every bias gradient — what
# happens in the backward pass to a value that is *copied* in the forward pass — and, to
# finish, the debugging order turned into code: you name the bug in broken backwards and
# repair one.
#
# | Part | you write | points |
# |---|---|---|
# | A | `linear_backward(x, w, dy) -> (dx, dw)` | 3 |
# | B | `linear_bias_backward(x, w, b, dy) -> (dx, dw, db)` | 2 |
# | C | `reduce_to_shape(grad, shape)` | 2 |
# | D | `name_the_bug(backward) -> str` | 2 |
# | E | `batched_matmul_backward(a, c, dy) -> (da, dc)` | 2 |
#
# Each part asks; you derive. Below each exercise sit collapsed hints — open them one at a
# time, only when stuck: the first asks the right question, the later ones work a small case or
# give one step, and none gives the answer. After each test cell a collapsed recap derives the
# result: open it once your check passes.
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
# Is it $x^\top$ on the left or on the right? Is a weight transposed or not? There is no need
# to remember: the shapes decide. Here is the method, worked on the layout of notebook 00's
# $J^\top \bar y$: a matrix $V$ times **one column vector** $x$,
#
# $$y = V x, \qquad x \in \mathbb{R}^{K\times 1},\quad V \in \mathbb{R}^{N\times K},\quad y \in \mathbb{R}^{N\times 1},$$
#
# with $K$ input features and $N$ outputs. The backward pass receives $\bar y$, of shape
# $(N, 1)$, and must return $\bar x$, of shape $(K, 1)$. Since $y$ is linear in $x$, $\bar x$ is
# made of $\bar y$ and $V$ alone: one product of the two, each perhaps transposed. Ask which
# product comes out $(K, 1)$:
#
# - Its rows must be $K$, and only $V$ has a $K$ axis, as its columns: $V^\top$ goes on the left.
# - Its columns must be 1: $\bar y$ goes on the right, as it is.
# - The inner axes then agree, $N$ against $N$, and the product sums over them.
#
# $$\bar x = V^\top \bar y: \qquad (K, N)\,(N, 1) \to (K, 1).$$
#
# Exactly one arrangement fits. The cell below tries all eight — both orders, each operand
# transposed or not — keeps those whose shapes chain into the shape of the gradient, and
# holds the survivor against autograd.
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


gen = torch.Generator().manual_seed(0)
K, N = 5, 3  # in features, out features: different sizes on purpose
x, v, dy = randn(gen, K, 1), randn(gen, N, K), randn(gen, N, 1)  # (K, 1), (N, K), (N, 1)
print("x̄ (K, 1) from ȳ and V:", arrangements("ȳ", dy, "V", v, (K, 1)))
(dx_ref,) = autograd_grads(lambda x: v @ x, (x,), dy)
print("autograd agrees:", torch.allclose(v.mT @ dy, dx_ref))

K = N = 4  # a square V: now the shapes cannot tell Vᵀ ȳ from V ȳ
v, dy = torch.empty(N, K), torch.empty(N, 1)
print("x̄ with a square V:    ", arrangements("ȳ", dy, "V", v, (K, 1)))

# %% [markdown]
# With different sizes, exactly one product fits, and it is the right one. With a square
# $V$, $V \bar y$ fits as well — and is wrong. The shape argument needs distinct sizes to
# bite: test your backward with $K \neq N$. The checks in this notebook also use a square
# weight on purpose: there a transposed placement passes every shape test, and only the
# values give it away (the `transpose` diagnosis).
#
# A linear layer works on a batch of $B$ rows, not one column: this course stores its weight
# as $W$ of shape $(K, N)$ and computes $y = xW$ for $x$ of shape $(B, K)$. Part A asks you the
# same three questions about that layout, for both gradients, $\bar x$ and $\bar W$.
#
# ## 2 · The elementwise view: which index is summed
#
# Shapes tell you where the transposes go. Indices tell you what each output element costs.
# Entry by entry, this course's forward pass is
#
# $$y_{bn} = \sum_k x_{bk}\, W_{kn}.$$
#
# Notebook 00's chain rule, $\bar x_j = \sum_i \bar y_i\, \partial y_i / \partial x_j$, says how
# to get the gradient of one input entry: find every output entry it moves, and by how much,
# and add up those effects, each weighted by how much the loss cares about that output.
# So the first question about any backward is: **nudge one input entry — which outputs move?**
# The cell below nudges one entry of $x$ and one entry of $W$ and marks the entries of $y$
# that moved.
# %% check-output
gen = torch.Generator().manual_seed(0)
B, K, N = 7, 5, 3
x, w = randn(gen, B, K), randn(gen, K, N)  # (B, K), (K, N)
y = x @ w  # (B, N)
b, k, n = 2, 4, 1
x_nudged, w_nudged = x.clone(), w.clone()
x_nudged[b, k] += 1e-3
w_nudged[k, n] += 1e-3
print(f"entries of y (B = {B} rows, N = {N} columns) that move when x[{b}, {k}] moves:")
print(((x_nudged @ w - y).abs() > 0).int())
print(f"entries of y that move when W[{k}, {n}] moves:")
print(((x @ w_nudged - y).abs() > 0).int())

# %% [markdown]
# One entry of $x$ moves one **row** of $y$: $N$ outputs, all of them in its own sample. One
# entry of $W$ moves one **column** of $y$: an output in **every** sample of the batch,
# because every sample is multiplied by the same weight. So each entry of $\bar x$ collects
# $N$ effects from its own row, while each entry of $\bar W$ collects $B$ effects, one from
# every sample. Which effects, exactly, is Part A. The rest of this notebook follows from
# that difference.
#
# ## 3 · Many leading axes: every one is a batch axis
#
# In a transformer the input of a linear layer has shape $(B, T, K)$ — a batch of sequences of
# tokens — and `x @ w` multiplies every token's row by $W$. A matmul does not care how the rows
# are stacked: $(B, T, K)$ behaves exactly like $B \cdot T$ rows of length $K$. Which of your two
# gradients keeps the leading axes, and which must gather from all of them? §2's nudges decide.
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
# axes — and `w` of shape $(K, N)$: given $\bar y$ of shape $(\dots, N)$, return $\bar x$ and
# $\bar W$. Derive both: place the transposes by the shapes (§1), and decide from the nudges
# (§2, §3) which gradient sums over the leading axes.
#
# - `dx` must have the shape of `x`, and `dw` the shape of `w`.
# - The inputs may arrive non-contiguous (a transposed tensor, say).
# - Use plain tensor operations, not autograd: the checks stop any call into it.
# - The test cell first runs a visible check — batch 1, batch 7, a 3-D input, a square `w`
#   and transposed inputs, compared with torch's autograd. A failure's first line names the
#   kind of bug. Grading then runs more shapes on random inputs.
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

# %% [markdown]
# <details><summary>Hint 1 — the shapes, and the three questions</summary>
#
# For a 2-D `x` of shape $(B, K)$, write down what you must return: $\bar x$ is $(B, K)$, $\bar W$
# is $(K, N)$. $\bar x$ is one product of $\bar y$ $(B, N)$ and $W$ $(K, N)$, each perhaps
# transposed; $\bar W$ is one product of $x$ and $\bar y$. For each, ask §1's three questions:
# which operand supplies the rows, which the columns, and do the inner axes then agree? Use
# three different sizes, so that only one arrangement can fit.
#
# </details>
#
# <details><summary>Hint 2 — the leading axes</summary>
#
# §2: an entry of $x$ moves only its own row of $y$, so row $b$ of $\bar x$ needs only row $b$
# of $\bar y$ — whatever leading axes there are, they ride along, and `@` broadcasts over them.
# An entry of $W$ moves a column of $y$ in every row, so $\bar W$ gathers from **every** row of
# every leading axis: flatten the leading axes into one row axis. On tensors with more than
# two axes, transpose with `.mT`, not `.T`. Stuck on a placement? Write the three shapes side by
# side and ask which operand's axis must sit next to which for the product to exist.
#
# </details>
#
# <details><summary>Hint 3 — one entry, by the chain rule</summary>
#
# Entry by entry, $y_{bn} = \sum_k x_{bk} W_{kn}$, so $\partial y_{bn} / \partial x_{bk} = W_{kn}$ for
# every $n$, and $\partial y_{bn} / \partial W_{kn} = x_{bk}$ for every $b$. Put each into the chain
# rule, $\bar x_{bk} = \sum_{b', n} \bar y_{b'n}\, \partial y_{b'n} / \partial x_{bk}$: which terms are
# not zero, and which index is left to sum over? Then read that sum as a matrix product: the
# summed index is its inner axis, and a factor whose summed index comes *first* enters
# transposed. The same for $\bar W_{kn}$, whose sum runs over the rows.
#
# </details>
# %% test id=test_linear_backward points=3
"""linear_backward: dx has the shape of x and dw that of w, with the right
values at batch 1 and batch 7, for a 3-D x, a square w and transposed
inputs."""
course.selfcheck.linear_backward(linear_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_backward(linear_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# The shapes place the transposes: $\bar x$ must come out $(B, K)$, so $\bar y$ $(B, N)$ goes on
# the left and $W$ $(K, N)$ on the right, transposed; $\bar W$ must come out $(K, N)$, so $x$
# goes on the left, transposed, and $\bar y$ on the right:
#
# $$\boxed{\bar x = \bar y\, W^\top: \; (B, N)\,(N, K) \to (B, K), \qquad \bar W = x^\top \bar y: \; (K, B)\,(B, N) \to (K, N).}$$
#
# Entry by entry, the two products sum over different indices — the inner axis of each:
#
# $$\bar x_{bk} = \sum_{n} \bar y_{bn}\, W_{kn} \quad \text{a sum over the features } n, \qquad
# \bar W_{kn} = \sum_{b} x_{bk}\, \bar y_{bn} \quad \text{a sum over the batch } b.$$
#
# With leading axes, $\bar x$ keeps them (`dy @ w.mT` broadcasts) and $\bar W$ sums over every
# one of them (`x.reshape(-1, K).mT @ dy.reshape(-1, N)`): every token of every sequence used
# the same $W$.
#
# </details>
#
# The shapes, and one entry of each gradient summed by hand, against autograd:
# %%
gen = torch.Generator().manual_seed(0)
B, K, N = 7, 5, 3
x, w, dy = randn(gen, B, K), randn(gen, K, N), randn(gen, B, N)  # (B, K), (K, N), (B, N)
print("x̄ (B, K) from ȳ and W:", arrangements("ȳ", dy, "W", w, (B, K)))
print("W̄ (K, N) from x and ȳ:", arrangements("x", x, "ȳ", dy, (K, N)))
dx_ref, dw_ref = autograd_grads(torch.matmul, (x, w), dy)

b, k, n = 2, 4, 1
dx_bk = sum(dy[b, j] * w[k, j] for j in range(N))  # Σ over n of ȳ[b, n] W[k, n]: N terms
dw_kn = sum(x[i, k] * dy[i, n] for i in range(B))  # Σ over b of x[b, k] ȳ[b, n]: B terms
print(f"x̄[{b}, {k}]: sum over n = {dx_bk:+.6f}   autograd = {dx_ref[b, k]:+.6f}")
print(f"W̄[{k}, {n}]: sum over b = {dw_kn:+.6f}   autograd = {dw_ref[k, n]:+.6f}")


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
# The grader names the first three `batch-reduction` and the last `scale`: a constant factor is
# a scale bug, even one that only shows above batch 1. Seven is prime on purpose — it never splits evenly into power-of-two blocks, so the kernels of
# later notebooks also meet a ragged last block.
# %% [markdown]
# ## 6 · Broadcast forward ⇄ reduce backward
#
# Parts B and C are about values that are **copied** in the forward pass. Take a per-row
# offset: row $b$ of a $(B, N)$ tensor gets its own offset $c_b$, and PyTorch broadcasts the
# column $c$, shape $(B, 1)$, along the columns:
#
# $$y_{bn} = x_{bn} + c_b \qquad \text{for every column } n.$$
#
# Nudge $c_b$ and all $N$ entries of row $b$ move, each by the nudge. The chain rule adds up
# those effects: $\bar c_b = \sum_n \bar y_{bn}$. So $\bar c$ is the row sums of $\bar y$ — with the
# size-1 axis kept, because $\bar c$ has the shape of $c$, $(B, 1)$.
#
# This is a law, not a special case: **a value used $m$ times in the forward pass receives the
# sum of those $m$ gradients in the backward pass.** $W$ in §2 obeys it too — one $W$, used by
# every row. And it works in both directions: a sum in the forward pass copies $\bar y$ back to
# every term of the sum.
#
# | forward | backward |
# |---|---|
# | `x + c` with $c$ $(B, 1)$, copied along the $N$ columns | $\bar c$ = $\bar y$ summed along each row, *keeping* the size-1 axis: $(B, 1)$ |
# | `x.sum(1)`, $(B, N) \to (B,)$ | $\bar x$ = $\bar y$ copied into all $N$ columns |
# | `x.mean(1)`, $(B, N) \to (B,)$ | $\bar x$ = $\bar y / N$ copied into all $N$ columns |
#
# The last row is where the `scale` bug lives. When a loss averages over the batch, the $1/B$
# arrives already inside $\bar y$; the matmul backward itself never divides. A $\bar W$ that
# divides by $B$ once more is a mean where the law says sum.
#
# Each row of the table, checked against autograd:
# %% check-output
gen = torch.Generator().manual_seed(4)
B, N = 7, 3
c, x = randn(gen, B, 1), randn(gen, B, N)  # (B, 1), (B, N)
dy, dy_col = randn(gen, B, N), randn(gen, B)  # the gradient at a (B, N) output, and at a (B,) one

table = [  # (forward, its input, ȳ at its output, what the law predicts for the input's gradient)
    ("offset x + c", lambda c: x + c, c, dy, dy.sum(1, keepdim=True)),
    ("x.sum(1)", lambda x: x.sum(1), x, dy_col, dy_col[:, None].expand(B, N)),
    ("x.mean(1)", lambda x: x.mean(1), x, dy_col, dy_col[:, None].expand(B, N) / N),
]
for name, forward, inp, upstream, law in table:
    grad = autograd_grads(forward, (inp,), upstream)[0]
    shapes = f"{tuple(inp.shape)} → {tuple(forward(inp).shape)}"
    print(f"{name:15s} {shapes:16s} the law matches autograd: {torch.allclose(grad, law)}")

# %% [markdown]
# ## Part B — linear_bias_backward (2 points)
#
# Add a bias: $y = xW + b$, for `x` of shape $(\dots, K)$, `w` of shape $(K, N)$ and `b` of
# shape $(N,)$. PyTorch broadcasts $b$: it is copied into every row. $\bar x$ and $\bar W$ are
# those of Part A (you may call your `linear_backward`; a bug there will then cost points here
# as well). Derive $\bar b$ — it must have the shape of `b` — and return all three.
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

# %% [markdown]
# <details><summary>Hint 1 — how many times is each b_n used?</summary>
#
# Write the forward entry by entry, $y_{bn} = \sum_k x_{bk} W_{kn} + b_n$, and nudge $b_n$:
# which entries of $y$ move, and by how much? How many uses of $b_n$ does that make, and what
# does the law of §6 say its gradient collects? The result must have the shape of `b`, $(N,)$.
#
# </details>
#
# <details><summary>Hint 2 — which axes, and which stay</summary>
#
# §6's offset was copied along the columns and kept its size-1 axis. Along which axis, or axes,
# was $b$ copied in the forward — and which axis does $\bar b$ keep?
#
# </details>
#
# <details><summary>Hint 3 — a 2×2 case by hand</summary>
#
# Take $B = N = 2$ and $\bar y = \begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}$. Nudge $b_1$ (the first
# entry) by $\delta$: $y_{11}$ and $y_{21}$ move by $\delta$, and $y_{12}$, $y_{22}$ do not. By
# §1 of notebook 00 the loss moves by $\bar y_{11}\delta + \bar y_{21}\delta = (1 + 3)\,\delta$, so
# $\bar b_1 = 4$. What is $\bar b_2$? Which axis of $\bar y$ did you add along, and which one
# did you keep? With leading axes, every row of every one of them is a use.
#
# </details>
# %% test id=test_linear_bias_backward points=2
"""linear_bias_backward: dx, dw and db have the shapes of x, w and b, with
the right values at batch 1 and batch 7, for a 3-D x, a square w and
transposed inputs."""
course.selfcheck.linear_bias_backward(linear_bias_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_bias_backward(linear_bias_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $b_n$ is added to all $B$ entries of column $n$, so it collects the gradient of every copy:
#
# $$\boxed{\bar b_n = \sum_b \bar y_{bn}}: \qquad \bar b \text{ is the column sums of } \bar y, \text{ shape } (N,),$$
#
# summed over every row of every leading axis (`dy.reshape(-1, N).sum(dim=0)`) — the same law as
# $\bar W$ (one $W$, used by every row) and §6's offset, along the other axis and with no size-1
# axis to keep.
#
# </details>
#
# ## 7 · The backward of any broadcast
#
# A bias is one case of broadcasting. PyTorch broadcasts whenever two shapes differ, by two rules:
#
# 1. Line the shapes up **from the right**. Where one has fewer axes, prepend size-1 axes to it.
# 2. A size-1 axis stretches to the other tensor's size: its one entry is copied along it.
#
# So $(3,)$ against $(7, 3)$ becomes $(1, 3)$ and is copied to $(7, 3)$; $(7, 1)$ against
# $(4, 7, 3)$ becomes $(1, 7, 1)$ and is copied to $(4, 7, 3)$. Every copy is a use, and §6's
# law says what the original collects. Part C asks for it in general: given the gradient `grad`
# at the broadcast result and the shape the tensor had before, return its gradient. Cases your
# function must handle, among others:
#
# | `grad.shape` | `shape` | what happened in the forward pass |
# |---|---|---|
# | (7, 3) | (3,) | a bias |
# | (7, 3) | (1, 3) | the same, with the size-1 axis written out |
# | (4, 7, 3) | (7, 1) | both rules at once |
# | (4, 3) | () | a scalar, copied everywhere |
# | (5, 3) | (5, 3) | nothing was broadcast |
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
# `grad.shape` (nothing to do) or be `()` (a scalar). `grad` may be non-contiguous. The
# result must have exactly the shape `shape`. Build it from `sum` (PyTorch's own one-call
# version of this reduction does pass the values, and the check refuses it).
# %% solution id=reduce_to_shape
def reduce_to_shape(grad, shape):
    """The gradient of a tensor of shape `shape` that was broadcast to grad.shape.

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

# %% [markdown]
# <details><summary>Hint 1 — along which axes was it copied?</summary>
#
# Line `shape` up with `grad.shape` from the right, as rule 1 does. The axes `grad` has and
# `shape` does not were *prepended*; among the rest, an axis where `shape` says 1 and `grad`
# does not was *stretched* (rule 2). Along both kinds, the tensor was copied — and §6's law says
# what a copied value receives.
#
# </details>
#
# <details><summary>Hint 2 — which axes stay?</summary>
#
# For each kind of axis, does `shape` keep it — a prepended one, a stretched one? The result must
# have exactly `shape`: so after the copies along an axis are added up, is that axis gone, or
# still there with size 1? And which call leaves an axis in place after a sum?
#
# </details>
#
# <details><summary>Hint 3 — the third row of the table, by hand</summary>
#
# `grad` of shape (4, 7, 3), `shape` (7, 1). Lined up from the right, `shape` reads (·, 7, 1):
# axis 0 of `grad` was prepended, and axis 2 was stretched from 1 to 3. Count the copies of one
# entry of the original: $4 \times 3 = 12$ uses, so its gradient adds 12 entries of `grad`.
# After summing axis 0 away, what shape is left, and what must happen to axis 2 so that the
# result is exactly (7, 1)? Check your two steps on this case before writing the general ones;
# a scalar `shape` of `()` is the case with no axes left at all.
#
# </details>
# %% test id=test_reduce_to_shape points=2
"""reduce_to_shape: the result has exactly `shape` and is the gradient of
the broadcast — for a bias, a kept size-1 axis, both at once, a square grad,
a scalar, nothing to reduce, and a transposed grad."""
course.selfcheck.reduce_to_shape(reduce_to_shape)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.reduce_to_shape(reduce_to_shape)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# A tensor broadcast to `grad.shape` was copied along two kinds of axes, and its gradient sums
# over both:
#
# $$\boxed{\operatorname{reduce}(\bar z, s) = \bar z \text{ summed over the prepended axes (dropped), then over the stretched size-1 axes (kept, size 1)}}$$
#
# | `grad.shape` | `shape` | sum over |
# |---|---|---|
# | (7, 3) | (3,) | axis 0, removed |
# | (7, 3) | (1, 3) | axis 0, kept with size 1 |
# | (4, 7, 3) | (7, 1) | axis 0 removed and axis 2 kept with size 1: (7, 1) |
# | (4, 3) | () | everything: a scalar |
# | (5, 3) | (5, 3) | nothing: `grad` as it is |
#
# In code: with `lead` the number of prepended axes, `grad.sum(dim=tuple(range(lead)))` when
# there are any, then `grad.sum(dim=stretched, keepdim=True)` over the stretched axes when there
# are any. PyTorch has it built in, as `Tensor.sum_to_size(shape)`; autograd calls the same
# reduction for every broadcasting op.
#
# </details>
#
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
# ## 9 · The debugging order, as code
#
# Notebook 00 (§6) gave the order in which to read a wrong backward, in the grader's words: the
# ladder `course.diagnose.LADDER`, from the check that needs the least to the one that needs
# the most, and from the narrowest explanation to the widest. This notebook has shown its rungs
# at work: a square $W$ hides a transpose (§1), batch 1 hides a missing reduction and a sum
# written as a mean (§5), a square `grad` hides a wrong axis (§7). Now you are the grader.
# %%
print(" → ".join(course.diagnose.LADDER))

# %% [markdown]
#
# A colleague wrote the five backward functions below for $y = xW + b$, with `x` of shape
# $(B, K)$. Each has exactly one bug. A sixth, for a batched matmul, passes its author's tests
# and is wrong all the same.
# %%
def suspect_1(x, w, b, dy):
    dx = dy @ w.mT
    dw = dy.mT @ x
    db = dy.sum(dim=0)
    return dx, dw, db


def suspect_2(x, w, b, dy):
    dx = dy @ w.mT
    dw = x.mT @ dy
    for row in dy:
        db = row
    return dx, dw, db


def suspect_3(x, w, b, dy):
    dx = dy @ w.mT
    dw = x.mT @ dy / x.shape[0]
    db = dy.sum(dim=0)
    return dx, dw, db


def suspect_4(x, w, b, dy):
    dx = dy @ w.mT
    dw = x.mT @ dy
    db = dy.sum(dim=1)
    return dx, dw, db


def suspect_5(x, w, b, dy):
    step = dy @ w.mT
    dw = x.mT @ dy
    db = dy.sum(dim=0)
    return -step, dw, db


def broken_batched_matmul_backward(a, c, dy):
    """y = a @ c for a (B, M, K) and c (B, K, N), or one c (K, N) shared by the whole batch."""
    K, N = c.shape[-2:]
    da = dy @ c.mT  # (B, M, K)
    dc = a.reshape(-1, K).mT @ dy.reshape(-1, N)  # (K, N)
    return da, dc.expand(c.shape)

# %% [markdown]
# You could read them. The grader cannot: it meets backwards it has never seen, and it must
# *measure*. So will you.
#
# ## Part D — name_the_bug (2 points)
#
# Write `name_the_bug(backward)`. `backward(x, w, b, dy) -> (dx, dw, db)` claims to be the
# backward pass of $y = xW + b$ for a 2-D `x` $(B, K)$, `w` $(K, N)$, `b` $(N,)$ and `dy`
# $(B, N)$, any sizes. It is either right, or it has exactly one bug, in one of its three
# outputs. Return the bug's class — one of the strings below, the grader's own words — or
# `"none"` when it is right:
#
# | class | the one wrong output … |
# |---|---|
# | `"broadcast-axis"` | … is `db`, reduced over the wrong axis of `dy` (this exercise's own named bug) |
# | `"sign"` | … is the negative of the right one |
# | `"transpose"` | … is the transpose of the right one |
# | `"scale"` | … is a constant multiple $c \neq \pm 1$ of the right one, at some batch size ($c$ may depend on it) |
# | `"batch-reduction"` | … is right at batch 1 and wrong above it, and not by a constant factor |
# | `"wrong-values"` | … is wrong already at batch 1, and none of the above |
#
# A transposed output of a non-square matrix comes back with the reversed shape: call it
# `transpose`, not a shape bug. A reversed shape that holds the transposed values is the
# transposed placement, and the grader's shape rung names it so (00 §6); any other wrong shape
# here can only be `db` on the wrong axis.
#
# Run `backward` on inputs you make — as many as you like, any sizes you choose — and compare
# its outputs with a reference you trust: your own `linear_bias_backward` from Part B,
# autograd (allowed here: `name_the_bug` is a test, not a backward), or central differences.
# Which experiments separate the six classes? Read them in the ladder's order (00 §6): the
# table above lists them so.
#
# The hidden check hands your function a fresh set of broken backwards, written differently
# from the suspects above and drawn anew on every run; reading their code will not help, and
# neither will their names. One more rule: the course's helpers (`course.relative_error`, …)
# are off limits inside a graded function — a check reads a call to one as the answer coming
# from the course instead of from you — so write any comparison you need with `torch`.
# %% solution id=name_the_bug
def name_the_bug(backward):
    """Name the one bug of a backward for y = x @ w + b.

    backward: a function (x, w, b, dy) -> (dx, dw, db) for x (B, K), w (K, N), b (N,), dy (B, N).
    Returns one of "transpose", "batch-reduction", "sign", "scale", "broadcast-axis", "wrong-values", or "none".
    """
    ### BEGIN SOLUTION
    def close(got, ref):  # relative error below 1e-9, in float64
        scale = max(float(torch.linalg.vector_norm(ref)), float(torch.linalg.vector_norm(got)), 1e-300)
        return float(torch.linalg.vector_norm(got - ref)) <= 1e-9 * scale

    gen = torch.Generator().manual_seed(12)  # fixed, so that the same backward gets the same name every run
    K, N = 3, 5  # every size different from every other, so a transpose or a wrong axis shows in the shape
    for B in (1, 7):  # batch 1 first: a batch-reduction is right there
        x, w, b, dy = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((B, K), (K, N), (N,), (B, N)))
        reference = (dy @ w.mT, x.mT @ dy, dy.sum(dim=0))  # (dx, dw, db), Part B's answer
        for got, ref in zip(backward(x, w, b, dy), reference):
            if got.shape != ref.shape:  # the shape first: a reversed one is a transpose, any other a wrong axis
                transposed = ref.ndim == 2 and got.shape == ref.mT.shape and close(got, ref.mT)
                return "transpose" if transposed else "broadcast-axis"
            if close(got, ref):
                continue
            if close(got, -ref):
                return "sign"
            factor = float((got * ref).sum() / (ref * ref).sum())  # the c that fits got ≈ c · ref best
            if close(got, factor * ref):
                return "scale"
            return "batch-reduction" if B > 1 else "wrong-values"  # right at batch 1, wrong above: a missing sum
    return "none"
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which experiments?</summary>
#
# Two bug classes are invisible at batch 1, so you need a run at batch 1 and a run above it.
# Choose sizes that are all different ($B$, $K$ and $N$ pairwise distinct above batch 1): then a
# transposed output, or a `db` reduced over the wrong axis, already has the wrong *shape*. At
# each batch size, compare each of the three outputs with your reference. What does each class
# look like in that comparison — a shape, a sign, a factor, or a value right at 1 and wrong at 7?
# Whatever you find, return exactly one of the words of the table, or `"none"`, as a string.
#
# </details>
#
# <details><summary>Hint 2 — the order of the tests</summary>
#
# The ladder: the shape first (with pairwise different sizes; see the rule above the
# exercise), then equality, then the negative, then a constant factor, and only then the batch
# size at which it went wrong. Why must the factor come before the batch question? A mean
# written as a sum is right at batch 1 too. Compare with a relative error and a tolerance (say
# $10^{-9}$ in float64), never with `==`.
#
# </details>
#
# <details><summary>Hint 3 — which factor?</summary>
#
# "Is `got` a constant multiple of `ref`?" needs a candidate $c$ to test. Take the $c$ that
# makes $\lVert g - c\,r \rVert^2$ smallest ($g$ the output you got, $r$ the reference): it is a
# quadratic in $c$, $\lVert g \rVert^2 - 2c\,\langle g, r \rangle + c^2 \lVert r \rVert^2$. Set its
# derivative to zero, then test whether $g$ is close to $c\,r$. Try it on $g = (2, 4)$,
# $r = (1, 2)$, and on $g = (2, 5)$, $r = (1, 2)$, where no factor fits.
#
# </details>
# %% test id=test_name_the_bug points=2
"""name_the_bug: names the class of each of a set of broken backwards for y
= x @ w + b — transpose, batch-reduction, sign, scale, broadcast-axis,
wrong-values — and "none" for a right one."""
course.selfcheck.name_the_bug(name_the_bug)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.name_the_bug(name_the_bug)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The debugging order as a procedure.** Run at batch 1, then above it, with sizes that
# differ; for each output, climb the ladder from the most specific class to the least:
#
# 1. the **shape** — reversed: `transpose`; any other wrong shape of `db`: `broadcast-axis`;
# 2. **equal** to the reference: next output;
# 3. the **negative**: `sign`;
# 4. a **constant multiple**, with the best-fitting factor
#    $\boxed{c = \langle g, r \rangle / \langle r, r \rangle}$: `scale` — before step 5, because a
#    mean written as a sum is right at batch 1 too;
# 5. otherwise, by the batch size where it first went wrong: above batch 1 only, `batch-reduction`;
#    at batch 1 already, `wrong-values`. That is why both runs are needed.
#
# In code, the factor is `(got * ref).sum() / (ref * ref).sum()`. That is how the grader's
# `diagnosis:` line is made (`course.diagnose.diagnose` climbs `course.diagnose.LADDER` the same
# way).
#
# </details>
#
# Your classifier on the five suspects of §9:
# %%
try:
    for suspect in (suspect_1, suspect_2, suspect_3, suspect_4, suspect_5):
        print(f"{suspect.__name__}: {name_the_bug(suspect)}")
except NotImplementedError:
    print("Finish Part D first: this cell runs your name_the_bug on the suspects.")

# %% [markdown]
# It should print `transpose`, `batch-reduction` (a loop that assigns where it must add),
# `scale` (a mean), `broadcast-axis` and `sign`. The sixth suspect has a bug of one of these
# classes too; finding it is Part E.
#
# ## Part E — batched_matmul_backward (2 points)
#
# Repair `broken_batched_matmul_backward` from §9. The op is a batched matmul,
# `y = a @ c` (`torch.matmul`), with
#
# - `a` of shape $(B, M, K)$: one matrix per batch element;
# - `c` either of shape $(B, K, N)$ — its own matrix for every batch element — or one matrix
#   shared by the whole batch, of shape $(K, N)$ or $(1, K, N)$, which `torch.matmul` broadcasts;
# - `dy` of shape $(B, M, N)$.
#
# Return `(da, dc)` with the shapes of `a` and `c`. The inputs may arrive non-contiguous. Its
# author tested it at batch 1 and with a shared `c`, and it passed. Which class is its bug —
# your `name_the_bug` reasoning applies, even if the function does not fit its signature — and
# what is the right `dc` for each kind of `c`? Plain tensor operations only, no autograd. (You
# may call your `reduce_to_shape`; a bug there will then cost points here as well.)
# %% solution id=batched_matmul_backward
def batched_matmul_backward(a, c, dy):
    """Gradients of y = a @ c (torch.matmul).

    a: (B, M, K); c: (B, K, N), or (K, N) or (1, K, N) shared by the batch; dy: (B, M, N), the gradient ȳ.
    Returns (da, dc) with the shapes of a and c.
    """
    ### BEGIN SOLUTION
    da = dy @ c.mT  # (B, M, N) @ (..., N, K) -> (B, M, K): each element's own rows, as x̄ in Part A
    dc = a.mT @ dy  # (B, K, M) @ (B, M, N) -> (B, K, N): c̄ of each batch element, as if c were not shared
    lead = dc.ndim - c.ndim  # undo the broadcast of c: reduce_to_shape(dc, c.shape), written out
    if lead > 0:
        dc = dc.sum(dim=tuple(range(lead)))  # c (K, N): one matrix used by every element
    if c.ndim == 3 and c.shape[0] == 1 and dc.shape[0] != 1:
        dc = dc.sum(dim=0, keepdim=True)  # c (1, K, N): the same, with its size-1 batch axis kept
    return da, dc
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — who uses which c?</summary>
#
# Nudge one entry of `c`. When `c` has its own matrix per batch element, `c[i]` enters only
# `y[i] = a[i] @ c[i]`: which batch elements of `y` move? When `c` is one shared matrix, which
# move then? The author tested only with a shared `c`, or at batch 1 — where the two cases
# cannot differ. What shape must `dc` have in each case?
#
# </details>
#
# <details><summary>Hint 2 — as if nothing were broadcast</summary>
#
# §8's recipe. For one batch element, `y[i] = a[i] @ c[i]` is Part A's $y = xW$ with $x = a_i$
# and $W = c_i$. What shape is the gradient of every element's own `c[i]`, taken as if `c` had
# not been shared — and what was done to a shared `c` in the forward?
#
# </details>
#
# <details><summary>Hint 3 — what the author's tests cannot see</summary>
#
# The author ran two tests: batch 1, and a shared `c`. Take each one: would a `dc` that sums
# over the batch always, or one that never does, pass it? Which input would tell the two
# apart — and which class of the ladder is a bug that only that input shows?
#
# </details>
# %% test id=test_batched_matmul_backward points=2
"""batched_matmul_backward: da and dc have the shapes of a and c, with the
right values at batch 1 and batch 7, for a per-element c, a shared (K, N) or
(1, K, N) c, a square c and transposed inputs."""
course.selfcheck.batched_matmul_backward(batched_matmul_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.batched_matmul_backward(batched_matmul_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# The broken function summed `dc` over the batch — right for a shared `c`, right at batch 1,
# and wrong for a per-element `c` above batch 1: a `batch-reduction` bug, with the sum in a
# place where it does not belong. Per element, the batched matmul is Part A's linear layer;
# across elements, `c` is either copied (shared: sum) or not (per element: no sum):
#
# $$\boxed{\bar a = \bar y\, c^\top, \qquad \bar c = \operatorname{reduce}(a^\top \bar y, \text{shape of } c)}$$
#
# with the products taken per batch element: `da = dy @ c.mT` and
# `dc = reduce_to_shape(a.mT @ dy, c.shape)`. Whether a weight's gradient sums over the batch is
# not a property of matmul; it is a question of who shares the weight. A linear layer's $W$ is
# shared by every token, attention's keys are not shared across sequences — notebook 05.
#
# </details>
#
# ## What to take away
#
# - **Write the shapes down and let them place the transposes.** $\bar x = \bar y W^\top$ and
#   $\bar W = x^\top \bar y$. Test with $K \neq N$ — and with a square $W$, where only the values
#   can catch a transpose.
# - **$\bar x$ sums over the features; $\bar W$ sums over the batch.** $\bar x$ splits into
#   independent programs. $\bar W$'s partial sums must be combined across programs on a GPU: atomics,
#   split-K with a second pass, or one program looping over the whole batch.
# - **Copied forward, summed backward** — and summed forward, copied backward. Leading axes are
#   summed away; stretched size-1 axes are summed and kept. Only what is shared is summed.
# - **Test at batch 1 and at batch 7.** When a backward is wrong, climb the ladder of 00 §6:
#   the shape, a sign, a transpose (square shapes, wrong values), a constant factor, and only
#   then a missing sum over the batch (right at 1, wrong at 7) — a factor first, because a mean
#   written as a sum is right at batch 1 too.
#
# Next, notebook 02: softmax's $N \times N$ Jacobian collapses to one scalar per row.

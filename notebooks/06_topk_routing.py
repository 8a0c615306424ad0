# %% [markdown]
# # 06 — Top-k and routing: the gradient as a sparse scatter
#
# Every backward so far did arithmetic: transposed matmuls, a softmax collapsing to one scalar
# per row, two scalars for LayerNorm. This notebook is about backwards that do almost none.
# Top-k, an embedding lookup, ReLU, max-pooling and dropout *select* or *mask* their input.
# What their backwards cost is the memory they touch, and what goes wrong is *where* the
# gradient lands — above all when two outputs read the same input.
#
# 1. **Top-k is a selection, not a computation**: where does its gradient go, and where does none go?
# 2. **The indices are constants**: no gradient flows through *which* entries were chosen.
# 3. **Repeated indices**: what a slot read twice is owed, and what a plain store does to it — on a CPU and on a GPU.
# 4. **The zero-FLOP family**: ReLU, max-pool and dropout, one question asked three times — what does the
#    forward keep, what does the backward read, and where is each number written?
# 5. **A mixture-of-experts router** learns through the softmax gate multiplied into the output.
# 6. **A scatter-add kernel in Triton** that stays right when programs collide.
#
# | part | you write | points |
# |---|---|---|
# | A | `topk_backward(dy, indices, n)` — the backward of a selection | 2 |
# | B | `embedding_backward(dy, ids, num_embeddings)` — rows read many times | 2 |
# | C | `relu_backward(dy, x)` — handed the input, or the output of an in-place ReLU | 1 |
# | D | `maxpool1d_backward(dy, x, kernel_size, stride)` — overlapping windows | 2 |
# | E | `dropout_backward(dy, mask, p)` — with the forward's mask, and a scale you measure | 1 |
# | F | `moe_gate_backward(dy, logits, indices, expert_out)` — the router's gradient | 3 |
# | G | `scatter_add_kernel` — `@triton.jit`, one source row and column block per program | 2 |
#
# Each test cell prints `✓ ...` when your function is right; when it is wrong, its first line
# names the kind of bug (`diagnosis: non-atomic-scatter — ...`) and the next lines say where.
# %%
import course

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from course import topk_scatter

F64 = torch.float64  # every gradient check in this course runs in float64
DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernel in Triton's interpreter


def unfinished(exc):
    """Whether `exc` comes from an exercise that still raises course.todo().

    Triton wraps what a kernel raises in its own error (and cannot compile a stub on a GPU),
    so look at the message and the whole chain of causes.
    """
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "course.todo()" in str(exc):
            return True
        exc = exc.__cause__
    return False

# %% [markdown]
# ## 1. Top-k is a selection
#
# `torch.topk(x, k)` returns two things: the $k$ largest values of each row, and their
# positions $i_1, \dots, i_k$. The values are entries of $x$, copied:
#
# $$y_m = x_{i_m}, \qquad m = 1, \dots, k.$$
#
# Nothing is computed — the forward is a *gather*. Its Jacobian $\partial y_m / \partial x_j$ is a
# $k \times N$ matrix with a very particular pattern; $\bar x = J^\top \bar y$ is Part A. Before you derive it,
# here is what autograd makes of one row of $N = 8$ with $k = 3$ — look at where the numbers land:
# %% check-output
x = torch.tensor([0.3, -1.2, 2.1, 0.8, -0.4, 1.7, 0.1, 1.1], dtype=F64)  # (N,) = (8,)
dy = torch.tensor([1.0, -0.5, 2.0], dtype=F64)  # ȳ: (k,) = (3,), one gradient per selected value
leaf = x.clone().requires_grad_(True)
y, indices = leaf.topk(3)  # the forward: values and where they came from
(dx,) = torch.autograd.grad(y, leaf, dy)  # autograd's backward
for name, value in (("x", x), ("indices", indices), ("y", y.detach()), ("dy", dy), ("dx", dx)):
    print(f"{name:>8}: {value.tolist()}")

# %% [markdown]
# The top three are at positions 2, 5 and 7 (the last slot). In a top-k the indices of a row are
# distinct. Part A asks for more: the backward of *any* gather, where a slot may be read twice.
#
# ## 2. The indices are constants
#
# The second output of `topk`, the indices, is an integer tensor. It carries no gradient,
# and that is not a shortcoming of autograd. Which entries win is **piecewise constant** in
# $x$: nudge $x$ a little and the same $k$ entries still win. So the derivative of the
# choice is zero almost everywhere, and at a tie, where an infinitesimal nudge flips the
# choice, it does not exist. Watch the indices as we raise $x_3$ (0.8 above) past the others:
# %%
for x3 in (0.8, 1.0, 1.2, 1.6, 1.8, 2.0, 2.4):
    probe = x.clone()
    probe[3] = x3
    values, indices = probe.topk(3)
    print(f"x[3] = {x3:3.1f}   indices {indices.tolist()}   values {[round(v, 2) for v in values.tolist()]}")
leaf = x.clone().requires_grad_(True)
values, indices = leaf.topk(3)
print("values:  requires_grad =", values.requires_grad, "— each one is an entry of x")
print("indices: requires_grad =", indices.requires_grad, f"— {indices.dtype}, nothing to differentiate")

# %% [markdown]
# The values move continuously (each one is some $x_j$); the indices stay put between the
# points where $x_3$ passes another entry (1.1, 1.7, 2.1) and jump there. Whatever the gradient of
# top-k is, the "which" part contributes nothing to it. Keep this in mind for §5 — a router that
# only *chooses* experts would never learn from the loss.
#
# ## Part A — topk_backward (2 points)
#
# Write the backward of top-k over the last axis, for any leading batch axes:
#
# - `dy` has shape `(..., k)`: the gradient of the selected values;
# - `indices` has shape `(..., k)`, int64: where each value came from;
# - `n` is the size of the last axis of $x$;
# - return $\bar x$, shaped like $x$: `(..., n)`.
#
# Top-k's forward is a gather, `y = x.gather(-1, indices)`, and your function must be the
# backward of **any** such gather along the last axis — one where an index may appear **more than
# once** in a row (Part D reuses it). The test runs distinct indices first, then repeated ones.
# No autograd.
# %% solution id=topk_backward
def topk_backward(dy, indices, n):
    """x̄ of y = x.gather(-1, indices) (top-k's forward), with x of last size n.

    dy (..., k), indices (..., k) int64, an index possibly repeated within a row → dx (..., n), shaped like x.
    """
    ### BEGIN SOLUTION
    dx = dy.new_zeros(*dy.shape[:-1], n)  # (..., n): zero at every slot nobody chose; write n
    # Add, not store: an index may repeat, and every read of a slot owes it its ȳ.
    dx.scatter_add_(-1, indices, dy)  # read k gradients and k indices per row
    return dx
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what does the Jacobian look like?</summary>
#
# $y_m = x_{i_m}$ depends on one entry of $x$, with slope 1. So row $m$ of $J$ has a single nonzero
# entry: where? $\bar x = J^\top \bar y$ then says where each $\bar y_m$ ends up — and which slots of
# $\bar x$ receive nothing at all (and must still be there, as zeros).
#
# </details>
#
# <details><summary>Hint 2 — what if an index repeats?</summary>
#
# If $i_1 = i_3 = j$, then $x_j$ was read twice: $y_1$ and $y_3$ both depend on it, and the chain rule
# owes $\bar x_j$ a contribution from each. A write that *stores* into a slot keeps one value per slot,
# whatever was there before. Which torch operation writes into indexed slots without overwriting?
#
# </details>
#
# <details><summary>Hint 3 — a row by hand, and the operations that write into slots</summary>
#
# One row, $n = 4$, `indices` $= (2, 0, 2)$, $\bar y = (1, 5, 10)$. Write $J$ (3 × 4) on paper: row $m$ has its
# one 1 in column $i_m$. Then $J^\top \bar y$: slot 0 gets 5, slot 1 gets nothing, slot 2 gets two numbers —
# what does it hold? torch has four operations that write values into indexed slots along an axis:
# `scatter_`, `scatter_add_`, `index_put_` (with and without `accumulate=True`) and `index_add_`. Read their
# docstrings: which of them add into the slot, and which replace what is there? Which one takes an index
# tensor shaped like the values, one index per value, along the last axis?
#
# </details>
# %% test id=test_topk_backward points=2
"""topk_backward: top-k of rows of 8, 10 and 9 at batch 1, batch 7, 3-D and
transposed (non-contiguous), then gathers with repeated indices (the last
slot among them), against autograd."""
course.selfcheck.topk_backward(topk_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.topk_backward(topk_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The backward of a gather is a scatter-add.**
# Row $m$ of $J$ is 1 at column $i_m$ and 0 elsewhere, so $J^\top \bar y$ sends each $\bar y_m$ back to the
# slot its value came from, and adds what lands on the same slot:
#
# $$\boxed{\;\bar x_j = \sum_{m \,:\, i_m = j} \bar y_m\;} \qquad (\text{zero for every } j \text{ that was not chosen}).$$
#
# It does no floating-point work beyond those adds. It reads $k$ gradients and $k$ indices and writes
# $N$ numbers, $N - k$ of them zeros — and on a GPU, writing those zeros is most of its cost. In code: zeros
# shaped `(..., n)` like `dy` (`new_zeros`), then `scatter_add_(-1, indices, dy)`; `scatter_` and `index_put_`
# without `accumulate` store instead of adding.
#
# </details>
#
# The picture shows the top-k of §1 and, beneath it, a gather that reads one slot several times:
# %%
topk_scatter.plot_topk_scatter(
    x, 3, dy,
    index=torch.tensor([2, 5, 2, 7, 2]),  # a gather that reads slot 2 three times
    dy_repeated=torch.tensor([1.0, 0.5, -2.0, 1.5, 0.25], dtype=F64),
)
plt.show()

# %% [markdown]
# In the top-k the indices are distinct — each slot is chosen at most once — so each slot of
# $\bar x$ receives at most one $\bar y_m$, and writing it with a plain store happens to be correct. In
# the gather underneath, slot 2 was read three times. Its gradient is the **sum** of the three
# $\bar y$'s, $1 - 2 + 0.25 = -0.75$. A plain store keeps one of the three. Run one after another, as
# on a CPU and as drawn, the last one survives, $0.25$; on a GPU the three stores race, and which one
# survives is unspecified — any of them may, and it can change from run to run. Either way two
# contributions vanish without an error message. This is notebook 01's law again, broadcast
# forward ⇄ reduce backward: a value read by many outputs must collect the gradient of all of them.
# %% [markdown]
# ## 3. Repeated indices: the embedding lookup
#
# An embedding is a gather of rows. A table $W$ of shape `(num_embeddings, D)` holds one row
# per token id; a batch of ids of shape `(B, T)` reads
#
# $$y_{b,t} = W_{\text{ids}_{b,t}} \qquad (B, T, D).$$
#
# Here repeats are the rule, not the exception: in any real text "the" appears many times per
# batch, and its row of $W$ is read at every occurrence. $\bar W$ has the shape of $W$, and every
# position of every sequence in the batch may touch it. What a plain store makes of that, on
# *the cat saw the dog*, next to autograd's answer:
# %% check-output
vocab = {"the": 0, "cat": 1, "saw": 2, "dog": 3}
ids = torch.tensor([vocab[w] for w in "the cat saw the dog".split()])  # (T,) = (5,): "the" twice
dy_tokens = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 3.0], [10.0, -1.0], [0.5, 0.5]], dtype=F64)  # (T, D)

stored = torch.zeros(4, 2, dtype=F64)
stored[ids] = dy_tokens  # a store: the second "the" overwrites the first
put = torch.zeros(4, 2, dtype=F64).index_put_((ids,), dy_tokens)  # also a store (accumulate=False)
table = torch.zeros(4, 2, dtype=F64, requires_grad=True)  # W, (num_embeddings, D)
(by_autograd,) = torch.autograd.grad(F.embedding(ids, table), table, dy_tokens)  # the true W̄
for name, dW in (("dW[ids] = dy", stored), ("index_put_", put), ("autograd", by_autograd)):
    print(f"{name:>13}: row of 'the' = {dW[0].tolist()}   rows of cat, saw, dog = {dW[1:].tolist()}")

# %% [markdown]
# Every row read once is right in all three; only the row of "the" differs, and autograd's holds
# $1 + 10 = 11$ in its first column: both occurrences count. A test without a repeated token cannot
# tell a store from the right answer, which is why every check in this notebook runs first without
# repeats and then with them — and a result that is right without and wrong with is diagnosed as
# `non-atomic-scatter`.
#
# **On a GPU the add must be atomic.** A GPU scatter runs thousands of programs at once, one
# per row of $\bar y$ say. Two programs holding two occurrences of "the" both read row 0 of
# $\bar W$, add their contribution, and write it back; interleaved, one write erases the other's
# addition. An *atomic* add (`atomicAdd` in CUDA, `tl.atomic_add` in Triton) does the
# read-add-write as one indivisible step in the memory system.
#
# **Atomics make the sum nondeterministic.** Atomics fix that every contribution is added, not
# the order in which they are added — that depends on which program gets there first, and
# changes from run to run. Floating-point addition is not associative, so the last bits of
# $\bar W$ can differ between two runs of the same training step. Here is the same set of
# float32 numbers summed in three orders:
# %% check-output
terms = torch.tensor([1e8, 1.0, -1e8, 1.0, 0.5, 3e-8], dtype=torch.float32)
for order in ([0, 1, 2, 3, 4, 5], [0, 2, 1, 3, 4, 5], [5, 4, 3, 1, 0, 2]):
    total = torch.tensor(0.0, dtype=torch.float32)
    for j in order:  # one addition at a time, each rounded to float32, as one atomic after another
        total = total + terms[j]
    print(f"order {order}: {total.item():.9g}")
print(f"exact (float64):        {terms.double().sum().item():.9g}")

# %% [markdown]
# Same numbers, three answers. Here a huge cancellation makes the difference dramatic; in a
# real gradient it usually sits in the last bits — still enough to make a bit-exact rerun
# impossible. When you need one (debugging, reproducible training),
# sort the contributions by destination and reduce each run of equal indices in a fixed order,
# at the price of a sort — this is what `torch.use_deterministic_algorithms(True)` switches
# some backwards to.
#
# ## Part B — embedding_backward (2 points)
#
# - `dy` has shape `(..., D)`: the gradient of the looked-up rows; `ids` has shape `(...)`,
#   int64, the same leading shape (1-D, 2-D `(B, T)` or more, possibly a non-contiguous view);
# - return $\bar W$, the gradient of the whole table: shape `(num_embeddings, D)`.
#
# No autograd. The test runs distinct ids first, then repeated ones.
# %% solution id=embedding_backward
def embedding_backward(dy, ids, num_embeddings):
    """W̄ of y = W[ids]: dy (..., D), ids (...) int64 → (num_embeddings, D)."""
    ### BEGIN SOLUTION
    D = dy.shape[-1]  # embedding width
    dW = dy.new_zeros(num_embeddings, D)  # (num_embeddings, D), the shape of W; write num_embeddings·D
    # Every lookup adds its row, so a repeated id collects all of its occurrences.
    dW.index_add_(0, ids.reshape(-1), dy.reshape(-1, D))  # read R ids and R·D gradients; add R·D
    return dW
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which rows of W̄ receive gradient, and from where?</summary>
#
# Each lookup $y_{b,t} = W_{\text{ids}_{b,t}}$ copies one row of $W$, so $\bar y_{b,t}$ belongs to that row of
# $\bar W$ and to no other. Rows no id names receive nothing, but $\bar W$ still has them (as zeros). The
# leading axes of `ids` only count lookups: nothing about their shape matters to $\bar W$.
#
# </details>
#
# <details><summary>Hint 2 — many lookups, one row</summary>
#
# Part A again, with rows instead of entries: a row read by several lookups owes each of them. List
# every lookup once — flatten the leading axes of `ids` and of `dy` (whatever their memory layout) —
# and find the torch operation that adds rows into indexed rows without overwriting.
#
# </details>
#
# <details><summary>Hint 3 — a table by hand, and the layout of the lookups</summary>
#
# A table of 3 rows, ids `[[0, 2], [0, 1]]` (batch 2, two tokens each), and four rows of $\bar y$ called
# $a, b, c, d$ in that order. Which row of $\bar W$ receives $a$ and $c$, and what does it hold? What do rows 1
# and 2 hold? Now the layout: the lookups form a `(B, T)` grid of ids and a `(B, T, D)` block of rows, possibly
# a transposed view. Make one list of ids and a matching `(R, D)` list of rows with `reshape` (which copies
# when a view is not possible), and look for the row-wise relative of Part A's adding operation, the one that
# takes one index per row along axis 0.
#
# </details>
# %% test id=test_embedding_backward points=2
"""embedding_backward: distinct ids at batch 1 and 7 and transposed
(non-contiguous), then repeated ids (the last row of the table among them)
at batch 1 and 7, with 1-D and 3-D ids, against autograd through
F.embedding."""
course.selfcheck.embedding_backward(embedding_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.embedding_backward(embedding_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;\bar W_r = \sum_{(b,t) \,:\, \text{ids}_{b,t} = r} \bar y_{b,t}\;}$$
#
# A scatter-add of rows. Every position of every sequence adds into the one table, so this is also a
# reduction over the batch axis (notebook 01) — which is why a result taken from the first sequence
# only is right at batch 1 and wrong at batch 7. In code: zeros of shape `(num_embeddings, D)`, then
# `index_add_(0, ids.reshape(-1), dy.reshape(-1, D))`.
#
# </details>
# %% [markdown]
# ## 4. The zero-FLOP family: one question, three times
#
# The same question — where did each output take its value from? — covers a family of ops whose
# backwards do no arithmetic worth counting. Their whole cost is the memory they read and write, so
# for each of them, before any formula, answer three questions:
#
# 1. **What does the forward keep** for the backward: the input, the output, a mask, positions, a seed?
# 2. **What does the backward read**, and how many bytes per element is that?
# 3. **What is written where**, and can two contributions land in the same place?
#
# The forwards:
#
# **ReLU.** $y = \max(x, 0)$, elementwise. At $x = 0$ the derivative does not exist; PyTorch uses 0
# there. A network that runs its ReLU **in place** (`nn.ReLU(inplace=True)`) overwrites the input with
# the output to save one activation-sized tensor; then the backward is handed $y$, not $x$.
#
# **Max-pool.** With windows of `kernel_size` $K$ moved by `stride` $s$ along the last axis
# (no padding), window $j$ covers $x_{js}, \dots, x_{js + K - 1}$ and outputs its max:
#
# $$y_j = \max_{0 \le t < K} x_{js + t} = x_{a_j}, \qquad a_j = js + \operatorname*{argmax}_{t} x_{js + t},
# \qquad j = 0, \dots, L_{\text{out}} - 1, \quad L_{\text{out}} = \lfloor (L - K)/s \rfloor + 1 .$$
#
# When $s < K$ the windows **overlap**, and one large value can be the max of several windows; when
# $s > K$ they leave **gaps**, positions that no window reads.
#
# **Dropout.** In training, `F.dropout(x, p)` zeroes each entry with probability $p$, by a bool mask $m$
# drawn once in the forward. What it does to the entries it keeps is yours to find out: you measure it
# just before Part E.
#
# ## Part C — relu_backward (1 point)
#
# `dy` and `x` have the same (any) shape. `x` is what the forward kept for the backward: the input of
# $y = \max(x, 0)$ — or, after an in-place ReLU, its output $y$, handed in the same argument. One function
# must be right for both, with PyTorch's value 0 at the kink. Return $\bar x$, shaped like `dy`. No
# autograd. First answer §4's three questions for ReLU: how many bits per element does the backward really
# need?
# %% solution id=relu_backward
def relu_backward(dy, x):
    """x̄ of y = max(x, 0) elementwise: dy and x of the same shape → dx shaped like x."""
    ### BEGIN SOLUTION
    return dy * (x > 0)  # read ȳ and x (or a 1-bit mask), write x̄: a select, no FLOPs
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — two regions</summary>
#
# Where $x > 0$, $y = x$: what is $\partial y / \partial x$ there? Where $x < 0$, $y = 0$ whatever $x$ does.
# Each output depends on one input, so the Jacobian is diagonal, and $\bar x$ is $\bar y$ times that derivative,
# entry by entry. The derivative is a 0/1 pattern, not the forward's output.
#
# </details>
#
# <details><summary>Hint 2 — what you can tell from y</summary>
#
# Suppose you hold $y$ instead of $x$. An entry of $y$ is positive exactly where $x$ was; where $x$ was
# negative (or 0), $y$ is exactly 0. So which test on the tensor you hold gives the same 0/1 pattern for $x$
# and for $y$? Try both comparisons with 0 — strict and not — on `x = [-2, 3, -1, 4]` and on `relu(x)`:
# one of them lets every dropped entry of $y$ through. The checks never put an input $x$ on the kink, so
# only the $y$ case can tell the two apart.
#
# </details>
# %% test id=test_relu_backward points=1
"""relu_backward: batch 1, batch 7, 3-D and transposed (non-contiguous), no
input at the kink x = 0, against autograd."""
course.selfcheck.relu_backward(relu_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.relu_backward(relu_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;\bar x = \bar y \odot \mathbb{1}[x > 0]\;}$$
#
# In code `dy * (x > 0)`: a select, not a multiply. The strict test is what makes it right on $y$ too,
# since $y > 0$ exactly where $x > 0$. So the backward needs only one bit per element — the sign pattern —
# and that bit can be read from $x$, from $y$, or from a 1-bit mask saved by the forward: $N/8$ bytes
# instead of $4N$ (float32). An in-place ReLU keeps nothing extra at all.
#
# </details>
# %% [markdown]
# ## Part D — maxpool1d_backward (2 points)
#
# `x` has shape `(..., L)`; the pooling runs over the last axis with windows of `kernel_size`,
# moved by `stride`, no padding (as `F.max_pool1d` with those two arguments) — the forward of §4.
# `dy` has shape `(..., L_out)`. Return $\bar x$ of shape `(..., L)`. Windows may overlap, or leave gaps.
# The check uses inputs without ties, so every window has one max. No autograd; your Part A function is
# yours to reuse. §4's three questions first: what must the backward know about each window, and may two
# windows write into the same place?
# %% solution id=maxpool1d_backward
def maxpool1d_backward(dy, x, kernel_size, stride):
    """x̄ of y = max_pool1d(x, kernel_size, stride) over the last axis: dy (..., L_out), x (..., L) → (..., L)."""
    ### BEGIN SOLUTION
    L_out = dy.shape[-1]  # the number of windows
    windows = x.unfold(-1, kernel_size, stride)  # (..., L_out, kernel_size): a view, read L
    starts = stride * torch.arange(L_out, device=x.device)  # (L_out,): j · s
    a = windows.argmax(dim=-1) + starts  # (..., L_out): where in x window j's max sits
    dx = torch.zeros_like(x)  # (..., L); write L
    dx.scatter_add_(-1, a, dy)  # add, not store: overlapping windows can share their max
    return dx
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — where did each output come from?</summary>
#
# $y_j = x_{a_j}$: max-pool is a gather, at the positions $a_j$ of §4. So first find $a_j$ for every
# window — the position of its max **in $x$**, not within the window — then it is Part A's question.
# Recomputing $a$ from $x$ costs one read of $x$; a framework may instead save it from the forward.
#
# </details>
#
# <details><summary>Hint 2 — overlapping windows, and gaps</summary>
#
# With $s < K$ a large value can be the max of several windows: the same $a_j$ for several $j$, repeated
# indices — which of Part A's operations stays right then? With $s > K$ some positions lie in no window:
# what do they receive? Positions inside windows that are no window's max get nothing either.
#
# </details>
#
# <details><summary>Hint 3 — by hand, then the windows as a view</summary>
#
# $x = (0.1, 0.5, 2.0, 0.3, -1.0)$, $K = 3$, $s = 1$: three windows, starting at 0, 1, 2. Where is each
# window's max, within its window and in $x$? Your $\bar x$ should be $(0, 0, \bar y_0 + \bar y_1 + \bar y_2, 0, 0)$.
# Now $K = 2$, $s = 3$ on $x$ of length 5: windows start at 0 and 3, and position 2 is in none. In code,
# `Tensor.unfold(dimension, size, step)` returns every window as a view with one more axis; an `argmax` over
# that axis gives each max's place **within** its window. What must be added to it to make it a place in
# $x$, and does it depend on `kernel_size` or on `stride`?
#
# </details>
# %% test id=test_maxpool1d_backward points=2
"""maxpool1d_backward: windows side by side (stride = kernel_size), then
overlapping windows that share a max, at batch 1, batch 7, 3-D and
transposed (non-contiguous), against autograd through F.max_pool1d."""
course.selfcheck.maxpool1d_backward(maxpool1d_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.maxpool1d_backward(maxpool1d_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;\bar x_i = \sum_{j \,:\, a_j = i} \bar y_j, \qquad a_j = js + \operatorname*{argmax}_t x_{js + t}\;}$$
#
# Part A's scatter-add at the windows' argmax positions: `x.unfold(-1, kernel_size, stride)` gives the
# windows, and `windows.argmax(dim=-1) + stride * torch.arange(L_out)` their maxima's places in $x$. The
# backward needs $a$: recompute it from $x$ (read $L$) or save it from the forward (an int64 per window, 8
# bytes — more than the float32 value it points to). Positions in a gap, or in no window's max, get 0.
#
# </details>
#
# The overlap in a picture of numbers: with kernel 3 and stride 1, the large value at position 2 is the
# max of three windows, and its gradient is the sum of theirs.
# %%
try:
    x_pool = torch.tensor([[0.1, 0.5, 2.0, 0.3, -1.0, 0.7, 0.2, 1.5]], dtype=F64)  # (1, 8)
    dy_pool = torch.tensor([[1.0, 2.0, 4.0, 8.0, 16.0, 32.0]], dtype=F64)  # (1, 6): one ȳ per window
    print("windows' maxima:", F.max_pool1d(x_pool, 3, 1).tolist())
    print("your x̄:        ", maxpool1d_backward(dy_pool, x_pool, 3, 1).tolist(), "← 1 + 2 + 4 at position 2")
except NotImplementedError:
    print("Finish Part D first: this cell calls your maxpool1d_backward.")

# %% [markdown]
# Now the last of §4's forwards, dropout. Measure what it does to the entries it keeps:
# %% check-output
torch.manual_seed(4)  # F.dropout draws its mask from torch's global generator
ones = torch.ones(10, dtype=F64)
for p_drop in (0.25, 0.6):
    print(f"F.dropout(ones, p={p_drop}):", [round(v, 4) for v in F.dropout(ones, p=p_drop, training=True).tolist()])

# %% [markdown]
# Every kept entry came out as the same number, and it depends on $p$. Which number, and why would the
# forward do that? (Compare the mean of $y$ with the mean of $x$.) Part E needs the answer.
#
# ## Part E — dropout_backward (1 point)
#
# `mask` is the bool tensor the forward drew, shaped like `dy`, True where it kept the entry; `p` is the
# drop probability (a float). The forward was `F.dropout(x, p)` with this mask — the cell above measured
# what it does to a kept entry. Return $\bar x$, shaped like `dy`. No autograd. §4's questions: what must the
# forward keep so that the backward can be computed, and what is the least it could keep?
# %% solution id=dropout_backward
def dropout_backward(dy, mask, p):
    """x̄ of y = F.dropout(x, p) with the forward's bool mask: dy, mask of one shape → dx."""
    ### BEGIN SOLUTION
    return dy * mask / (1 - p)  # read ȳ and the mask (1 byte each), write x̄
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what does the forward do to a kept entry?</summary>
#
# In the cell above Part E a kept 1.0 came out as one number at $p = 0.25$ and another at $p = 0.6$. Which function of
# $p$ gives both? Why that one: what is the expected value of an entry of $y$, over the random mask, if
# $x_i = 1$? A forward that scaled by anything else would change the mean of the activations between
# training and evaluation, where dropout does nothing.
#
# </details>
#
# <details><summary>Hint 2 — linear in x, with constants the forward fixed</summary>
#
# Write the forward for one entry as (constant) × $x_i$, with one constant for a kept entry and one for a
# dropped one. The gradient of $c \cdot x$ is $c \cdot \bar y$. The constants come from the mask the forward
# drew; a mask drawn afresh in the backward would be the gradient of a different function. A bool tensor
# multiplies as 0 and 1.
#
# </details>
# %% test id=test_dropout_backward points=1
"""dropout_backward: p = 0.25, 0.6, 0.5 and 0.3 at batch 1, batch 7, 3-D and
transposed (non-contiguous), against autograd; the mask and the scale are
checked."""
course.selfcheck.dropout_backward(dropout_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.dropout_backward(dropout_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Inverted dropout's forward is $y = x \odot m / (1 - p)$: the kept entries are scaled so that $y$ has the
# mean of $x$. Linear in $x$, so
#
# $$\boxed{\;\bar x = \frac{\bar y \odot m}{1 - p}\;}$$
#
# in code `dy * mask / (1 - p)`. The backward **reuses the mask** of the forward and keeps its $1/(1 - p)$.
# Saving $m$ costs a byte per entry (a bit, packed); fused kernels save only the random seed and regenerate
# $m$ in the backward (Philox counters make that cheap), so the mask costs nothing.
#
# </details>
#
# Here is what each backward of this family moves per element of $x$, in float32:
# %%
N = 1 << 24  # 16M elements of x
traffic = {  # bytes read + written by the backward, per the comments beside each op
    "ReLU, saved x": 4 * N + 4 * N + 4 * N,  # read ȳ and x, write x̄
    "ReLU, saved 1-bit mask": 4 * N + N / 8 + 4 * N,  # read ȳ and N bits, write x̄
    "max-pool K=3 s=1, saved argmax": 4 * N + 8 * N + 4 * N,  # read ȳ (L_out ≈ N), argmax (int64), write x̄
    "dropout, saved bool mask": 4 * N + N + 4 * N,  # read ȳ and N bytes, write x̄
    "dropout, seed only": 4 * N + 4 * N,  # read ȳ, write x̄; m regenerated in registers
}
for name, moved in traffic.items():
    print(f"{name:32}: {moved / N:5.2f} bytes per element, {moved / 2**20:6.0f} MiB, 0 FLOPs that matter")

# %% [markdown]
# ## 5. A mixture-of-experts router: gradient through the weights
#
# A mixture-of-experts layer sends each token to $k$ of its $E$ experts (small MLPs) and
# combines their outputs. A *router* scores the experts with logits $z \in \mathbb{R}^E$ per
# token, and top-k picks the experts. If the layer simply added up the chosen experts'
# outputs, $y = \sum_m h_m$, the router would never learn: §2 says the choice has no
# gradient, so nothing in $y$ would depend differentiably on $z$.
#
# The fix is to **multiply a gate into the output**. For one token:
#
# $$p = \operatorname{softmax}(z), \qquad i = \operatorname{topk}(z, k), \qquad g_m = p_{i_m},
# \qquad y = \sum_{m=1}^{k} g_m\, h_m ,$$
#
# where $h_m \in \mathbb{R}^D$ (row $m$ of `expert_out`) is the output of expert $i_m$ on this
# token. The choice $i$ is still a constant, but the *weights* $g_m$ are smooth functions of
# $z$, and the gradient reaches the router through them.
#
# **This layer's gates are not renormalised**: $g_m$ is the full softmax's probability, and
# $\sum_m g_m \le 1$. That is the Switch Transformer's router, which picks $k = 1$ expert (renormalising
# a single gate would make it the constant 1, and the router would learn nothing from it). Top-2
# GShard and Mixtral do renormalise: GShard divides its two gates by their sum, $g_1 + g_2$, and
# Mixtral takes a softmax over the $k$ chosen logits, which is the same thing. The exercise and its
# check use the forward above; the end of this section shows what renormalising changes.
#
# The other classic way across a discrete choice is the **straight-through estimator**: use
# the hard choice in the forward and pretend, in the backward, that it was the soft one.
# %%
z = torch.tensor([0.5, 2.0, -1.0, 1.0], dtype=F64, requires_grad=True)  # router logits, E = 4
soft = torch.softmax(z, dim=-1)  # (E,)
hard = F.one_hot(soft.argmax(), 4).to(F64)  # (E,): the choice, a constant
straight_through = hard + soft - soft.detach()  # forward: exactly `hard`; backward: soft's gradient
h = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)  # each expert's (scalar) output
print("forward value:    ", straight_through.tolist())
print("hard choice:       requires_grad =", hard.requires_grad, "— no path from the loss back to z")
(grad_st,) = torch.autograd.grad((straight_through * h).sum(), z)  # d/dz of Σ soft ⊙ h
print("straight-through:  z̄ =", [round(v, 4) for v in grad_st.tolist()])

# %% [markdown]
# The estimator is biased — the gradient belongs to a function the forward never computed —
# but it is cheap and often good enough. The gate in $y = \sum_m g_m h_m$ needs no pretending:
# the gradient is exact for the function actually computed.
#
# ## Part F — moe_gate_backward (3 points)
#
# For any leading axes (a batch of tokens `(B,)`, or `(B, T)`):
#
# - `dy` `(..., D)`: the gradient of the layer's output $y$;
# - `logits` `(..., E)`: the router logits $z$;
# - `indices` `(..., k)`, int64: the chosen experts, `logits.topk(k).indices` (constants);
# - `expert_out` `(..., k, D)`: $h$, the outputs of the chosen experts, in the order of `indices`.
#
# Return `(dlogits, dexpert_out)` with the shapes of `logits` and `expert_out`, for the forward of
# §5 (gates not renormalised). Do not call autograd; `torch.softmax` is fine (it is the forward), and
# so are your `topk_backward` and notebook 02's softmax backward, given here. What is new is the chain:
# which gradient reaches the gates, which the expert outputs, and how the gates' gradient gets back to
# **every** logit.
# %%
def softmax_backward_02(p, dp):
    """From notebook 02 (Part B): z̄ of p = softmax(z) over the last axis, from p and p̄ — one scalar per row."""
    s = (p * dp).sum(dim=-1, keepdim=True)  # (..., 1): the hub s = ⟨p, p̄⟩
    return p * (dp - s)  # (..., E)

# %% solution id=moe_gate_backward
def moe_gate_backward(dy, logits, indices, expert_out):
    """Gradients of y = Σ_m g_m · expert_out[..., m, :], g = softmax(logits).gather(-1, indices).

    dy (..., D), logits (..., E), indices (..., k) int64, expert_out (..., k, D).
    Returns (dlogits (..., E), dexpert_out (..., k, D)); the indices get no gradient.
    """
    ### BEGIN SOLUTION
    p = torch.softmax(logits, dim=-1)  # (..., E): recomputed, E numbers per token
    g = p.gather(-1, indices)  # (..., k): the gates
    dexpert_out = g[..., :, None] * dy[..., None, :]  # (..., k, D): h̄_m = g_m ȳ
    dg = (expert_out * dy[..., None, :]).sum(dim=-1)  # (..., k): ḡ_m = ⟨ȳ, h_m⟩
    dp = torch.zeros_like(p).scatter_add_(-1, indices, dg)  # (..., E): top-k's backward
    dlogits = softmax_backward_02(p, dp)  # (..., E): every logit, chosen or not
    return dlogits, dexpert_out
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — walk the forward backwards</summary>
#
# The forward is a chain: $z \to p = \operatorname{softmax}(z) \to g = p[i] \to y = \sum_m g_m h_m$. Four
# gradients to find, in reverse order, each with the shape of what it is the gradient of:
# $\bar h$ `(..., k, D)`, $\bar g$ `(..., k)`, $\bar p$ `(..., E)`, $\bar z$ `(..., E)`. $y$ is linear in each
# $h_m$ (with coefficient $g_m$) and in each $g_m$ (with coefficient $h_m$).
#
# </details>
#
# <details><summary>Hint 2 — a gather and a softmax, both met before</summary>
#
# $g = p[i]$ is a gather along the last axis: its backward is Part A's, into $E$ slots. The softmax's
# backward is notebook 02's, given above the exercise as `softmax_backward_02`: it wants $p$ and the
# gradient that reached $p$. Every logit gets a gradient from it — chosen or not.
#
# </details>
#
# <details><summary>Hint 3 — one token by hand</summary>
#
# One token, $D = 2$, $k = 2$: $h_1 = (1, 0)$, $h_2 = (0, 2)$, gates $g = (0.5, 0.3)$, $\bar y = (4, 1)$. Then
# $y = 0.5\,h_1 + 0.3\,h_2$. Move $h_1$ by a small vector $\delta$: $y$ moves by $0.5\,\delta$, so what is $\bar h_1$, and
# what shape is $\bar h$ for the token? Move $g_2$ by $\epsilon$: $y$ moves by $\epsilon\,h_2$, and the loss by
# $\epsilon\,\langle \bar y, h_2 \rangle = 2\epsilon$ — so $\bar g_2 = 2$; what is $\bar g_1$?
#
# </details>
# %% test id=test_moe_gate_backward points=3
"""moe_gate_backward: top-1, 2 and 3 of 4 to 8 experts at batch 1, batch 7,
3-D (batch, tokens) and transposed (non-contiguous), dlogits and dexpert_out
against autograd; no autograd inside."""
course.selfcheck.moe_gate_backward(moe_gate_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.moe_gate_backward(moe_gate_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Given $\bar y$ $(D,)$, by the rules we already have:
#
# 1. **Expert outputs.** $y$ is linear in each $h_m$: $\;\bar h_m = g_m\, \bar y$ $\quad (k, D)$.
# 2. **Gates.** $y$ is linear in each $g_m$: $\;\bar g_m = \langle \bar y, h_m \rangle$ $\quad (k,)$.
# 3. **Top-k.** $g = p[i]$ is a gather: $\;\bar p$ is $\bar g$ scattered into $E$ slots — Part A,
#    $\bar p_j = \bar g_m$ if $j = i_m$, else 0 $\quad (E,)$.
# 4. **Softmax.** Notebook 02's backward, $s = \langle p, \bar p \rangle$ and $\bar z = p \odot (\bar p - s)$ $\;(E,)$.
#
# In code, $\bar h$ pairs a `(..., k, 1)` view of the gates with a `(..., 1, D)` view of $\bar y$:
# `g[..., :, None] * dy[..., None, :]`. $\bar g$ pairs `expert_out` with the same view of $\bar y$ and sums over
# $D$: `(expert_out * dy[..., None, :]).sum(dim=-1)`. Then $\bar g$ goes to the chosen slots of $\bar p$ (zeros
# elsewhere) with your `topk_backward` (or `scatter_add_`) into $E$ slots, and through `softmax_backward_02`.
#
# Step 4 gives **every** expert's logit a gradient, chosen or not: for an expert $j$ that was
# not chosen, $\bar p_j = 0$ and $\bar z_j = -p_j\, s$. Raising any logit takes probability
# mass from the chosen experts, and the router learns that too. The indices get nothing.
#
# </details>
#
# Check it the independent way, with central differences on the forward. The indices are
# held fixed — they are constants, and a step of $10^{-6}$ is too small to change the choice:
# %%
def moe_forward(logits, indices, expert_out):
    gates = torch.softmax(logits, dim=-1).gather(-1, indices)  # (..., k)
    return (gates[..., :, None] * expert_out).sum(dim=-2)  # (..., D)


gen = torch.Generator().manual_seed(6)
logits = torch.randn(7, 5, generator=gen, dtype=F64)  # (B, E): 7 tokens, 5 experts
indices = logits.topk(2, dim=-1).indices  # (B, k): top-2, fixed from here on
expert_out = torch.randn(7, 2, 3, generator=gen, dtype=F64)  # (B, k, D)

try:
    course.check_vjp(
        lambda logits, expert_out: moe_forward(logits, indices, expert_out),
        lambda dy, logits, expert_out: moe_gate_backward(dy, logits, indices, expert_out),
        logits, expert_out, names=("logits", "expert_out"),
    )
except NotImplementedError:
    print("Finish Part F first: this cell checks your moe_gate_backward.")

# %% [markdown]
# **Renormalised gates.** GShard's top-2 router and Mixtral divide the chosen probabilities by their
# sum, $g_m = p_{i_m} / \sum_{m'} p_{i_{m'}}$, which equals a softmax over the $k$ chosen logits
# alone. Then the logits of the experts *not* chosen do not appear in $y$ at all and get
# exactly zero gradient — only the chosen experts compete. Autograd shows the difference:
# %%
z = logits[:1].clone().requires_grad_(True)  # one token, 5 experts
chosen = indices[:1]  # (1, k)
for name, renormalise in (("not renormalised", False), ("renormalised", True)):
    gates = torch.softmax(z, dim=-1).gather(-1, chosen)  # (1, k)
    if renormalise:
        gates = gates / gates.sum(dim=-1, keepdim=True)  # = softmax over the k chosen logits
    y = (gates[..., :, None] * expert_out[:1]).sum(dim=-2)  # (1, D)
    (dz,) = torch.autograd.grad(y.sum(), z)
    print(f"{name:>17}: dlogits = {[round(v, 4) + 0.0 for v in dz[0].tolist()]}   (chosen: {chosen[0].tolist()})")

# %% [markdown]
# ## 6. A scatter-add kernel in Triton
#
# The backward of every gather in this notebook is one operation:
#
# $$\text{OUT}[\text{index}_i, :] \mathrel{+}= \text{SRC}[i, :] \qquad \text{for every source row } i,$$
#
# with `OUT` of shape `(n, D)` zeroed first. For an embedding, `SRC` is $\bar y$ flattened to
# `(R, D)`, `index` is the flattened ids and `n = num_embeddings`.
#
# Traffic: read $R \cdot D$ values and $R$ indices; each add is a read-modify-write of $D$ values (in
# the GPU's L2 cache, when it is atomic); zeroing `OUT` writes $n \cdot D$. No FLOPs besides the adds.
#
# **A race the CPU hides.** Triton's interpreter runs programs one after another, so a plain load,
# add and store of an output row gives the right sum there — and loses additions on a GPU, where
# programs that share a destination run at the same time (§3). The values cannot show that; the
# accesses can. Inside `with course.sanitize() as report:` the course records every load,
# store and atomic of every program of each launch, and reports an address where two programs meet
# and at least one of them stores without an atomic: a **race**, with both programs and both lines.
# `report.plot(name)` draws which programs touched which elements of the tensor argument `name`.
#
# A small kernel that makes the mistake — not a scatter of rows but a counter: how many tokens the
# router of §5 sent to each expert (the load a balancing loss measures), one program per token:
# %%
@triton.jit
def count_tokens_kernel(
    EXPERT_ptr,  # (n_tokens,) int64: the expert each token was routed to
    COUNT_ptr,  # (n_experts,) int32, zeroed: tokens per expert
):
    """COUNT[EXPERT[t]] += 1 for token t = program_id(0), by a plain load, add and store."""
    t = tl.program_id(0)
    e = tl.load(EXPERT_ptr + t)  # this token's expert: other tokens may have the same one
    n = tl.load(COUNT_ptr + e)  # read the count ...
    tl.store(COUNT_ptr + e, n + 1)  # ... and write it back one higher


experts = torch.tensor([2, 0, 2, 3, 2, 1, 0, 2], device=DEVICE)  # (n_tokens,): the top-1 expert of 8 tokens
counts = torch.zeros(4, dtype=torch.int32, device=DEVICE)  # (n_experts,)
with course.sanitize() as report:
    count_tokens_kernel[(8,)](experts, counts)  # one program per token
print(f"kernel: {counts.tolist()}   torch.bincount: {torch.bincount(experts, minlength=4).tolist()}")
print(report)
if course.INTERPRETED:  # on a GPU the programs really run at once, and nothing is recorded
    report.plot("COUNT_ptr")
    plt.show()

# %% [markdown]
# The counts are right, and the report says not to trust them. Read it beside the picture: which
# programs met at expert 2's counter, and at which lines? On a GPU those four programs run at the
# same time. Write down one order of their loads and stores in which the counter ends at 1 instead
# of 4 — and one in which it ends at 2. Why does running them one after another, as the interpreter
# does, never produce either?
#
# The test cell of Part G runs your kernel under the same sanitizer: a kernel whose programs race
# fails with `race`, whatever numbers the CPU computed, and an access that is no element of any
# tensor argument (a lane past the end of a row that no mask stopped) fails with `out-of-bounds`.
#
# Here is the host function that allocates, checks its inputs and launches your kernel:
# %%
def scatter_add(src, index, n, BLOCK_D=None):
    """OUT (n, D) with OUT[index[i]] += src[i] for every row i of src (R, D); index (R,) int64 in [0, n)."""
    if src.ndim != 2:
        raise ValueError(f"src must be (rows, D); got shape {tuple(src.shape)}")
    if index.shape != (src.shape[0],):
        raise ValueError(f"index must have one entry per row of src, shape ({src.shape[0]},); got {tuple(index.shape)}")
    if index.numel() and not (0 <= int(index.min()) and int(index.max()) < n):
        raise IndexError(f"index holds values outside [0, {n})")
    R, D = src.shape
    src = src if src.stride(-1) == 1 else src.contiguous()  # the kernel assumes adjacent columns
    out = torch.zeros(n, D, dtype=src.dtype, device=src.device)  # write n·D zeros
    BLOCK_D = BLOCK_D or min(triton.next_power_of_2(D), 1024)
    grid = (R, triton.cdiv(D, BLOCK_D))  # one program per source row and column block
    scatter_add_kernel[grid](src, index.to(torch.int64).contiguous(), out, src.stride(0), out.stride(0), D, BLOCK_D=BLOCK_D)
    return out

# %% [markdown]
# ## Part G — scatter_add_kernel (2 points)
#
# Write the kernel the host function launches:
#
# ```python
# scatter_add_kernel[(R, cdiv(D, BLOCK_D))](src, index, out, src.stride(0), out.stride(0), D, BLOCK_D=BLOCK_D)
# ```
#
# The contract, for program $(i, j)$ — $i$ its index along the grid's first axis, $j$ along the second:
#
# - it handles source row $i$, and of that row the columns $j \cdot \text{BLOCK\_D}$ up to, not including,
#   $(j + 1) \cdot \text{BLOCK\_D}$ — only those below `n_cols`;
# - it reads `index[i]` and that block of source row $i$; rows of `SRC` and `OUT` are the given strides
#   apart (not `n_cols`), columns are adjacent, and a row offset can pass $2^{31}$;
# - it adds the block into the same columns of output row `index[i]`. Other programs may be adding
#   into that row at the same moment, so the add must be **atomic**;
# - it writes nothing outside the `n × n_cols` output, and nothing into `SRC` or `INDEX`.
#
# The test cell launches it on rows inside wider buffers (so a missing mask shows), first with
# distinct indices, then with repeated ones, in float64 and float32.
# %% solution id=scatter_add_kernel
import triton
import triton.language as tl


@triton.jit
def scatter_add_kernel(
    SRC_ptr,  # (n_src, n_cols) rows to add; row i starts at SRC_ptr + i * src_row_stride
    INDEX_ptr,  # (n_src,) int64: the output row each source row adds into
    OUT_ptr,  # (n, n_cols) zero-initialised result; row r starts at OUT_ptr + r * out_row_stride
    src_row_stride,  # elements from one row of SRC to the next
    out_row_stride,  # elements from one row of OUT to the next
    n_cols,  # D, the length of a row
    BLOCK_D: tl.constexpr,  # columns per program, a power of two
):
    """OUT[INDEX[i], :] += SRC[i, :]; program (i, j) adds columns j·BLOCK_D … j·BLOCK_D + BLOCK_D − 1 of row i.

    Reads one index and BLOCK_D values; one atomic read-modify-write of BLOCK_D values.
    """
    ### BEGIN SOLUTION
    i = tl.program_id(0).to(tl.int64)  # the source row
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    mask = cols < n_cols  # False past the end of the row
    dest = tl.load(INDEX_ptr + i)  # the output row; other programs may share it
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)  # read BLOCK_D
    # Atomic: a program with the same destination may be adding into this row right now.
    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which program does what?</summary>
#
# `tl.program_id(0)` is the source row and `tl.program_id(1)` the column block. The block's columns are
# its start plus `tl.arange(0, BLOCK_D)`; the last block of a row may run past `n_cols`, and those
# lanes must be masked out of the load **and** of the add. Cast the row index to int64 before
# multiplying it by a stride. If the check says `out-of-bounds`, ask of the lane it names: which
# element would it add into, and is that an element of the `n × n_cols` output at all?
#
# </details>
#
# <details><summary>Hint 2 — where to add, and how</summary>
#
# The destination row is a number stored in `INDEX_ptr`, at the program's source row: load it, then point
# at that row of `OUT` with `out_row_stride`. On a GPU a load, an add and a store from two programs
# interleave, and one addition is lost; `tl.atomic_add(pointers, values, mask=...)` does the
# read-add-write as one step (and returns the old values, which you do not need). If the check says
# `race`, its report names two programs and two lines: what do those two programs' source rows have
# in common, and which of the two lines lets one erase the other's work?
#
# </details>
#
# <details><summary>Hint 3 — one program's addresses, by hand</summary>
#
# Take program $(i, j) = (1, 2)$ with `BLOCK_D` = 4, `n_cols` = 10, `src_row_stride` = `out_row_stride` = 16
# and `index[1]` = 3. Which four columns does it own, and which of them are real? Which element offsets
# does it read from `SRC`, and which does it add into in `OUT`? Now write those three address computations
# with `tl.program_id`, `tl.arange` and the strides, and cast the row numbers to int64 before they meet a
# stride.
#
# </details>
# %% test id=test_scatter_add_kernel points=2
"""scatter_add_kernel: one row, distinct rows, then repeated rows (the last
output row among them), float64 and float32, rows inside padded (strided,
non-contiguous) buffers, against index_add_; every launch sanitized: no
race between programs, no access out of bounds."""
course.selfcheck.scatter_add_kernel(scatter_add_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.scatter_add_kernel(scatter_add_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;\text{OUT}[\text{index}_i,\ j\text{-th block}] \mathrel{+}= \text{SRC}[i,\ j\text{-th block}] \text{ as one atomic read-add-write, lanes past } n_{\text{cols}} \text{ masked}\;}$$
#
# The lanes are `tl.program_id(1) * BLOCK_D` plus `tl.arange(0, BLOCK_D)`; the source row starts at
# `SRC_ptr + i * src_row_stride`, the destination at `OUT_ptr + dest * out_row_stride`, and one
# `tl.atomic_add` with the mask adds the block. One program per source row and column block; no program
# owns an output row, so the atomic — not the grid — is what keeps every contribution. In Hint 3's example,
# program $(1, 2)$ owns columns 8 to 11, the last two masked; it reads elements 24 and 25 of `SRC` and adds
# into elements 56 and 57 of `OUT`.
#
# The counter of the warning above is fixed the same way: `tl.atomic_add(COUNT_ptr + e, 1)` in place of its
# load and store. The programs still meet at expert 2's counter, but each add is one indivisible
# read-add-write, so no interleaving loses one — and the sanitizer reports nothing. Run it below.
#
# </details>
# %%
@triton.jit
def count_tokens_atomic_kernel(
    EXPERT_ptr,  # (n_tokens,) int64: the expert each token was routed to
    COUNT_ptr,  # (n_experts,) int32, zeroed: tokens per expert
):
    """COUNT[EXPERT[t]] += 1 for token t = program_id(0), as one atomic read-add-write."""
    e = tl.load(EXPERT_ptr + tl.program_id(0))
    tl.atomic_add(COUNT_ptr + e, 1)  # no other program's add can fall between its read and its write


counts.zero_()
with course.sanitize() as report:
    count_tokens_atomic_kernel[(8,)](experts, counts)
print(f"kernel: {counts.tolist()}")
print(report)
if course.INTERPRETED:
    report.plot("COUNT_ptr")  # the same meetings as before, and no red
    plt.show()

# %% [markdown]
# With it, the embedding backward of Part B is one launch. Both against autograd, on a batch of token
# ids with many repeats:
# %%
gen = torch.Generator().manual_seed(66)
W = torch.randn(10, 6, generator=gen, dtype=F64, requires_grad=True)  # (num_embeddings, D)
ids = torch.randint(0, 10, (7, 12), generator=gen)  # (B, T): 84 lookups into 10 rows
dy = torch.randn(7, 12, 6, generator=gen, dtype=F64)  # (B, T, D)
(dW_autograd,) = torch.autograd.grad(F.embedding(ids, W), W, dy)
try:
    with course.sanitize() as report:  # your kernel, one program per lookup: 84 of them into 10 rows
        dW_kernel = scatter_add(dy.reshape(-1, 6).to(DEVICE), ids.reshape(-1).to(DEVICE), 10).cpu()
    dW_part_b = embedding_backward(dy, ids, 10)
    print(f"kernel vs autograd: relative error {course.relative_error(dW_kernel, dW_autograd):.1e}")
    print(f"Part B vs autograd: relative error {course.relative_error(dW_part_b, dW_autograd):.1e}")
    print(report)
    if course.INTERPRETED:
        report.plot("OUT_ptr")  # how many lookups met in each element of W̄, and whether any raced
        plt.show()
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Parts B and G first: this cell runs your embedding_backward and your kernel.")

# %% [markdown]
# ## What to take away
#
# - Top-k, embedding lookups, gathers and max-pool are **selections**: the forward copies
#   values, the backward puts each $\bar y$ back where its value came from and writes zeros
#   elsewhere. No FLOPs; the cost is the memory traffic.
# - **Indices are constants.** Selection is piecewise constant, so no gradient flows through
#   the choice. A router learns through the softmax gate multiplied into the output — its
#   backward chains a scatter and notebook 02's softmax collapse — or through a straight-through
#   estimator.
# - **Repeated indices need an add**: a plain store keeps one contribution (on a GPU, an
#   unspecified one) and drops the rest silently, and a test without repeats cannot see it. On a
#   GPU the add is atomic, which makes floating-point results depend on the order of arrival:
#   correct, not bit-reproducible.
# - ReLU (a mask from the sign of $x$), max-pool (a scatter to the argmax; overlapping windows add)
#   and dropout (the forward's mask, and its scale) complete the family.
# - **A CPU hides races; the accesses show them.** Triton's interpreter runs programs one after
#   another, so a read-add-store between programs computes the right numbers there.
#   `course.sanitize()` records what every program touched and names the two programs and
#   lines that meet without an atomic; `report.plot` draws it. Every kernel check runs under it.
#
# In notebook 00's debugging order, `course.diagnose.LADDER` (shape → sign → transpose → scale →
# batch-reduction → wrong-values), an exercise's own named bugs are tried right after the shape. This
# notebook's is `non-atomic-scatter`: **a scatter that needed an add** (atomic, on a GPU) — right without
# repeated indices, wrong with them. A kernel is also judged by its accesses, before its values: `race` when
# two programs meet at an address and one of them stores without an atomic or a lock, `out-of-bounds` when
# an access is no element of any tensor argument.

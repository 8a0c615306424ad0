# %% [markdown]
# # 03 · A fused softmax in Triton, forward and backward
#
# Notebook 02 turned the softmax backward from an $N \times N$ Jacobian into one scalar per
# row: $\bar x = y \odot (\bar y - s)$ with $s = \langle y, \bar y\rangle$. Here you write it as
# GPU kernels, forward and backward, each a single program per row that reads its row once
# and writes its result once. On the way you count bytes, because for softmax the bytes are
# the whole story: it does a handful of FLOPs for every number it reads, so its speed is set
# by memory traffic, and a fused kernel is fast because it moves less.
#
# | part | you write | points |
# |---|---|---|
# | A | `softmax_fwd_kernel` — `@triton.jit`, one row per program: $y = e^{x - m} / \ell$ | 2 |
# | B | `softmax_bwd_kernel` — `@triton.jit`, one row per program: $\bar x = y \odot (\bar y - s)$ | 2 |
# | C | `TritonSoftmax` — a `torch.autograd.Function` that launches both and saves $y$ only | 2 |
# | D | `triton_softmax(x)` — softmax over the last dimension of any-rank `x`, differentiable | 1 |
#
# **Where the kernels run.** `import course` looks for a CUDA GPU. With one, Triton compiles
# your kernels for it. Without one, it turns on Triton's *interpreter*, which runs the very
# same `@triton.jit` functions on the CPU with numpy, one program after another. Nothing in
# your code changes between the two. The interpreter is slow, so every experiment here uses small
# tensors; float32, float64 and float16 work in it, bfloat16 needs a GPU.
#
# Each test cell prints `✓ ...` when your code is right; when it is wrong, its first line
# names the kind of bug (`diagnosis: non-finite — ...`), the next lines say where, and the last
# one points to the hint that covers it. Every exercise is followed by collapsed hints: open the
# first only when you are stuck, and the next only when that was not enough. They ask questions
# and walk through one lane or one step; none gives the code. What the kernel should look like is
# in a collapsed recap after the test cell — open it once your check passes.
# %%
import course

# %%
import math

import matplotlib.pyplot as plt
import torch

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernels in Triton's interpreter
F64 = torch.float64


def unfinished(exc):
    """Whether `exc` comes from an exercise that still raises course.todo().

    Triton wraps whatever a kernel raises in its own error (and cannot compile a stub on a
    GPU), so look at the message and the whole chain of causes.
    """
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "course.todo()" in str(exc):
            return True
        exc = exc.__cause__
    return False

# %% [markdown]
# ## 1 · The math, with names for the code
#
# Softmax acts on each row of length $N$ separately. For one row $x$:
#
# $$m = \max_j x_j, \qquad e_j = e^{x_j - m}, \qquad \ell = \sum_j e_j, \qquad y_j = \frac{e_j}{\ell}.$$
#
# Subtracting the row max $m$ changes nothing mathematically — softmax is unchanged when
# the same number is added to every entry (notebook 02, Part C) — but it keeps every exponent
# $\le 0$, so $e^{x - m}$ never overflows. (In float32, $e^{x}$ is inf from $x \approx 88.7$.)
#
# The backward is notebook 02's Part B, taken as given here: given $\bar y$, the gradient of
# the loss with respect to the row's output,
#
# $$s = \langle y, \bar y\rangle = \sum_j y_j \bar y_j, \qquad \bar x = y \odot (\bar y - s)
#   \qquad \text{(from notebook 02)}.$$
#
# Nothing in this notebook derives it again. What is new is how a GPU program computes it: which
# rows a program reads, what it keeps in registers, what the tail of a block does, in which dtype
# it adds, and how many bytes it moves. Two facts about the formula decide the kernel design:
#
# - **It needs $y$ and $\bar y$, not $x$.** The forward's output is all the backward needs, so
#   the forward saves $y$ and nothing else.
# - **The row couples only through one number, $s$.** A program that holds the whole row
#   can compute $s$ and then $\bar x$ without writing anything in between. The max shift is free
#   here too: $m$ appears nowhere in the backward.
# %% [markdown]
# ## 2 · The naive version, and what it moves
#
# Here is softmax written the way PyTorch runs it op by op: each line is its own kernel, which
# reads its inputs from GPU memory (HBM) and writes its result back. The comments count the
# traffic for an input of $M$ rows of $N$, the way Triton's fused-softmax tutorial does.
# %%
def naive_softmax(x):
    """Softmax over the last dim of x (M, N), one PyTorch op at a time.

    Moves 8MN + 4M elements (read 5MN + 2M, write 3MN + 2M) where 2MN would do: read x, write y.
    """
    m = x.max(dim=-1, keepdim=True).values  # read MN elements; write M
    z = x - m  # read MN + M; write MN
    e = torch.exp(z)  # read MN; write MN
    ell = e.sum(dim=-1, keepdim=True)  # read MN; write M
    return e / ell  # read MN + M; write MN


def naive_softmax_backward(y, dy):
    """x̄ = y ⊙ (ȳ − s), s = ⟨y, ȳ⟩ per row, for y and dy of shape (M, N), one op at a time.

    Moves 9MN + 2M elements (read 6MN + M, write 3MN + M) where 3MN would do: read y and ȳ, write x̄.
    """
    p = y * dy  # read 2MN; write MN
    s = p.sum(dim=-1, keepdim=True)  # read MN; write M
    t = dy - s  # read MN + M; write MN
    return y * t  # read 2MN; write MN

# %% [markdown]
# The naive version is right (it is the reference for the gradient check in §6):
# %% check-output
gen = torch.Generator().manual_seed(0)
x = torch.randn(4, 10, generator=gen, dtype=F64)  # (M, N)
dy = torch.randn(4, 10, generator=gen, dtype=F64)  # ȳ, shaped like y

leaf = x.clone().requires_grad_(True)
y_torch = torch.softmax(leaf, dim=-1)
dx_autograd, = torch.autograd.grad(y_torch, leaf, dy)
print("naive_softmax == torch.softmax:        ", torch.allclose(naive_softmax(x), y_torch))
print("naive_softmax_backward == autograd's x̄:", torch.allclose(naive_softmax_backward(naive_softmax(x), dy), dx_autograd))

# %% [markdown]
# Now count. A fused kernel reads each row of its inputs once and writes its output once:
# the forward reads $x$ and writes $y$ ($N$ + $N$ per row); the backward reads $y$ and $\bar y$
# and writes $\bar x$ ($2N$ + $N$). Everything in between — $m$, $e$, $\ell$, $s$ — stays in
# the program's registers.
# %% check-output
def elements_moved(N):
    """Elements read + written per row of N, for each version (the per-row scalars included)."""
    return {
        "forward, naive": (5 * N + 2) + (3 * N + 2),
        "forward, fused": N + N,
        "backward, naive": (6 * N + 1) + (3 * N + 1),
        "backward, fused": 2 * N + N,
    }


N = 4096
for name, count in elements_moved(N).items():
    print(f"{name:16} {count:6d} elements per row of {N} = {count * 4 / 1024:5.1f} KiB in float32")

# %% [markdown]
# Fusion cuts the forward's traffic by 4× and the backward's by 3×. Section 7 shows why that
# translates straight into time.
# %% [markdown]
# ## 3 · One program per row, a power-of-two block, and a mask
#
# A Triton kernel is launched on a *grid* of programs; `tl.program_id(0)` tells each program
# which one it is. Softmax parallelises over rows, so launch `grid = (n_rows,)` and let program
# `row` handle row `row`. Each program loads its row as one block, a vector it works on as a
# whole: `tl.max`, `tl.exp`, `tl.sum` act on the block.
#
# **The block is a power of two.** `tl.arange(0, BLOCK)` — the column offsets of the block —
# needs a `BLOCK` that is a power of two and known at compile time (`tl.constexpr`). So a row
# of $N$ gets `BLOCK = triton.next_power_of_2(N)`: 1024 lanes for a row of 1000, and the last 24
# lanes point past the end of the row.
#
# **A mask keeps those lanes out of memory.** A boolean block such as `cols < n_cols` is true
# on the row and false on the tail. `tl.load(ptr + cols, mask=mask, other=v)` reads only the
# lanes where the mask is true and gives `v` to the others; `tl.store(ptr + cols, val, mask=mask)`
# writes only where it is true. Without a mask, a load reads whatever lies after the row (the
# next row, another tensor, or an illegal address), and a store overwrites it.
#
# **But the masked-off lanes are still in the block.** Whatever the load gives them takes part
# in every block operation that follows: `tl.max` and `tl.sum` over the block see them like any
# other lane. So `v` is a choice, and a wrong one changes the answer without any error. (On a GPU,
# a masked load without `other` leaves those lanes undefined.)
#
# **Rows are found by their stride.** Row `row` starts at `X_ptr + row * x_row_stride`, and the
# stride need not equal `n_cols`: a slice `x[:, :1000]` of a wider tensor has rows that are
# farther apart. Pass each tensor's `stride(0)` and never assume.
#
# **Half precision in memory, float32 in registers.** `tl.load` returns the dtype in memory, and
# arithmetic between two float16 (or bfloat16) blocks stays in that dtype, `tl.sum` included: it
# adds in the dtype it is given. Training stores activations and their gradients in half precision
# (notebook 08), and a half-precision number has 11 significant bits (bfloat16: 8).
#
# - A row statistic kept in it is rounded to those bits — and then the backward subtracts it from
#   every $\bar y_j$, where the bits that cancel are exactly the ones that were kept.
# - A sum in it is worse: every partial sum is rounded, and once the running total is large, small
#   terms stop counting at all.
#
# Loads, stores and registers are separate choices: the kernels here read and write the tensors' own
# dtype, and do their arithmetic in float32 (float64 stays float64, for the gradient check in §6).
# Notebook 08 measures how large these errors get and what a test should accept; float16 runs in
# Triton's interpreter on your CPU, bfloat16 only on a GPU.
#
# One float16 sum, added left to right the way a single GPU thread walks its share of a row:
# %% check-output
import numpy as np

terms = np.full(4096, 1.0, dtype=np.float16)  # a row of 4096 ones
print("float16, added one by one:", np.cumsum(terms)[-1])  # numpy's cumsum keeps a float16 running total
print("float32, added one by one:", np.cumsum(terms.astype(np.float32))[-1])
print("float16 spacing at 2048:  ", np.spacing(np.float16(2048)))  # 2048 + 1 rounds back to 2048

# %% [markdown]
# Past 2048 the float16 total cannot move by 1, so half the row is lost. A GPU's reduction is a
# tree rather than one long walk, which shortens the chain of roundings without removing them.
#
# The same steps in PyTorch, for one row of 5 logits (the numbers after it in memory could be
# anything), loaded with a fill of 0:
# %% check-output
n_cols = 5
BLOCK = 1 << (n_cols - 1).bit_length()  # the next power of two, as triton.next_power_of_2(n_cols)
memory = torch.tensor([-0.5, -1.0, -2.0, -3.0, -1.5, 7.0, float("nan"), -3.0])  # the row, then what follows it
cols = torch.arange(BLOCK)  # tl.arange(0, BLOCK)
mask = cols < n_cols
fill = 0.0  # the `other` of the load
# torch reads every lane and then picks; a masked tl.load never touches the masked-off addresses
x = torch.where(mask, memory[cols], torch.tensor(fill))  # tl.load(X_ptr + cols, mask=mask, other=fill)
row = memory[:n_cols]  # what the row really is

print(f"n_cols = {n_cols}, BLOCK = {BLOCK}")
print("mask          ", mask.int().tolist())
print("loaded x      ", [f"{v:.1f}" for v in x.tolist()])
print(f"max: of the block {x.max().item():.2f}, of the row {row.max().item():.2f}")
print(f"Σ e^(x - m): of the block {torch.exp(x - x.max()).sum().item():.3f}, "
      f"of the row {torch.exp(row - row.max()).sum().item():.3f}")

# %% [markdown]
# With a fill of 0 the block's max and sum are not the row's: the tail lanes win the max (every
# logit of this row is negative) and add $e^{0 - m}$ each to the sum, so $y$ comes out wrong and
# nothing complains. Which fill leaves both reductions exactly as they are on the row alone?
# That is one of Part A's questions. (The backward reduces something else over the block:
# Part B asks the same question again.)
# %% [markdown]
# ## Part A — softmax_fwd_kernel (2 points)
#
# Write the body of the forward kernel. The signature is fixed — the checks and Part C launch
# it as
#
# ```python
# softmax_fwd_kernel[(n_rows,)](x, y, x.stride(0), y.stride(0), n_cols, BLOCK=BLOCK)
# ```
#
# - One program per row: `tl.program_id(0)` is the row. Each row's elements are adjacent in
#   memory (column stride 1); rows are `x_row_stride` elements apart in `X` and `y_row_stride`
#   apart in `Y`, which need not be `n_cols`.
# - Load the row as one block of `BLOCK` lanes (a power of two, at least `n_cols`). The lanes past
#   `n_cols` must read nothing from memory and write nothing to it, and what the load gives
#   them must leave the row's max and sum unchanged.
# - No overflow for large logits: the check sends float32 logits of a hundred and more.
# - Arithmetic in float32 at least: a float16 row is widened after its load and the store writes
#   the output's own dtype; float32 and float64 stay as they are (the gradient check in §6 needs
#   float64 all the way). The check runs float16 rows too, and a float16 `y` may be off by no more
#   than about one rounding.
# - Use the names of §1: `m`, `e`, `ell` (for ℓ), `y`.
#
# The test cell launches your kernel on rows that sit inside wider buffers, with NaN in the
# padding after each row, and it checks that the padding of the output buffer is untouched.
# %% solution id=softmax_fwd_kernel
import triton
import triton.language as tl


@triton.jit
def softmax_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input x; row r starts at X_ptr + r * x_row_stride
    Y_ptr,  # (n_rows, n_cols) output y; row r starts at Y_ptr + r * y_row_stride
    x_row_stride,  # elements from one row of X to the next
    y_row_stride,  # elements from one row of Y to the next
    n_cols,  # N, the length of a row
    BLOCK: tl.constexpr,  # a power of two ≥ n_cols: the lanes of the block
):
    """Softmax of each row of X, written to the same row of Y; one program per row.

    Reads N elements and writes N per row; m, e and ℓ never leave the program.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2³¹ on a large tensor
    cols = tl.arange(0, BLOCK)  # (BLOCK,)
    mask = cols < n_cols  # False on the lanes past the end of the row
    # Masked-off lanes read −inf: the max ignores them and exp(−inf) = 0 adds nothing to ℓ.
    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))  # read N
    # Widen half precision to float32 before any arithmetic: ℓ is a sum over the row, and float16 or bfloat16
    # arithmetic would round every step of it. float32 and float64 (the gradcheck's) stay as they are.
    x = x.to(tl.float32) if x.dtype.primitive_bitwidth < 32 else x
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)  # every exponent ≤ 0: no overflow
    ell = tl.sum(e, axis=0)
    y = e / ell
    tl.store(Y_ptr + row * y_row_stride + cols, y, mask=mask)  # write N
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what does a tail lane do?</summary>
#
# Lanes `n_cols` … `BLOCK − 1` exist in every block operation of the kernel. Go through them one
# by one — the load, `tl.max`, `tl.exp`, `tl.sum`, the store — and ask what a tail lane
# contributes to each. Which of them may touch memory at all, and which reductions would the
# tail change if it held an ordinary number?
#
# </details>
#
# <details><summary>Hint 2 — two masks and a fill</summary>
#
# Both memory operations need the mask that is true exactly on the row's `n_cols` lanes: the
# load, so that the tail reads nothing past the row (NaN in the check's padding), and the
# store, so that it writes nothing past it (the next row, or another tensor). The fill of the
# load must be a value $v$ that never wins a max and whose exponential adds nothing to a sum:
# what must $e^v$ be, and what is $v$ then? Find the row at `row * stride` elements from the base
# pointer, with the stride of its own tensor; and subtract the row max before `tl.exp`, as §1 does.
# If the check says `out-of-bounds` or `race`, it names the program, the line and the element: which row
# is that element in, and should this program's address have reached it?
#
# </details>
#
# <details><summary>Hint 3 — one lane, in float16</summary>
#
# Follow one float16 row: what dtype does `tl.load` hand you, and what dtype is a `tl.sum` of it?
# Where in the kernel is the first operation whose result is rounded to the row's dtype, and what
# would that rounding cost $\ell$ on a row of 4096? Widen once, right after the load, and only when
# the loaded dtype is narrower than float32 — a float64 row must stay float64. `x.dtype` is known
# when Triton compiles the kernel: which of its attributes (`primitive_bitwidth`, say) tells float16
# from float32, and can a plain Python conditional on it pick the `.to(...)` at compile time, at no
# cost per element? `tl.store` converts to the output pointer's dtype by itself.
#
# </details>
# %% test id=test_softmax_fwd_kernel points=2
"""softmax_fwd_kernel: rows of 5 and 13 inside wider NaN-padded buffers at
batch 1 and 7, float32 and float64, and large logits, against torch.softmax;
the padding after each output row is left untouched."""
course.selfcheck.softmax_fwd_kernel(softmax_fwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_fwd_kernel(softmax_fwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **A masked row in one program.** The masked-off lanes load $-\infty$: $\max$ ignores it, and
# $e^{-\infty} = 0$ adds nothing to $\ell$, so the block reduces exactly as the row would. The same
# mask guards the store, so the tail writes nothing:
#
# $$\boxed{\;\texttt{tl.load}(\dots,\ \texttt{mask} = \texttt{cols} < \texttt{n\_cols},\
#   \texttt{other} = -\infty), \qquad \texttt{tl.store}(\dots,\ \texttt{mask} = \texttt{cols} < \texttt{n\_cols})\;}$$
#
# in code, `other=-float("inf")` on the load and the same `mask` on the load and the store. A fill
# of 0 would raise the max of a row of negative logits to 0 and add $e^{0 - m}$ per tail lane
# to $\ell$; an unmasked load would read the padding's NaN into both.
#
# Right after the load, a half-precision `x` becomes float32 (`x.to(tl.float32)`, chosen at compile
# time from `x.dtype`), so $m$, $e$, $\ell$ and $y$ are float32 in registers and only the store
# rounds, once. (Triton's `tl.exp` refuses float16: it accepts only float32 and float64, so a kernel
# that forgets to widen fails with `ValueError: Expected dtype ['fp32', 'fp64'] but got fp16`, in the
# interpreter and when compiling for a GPU alike. The `tl.max` before it would not complain, and
# neither would a `tl.sum` of a float16 block: the widening is what keeps those in float32 too.)
#
# </details>
#
# Watch the mask at work. Two rows of 5 live inside a buffer 8 wide whose padding holds NaN;
# the output buffer starts full of −1. After the launch the first 5 columns of each row hold
# softmax values (each row sums to 1), and the 3 padding columns still hold −1: the masked store
# never touched them.
# %%
try:
    x_buf = torch.full((2, 8), float("nan"), device=DEVICE)  # (2, 8): rows of 5, then padding
    x_buf[:, :5] = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 0.0, 0.0, 0.0, 10.0]])
    y_buf = torch.full((2, 8), -1.0, device=DEVICE)
    x_rows, y_rows = x_buf[:, :5], y_buf[:, :5]  # (2, 5) views whose rows are 8 apart
    softmax_fwd_kernel[(2,)](x_rows, y_rows, x_rows.stride(0), y_rows.stride(0), 5, BLOCK=8)
    print("y buffer:\n", y_buf.cpu().numpy().round(4))
    print("row sums:", y_rows.sum(dim=-1).tolist())
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Part A first: this cell launches your softmax_fwd_kernel.")

# %% [markdown]
# ## 4 · The backward kernel: s and x̄ in one program
#
# The backward kernel gets three pointers: $\bar y$ (from autograd), $y$ (saved by the
# forward) and $\bar x$ (to write). The formula is notebook 02's, as §1 gives it; this Part is
# about where each piece of it lives on the GPU.
#
# Compare the naive backward of §2: it wrote $y \odot \bar y$ to memory only to read it back for
# the sum, then wrote $\bar y - s$ only to read it back for the product — $9N$ elements moved
# where $3N$ do. In the fused kernel no $N \times N$ Jacobian appears anywhere, and neither does
# any $N$-long temporary in memory.
#
# The rows still end in a masked tail, and the tail lanes still take part in the block's
# reduction — which here is not a max and a sum of exponentials. And the one number per row is the
# statistic that half precision hurts most: §3's float16 rounding lands on it, and then it is
# subtracted from every $\bar y_j$.
# %% [markdown]
# ## Part B — softmax_bwd_kernel (2 points)
#
# Write the body of the backward kernel. It is launched as
#
# ```python
# softmax_bwd_kernel[(n_rows,)](dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), n_cols, BLOCK=BLOCK)
# ```
#
# - One program per row; each row's elements are adjacent in memory, and the rows of each
#   tensor are its own stride apart.
# - Read the row of $\bar y$ and the row of $y$ once each, write the row of $\bar x$ once: $3N$
#   elements per row and nothing else in memory. The lanes past `n_cols` read nothing and write
#   nothing, and what the loads give them must leave the row's scalar exact.
# - Arithmetic in float32 at least, as in Part A: the check runs float16 rows whose $\bar y$ has a
#   large part common to the whole row, and holds the float16 $\bar x$ to about one rounding.
# - Use the names of §1: `s` for the scalar hub, `dx` for $\bar x$.
# - The questions: which program reads which addresses? In which dtype, and where, does $s$ exist —
#   and is it ever written to memory? What must a tail lane hold so that it adds nothing to $s$?
#
# The test cell checks it the way Part A's does, against torch's own autograd, and in float16
# against torch's float64 backward of the same rounded values.
# %% solution id=softmax_bwd_kernel
@triton.jit
def softmax_bwd_kernel(
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ
    Y_ptr,  # (n_rows, n_cols) forward output y, saved by the forward
    DX_ptr,  # (n_rows, n_cols) result x̄, the shape of x
    dy_row_stride,  # elements from one row of DY to the next
    y_row_stride,  # elements from one row of Y to the next
    dx_row_stride,  # elements from one row of DX to the next
    n_cols,  # N, the length of a row
    BLOCK: tl.constexpr,  # a power of two ≥ n_cols: the lanes of the block
):
    """The softmax VJP of each row: x̄ from ȳ and the saved y, written to DX; one row per program.

    Reads 2N elements and writes N per row; s never leaves the program.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2³¹ on a large tensor
    cols = tl.arange(0, BLOCK)  # (BLOCK,)
    mask = cols < n_cols
    # Masked-off lanes read 0, so they add nothing to s.
    dy = tl.load(DY_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)  # read N
    y = tl.load(Y_ptr + row * y_row_stride + cols, mask=mask, other=0.0)  # read N
    # Widen half precision before the products and the sum: s would otherwise be held to float16's 11 bits,
    # and ȳ − s cancels those bits away. float32 and float64 stay as they are.
    dy = dy.to(tl.float32) if dy.dtype.primitive_bitwidth < 32 else dy
    y = y.to(tl.float32) if y.dtype.primitive_bitwidth < 32 else y
    s = tl.sum(y * dy, axis=0)  # the scalar hub: one number per row, in a register
    dx = y * (dy - s)
    tl.store(DX_ptr + row * dx_row_stride + cols, dx, mask=mask)  # write N
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — the plan, in registers</summary>
#
# Count what the program does to memory and to registers, in order: how many loads, how many
# reductions over the block, how many stores? Which of the quantities of §1's backward is a whole
# block, and which a single number? Keep the roles straight: `DY_ptr` points to $\bar y$, `Y_ptr`
# to $y$, and each has its own row stride. (If the values are wrong in float64 too, compare your
# signs and factors with notebook 02's recap of Part B.)
#
# </details>
#
# <details><summary>Hint 2 — the fill for a sum of products</summary>
#
# A tail lane enters $s$ only through a product $y_j \bar y_j$. Which fill makes that product zero
# whatever the other factor holds? Part A's fill would not do: what is $(-\infty) \cdot (-\infty)$,
# and what would $s$ become? The store needs the mask exactly as the forward's did: the tail of
# $\bar x$ belongs to the next row.
# If the check says `out-of-bounds` or `race`, it names the program, the line and the element: which row
# is that element in, and should this program's address have reached it?
#
# </details>
#
# <details><summary>Hint 3 — the one scalar, in float16</summary>
#
# Take a float16 row whose $\bar y_j$ are all near 10. Then $s$ is near 10 too, and float16's spacing
# at 10 is $2^{-7} \approx 0.008$: a float16 $s$ is off by up to half of that. Now $\bar y_j - s$ is of
# order 1 — how many correct bits does it keep? That is why both loaded rows are widened before the
# products and the sum, and why $\bar y - s$ is formed in float32 too; only the store narrows, once.
#
# </details>
# %% test id=test_softmax_bwd_kernel points=2
"""softmax_bwd_kernel: rows of 5 and 13 inside wider NaN-padded buffers at
batch 1 and 7, float32 and float64, against torch's autograd; the padding
after each output row is left untouched."""
course.selfcheck.softmax_bwd_kernel(softmax_bwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_bwd_kernel(softmax_bwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The hub in a register.** Both loads take the forward's mask and fill the tail with 0, so
# $y_j \bar y_j = 0$ there and the reduction is exact; both rows are widened to float32 (float64
# stays), so $s$ keeps 24 bits where a float16 one would keep 11; the scalar never leaves the
# program, and the store is masked like the forward's:
#
# $$\boxed{\;\text{tail lanes load } 0, \qquad s = \texttt{tl.sum}(y \cdot \bar y) \text{ in float32, in a register},
#   \qquad \bar x \text{ stored once}\;}$$
#
# in code both loads with `mask=mask, other=0.0`, then `dy.to(tl.float32)` and `y.to(tl.float32)`
# for a half-precision row, `s` the `tl.sum` of `y * dy` over `axis=0`, and §1's $\bar x$ into one
# masked store.
# $2N$ elements read and $N$ written per row: the least a softmax backward can move.
#
# </details>
#
# ## 5 · Wiring the kernels into autograd
#
# A `torch.autograd.Function` pairs a forward with a hand-written backward. Its `forward(ctx, x)`
# computes the output and stores on `ctx` what the backward will need; autograd later calls
# `backward(ctx, dy)` with $\bar y$ and expects $\bar x$, shaped like $x$, back. Tensors for the
# backward go through `ctx.save_for_backward(...)` and come back as `ctx.saved_tensors`, not as
# attributes such as `ctx.t = t`: autograd then checks that nobody modified a saved tensor in
# place before the backward ran.
#
# **What should the forward save?** Look at what your backward kernel reads. Every tensor saved
# stays alive, $N$ elements per row, from the forward until the backward; every tensor needed but
# not saved must be recomputed before the backward can start. Which way that trade goes depends
# on sizes: FlashAttention-2 (notebook 05) saves a single number per row, the log-sum-exp
# $L = m + \log \ell$, and recomputes its softmax from the inputs, because the tensor it avoids
# storing is $T \times T$, not $N$ per row.
#
# **Launching.** One program per row, `grid = (n_rows,)`, and `BLOCK = triton.next_power_of_2(N)`
# for rows of `N`. `BLOCK` is a compile-time constant: on a GPU each new value compiles the
# kernel once more (rows of 1000 and of 1020 share `BLOCK = 1024`).
#
# **The $\bar y$ autograd hands you.** It is whatever gradient the next op produced: after `y.mT`
# it is a transposed view, after `y.sum()` it is a single 1 expanded to the shape of $y$, with
# stride 0. Your kernel's contract is rows whose elements are adjacent (column stride 1), found
# by one stride per row.
# %% [markdown]
# ## Part C — TritonSoftmax (2 points)
#
# Write `TritonSoftmax`, for an input `x` of shape `(n_rows, n_cols)` whose rows are contiguous
# (Part D takes care of other shapes):
#
# - `forward(ctx, x)` allocates `y`, launches `softmax_fwd_kernel` with one program per row,
#   saves what the backward needs — and nothing it does not — and returns `y`;
# - `backward(ctx, dy)` launches `softmax_bwd_kernel` and returns `dx`, the shape of `x`, for
#   any $\bar y$ autograd hands it, contiguous or not. It must not call autograd (the checks
#   stop any call into it).
#
# Both are `@staticmethod`s. The test cell runs your class through autograd, checks what it
# saved, and feeds it a contiguous $\bar y$ and a transposed one.
# %% solution id=TritonSoftmax
class TritonSoftmax(torch.autograd.Function):
    """Softmax over the rows of a (n_rows, n_cols) tensor with contiguous rows, by the two kernels above.

    forward(ctx, x): launch softmax_fwd_kernel, save what the backward needs, return y.
    backward(ctx, dy): launch softmax_bwd_kernel, return dx (the shape of x).
    """

    @staticmethod
    def forward(ctx, x):
        ### BEGIN SOLUTION
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)  # (n_rows, n_cols)
        grid = (n_rows,)  # one program per row
        softmax_fwd_kernel[grid](x, y, x.stride(0), y.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        ctx.save_for_backward(y)  # y only: the backward is written in terms of the output
        return y
        ### END SOLUTION

    @staticmethod
    def backward(ctx, dy):
        ### BEGIN SOLUTION
        (y,) = ctx.saved_tensors
        dy = dy.contiguous()  # autograd may pass a transposed or expanded ȳ
        n_rows, n_cols = y.shape
        dx = torch.empty_like(y)  # (n_rows, n_cols), the shape of x
        grid = (n_rows,)
        softmax_bwd_kernel[grid](
            dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols),
        )
        return dx
        ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what does the backward read?</summary>
#
# Your backward kernel reads two tensors. One is $\bar y$, which autograd passes to `backward`.
# Where does the other come from — and is $x$ among what it reads? Save exactly what it needs,
# through `ctx.save_for_backward`, and get it back from `ctx.saved_tensors`. (If the check names
# `softmax_fwd_kernel` or `softmax_bwd_kernel`, the bug is in that kernel: its Part's hints cover it.)
#
# </details>
#
# <details><summary>Hint 2 — a ȳ you did not make</summary>
#
# The kernel walks a row one element at a time and gets one stride per tensor, the row stride.
# What are the strides of a transposed $\bar y$, and of one expanded from a single number? Hand the
# kernel a tensor laid out the way its contract says: which tensor method gives that, and what does
# it cost when $\bar y$ already is laid out so? Allocate $\bar x$ like the saved tensor, and launch with
# the strides of the tensors you actually pass.
#
# </details>
# %% test id=test_TritonSoftmax points=2
"""TritonSoftmax: y and x̄ through autograd at batch 1 and 7, float32 and
float64; saves y and nothing else; a contiguous and a transposed ȳ; no
autograd inside backward."""
course.selfcheck.TritonSoftmax(TritonSoftmax)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.TritonSoftmax(TritonSoftmax)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **Save $y$, and a $\bar y$ the kernel can walk.** The backward kernel reads $\bar y$ and $y$ — never
# $x$ — so the forward saves $y$ and nothing else: saving $x$ as well would keep $N$ more elements per
# row alive for nothing, and saving $x$ instead would make the backward recompute $y$ before it could
# start. And whatever layout autograd hands over, the kernel gets a $\bar y$ with adjacent elements:
#
# $$\boxed{\;\texttt{ctx.save\_for\_backward}(y), \qquad \bar y \leftarrow \texttt{dy.contiguous()}\;}$$
#
# in code `ctx.save_for_backward(y)` in the forward and `dy.contiguous()` before the launch in the
# backward (a no-op for a $\bar y$ that already is contiguous).
#
# </details>
#
# ## Part D — triton_softmax (1 point)
#
# The function users call: softmax over the **last** dimension of `x` of any rank, differentiable.
#
# - `TritonSoftmax` takes `(n_rows, n_cols)` with contiguous rows. `x` may be 1-D, 3-D, or a
#   transposed view whose rows are not contiguous: turn it into such rows without changing which
#   numbers form a row, run `TritonSoftmax.apply`, and return `y` with the shape of `x`.
# - Check the input first, with a message a user can act on (a 0-d tensor has no last dimension).
# - Rows longer than `MAX_COLS` (8192) do not fit one block: reject them with a `ValueError` that
#   names the length, rather than launching a kernel that cannot hold the row.
#
# One block per row works for rows up to at least 8192, which is all this notebook needs. Much
# longer rows no longer fit one program's registers; then a kernel walks the row block by block,
# keeping a running max and a running sum (the "online softmax" of FlashAttention).
# %% solution id=triton_softmax
MAX_COLS = 8192  # one block per row up to this length


def triton_softmax(x):
    """Softmax over the last dimension of x (any rank), by TritonSoftmax; y has the shape of x."""
    ### BEGIN SOLUTION
    if x.ndim == 0:
        raise ValueError("x is a 0-d tensor: softmax needs a last dimension to normalise over")
    N = x.shape[-1]  # the row length
    if N > MAX_COLS:
        raise ValueError(f"rows of {N} > {MAX_COLS} need a kernel that loops over blocks")
    rows = x.reshape(-1, N).contiguous()  # (n_rows, N), each row contiguous
    return TritonSoftmax.apply(rows).view(x.shape)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — rows, from any rank</summary>
#
# Every leading axis is a batch axis: an `x` of shape $(2, 3, N)$ is 6 rows of $N$. Which tensor
# method lines them up as $(n_\text{rows}, N)$ without your computing $n_\text{rows}$ — and does it copy,
# or return a view with strides taken from `x`? A softmax over any axis but the last is a different
# function. (If the check names one of the kernels, the bug is there: its Part's hints cover it.)
#
# </details>
#
# <details><summary>Hint 2 — a view is not enough</summary>
#
# Transpose a $(5, 9)$ tensor and line it up as rows of its last axis: are the elements of one row
# adjacent in memory? `TritonSoftmax` launches the kernel on what it is given: what must be true of
# the rows before `apply`, and which method makes it so — at no cost when it already is?
#
# </details>
#
# <details><summary>Hint 3 — the way back</summary>
#
# `TritonSoftmax` gives back $(n_\text{rows}, N)$, and a softmax returns the shape of its input. What
# turns the result back into the shape of `x` — and why is a view enough here, when it was not on the
# way in? Autograd carries $\bar y$ back through both reshapes by itself.
#
# </details>
# %% test id=test_triton_softmax points=1
"""triton_softmax: y and x̄ for 1-D, 2-D (batch 1 and 7) and 3-D inputs, a
transposed view and rows of 3000, float32 and float64, run through
TritonSoftmax."""
course.selfcheck.triton_softmax(triton_softmax)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.triton_softmax(triton_softmax)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **Any shape, as contiguous rows.**
#
# $$\boxed{\;x \;\to\; \texttt{x.reshape(-1, N).contiguous()} \;\to\; \texttt{TritonSoftmax.apply}
#   \;\to\; \texttt{.view(x.shape)}\;}$$
#
# `reshape` keeps a view, strides and all, when it can; `.contiguous()` copies only when the rows
# are not already adjacent, so the common case costs nothing. The result of `apply` is a fresh
# contiguous tensor, so `.view(x.shape)` always works on it. Autograd carries $\bar y$ back
# through the `view` and the `reshape` by itself.
#
# </details>
#
# ## 6 · gradcheck against a naive reference
#
# Two independent checks of the whole thing, both in float64. A central difference at its best
# step keeps only about two thirds of a dtype's digits (its error is about $u^{2/3}$, notebook 00):
# some 11 of float64's 16, but only about 5 of float32's 7 — too few to tell a right backward
# from a slightly wrong one.
#
# 1. `torch.autograd.gradcheck` perturbs each input entry by ±ε, runs **your forward** twice,
#    and compares the difference quotients with what **your backward** returns. It checks that the
#    backward is the derivative of the forward — whatever the forward computes.
# 2. So compare the forward, and the gradient, with the naive PyTorch version of §2 too: that
#    checks the forward is softmax.
#
# Without a GPU, the interpreter runs the same kernel code on the CPU, with numpy, in float64
# — the same operations in the same dtype, so the check means the same thing on a laptop. It
# is not bit for bit a GPU run: the order in which `tl.sum` and `tl.max` combine the lanes, and
# the `exp` of numpy's math library against the GPU's, differ, so the last bits of a result
# can too (far below gradcheck's tolerances); and programs run one at a time, so a race between
# programs never shows.
# %%
try:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)  # (3, 7)
    dy = torch.randn(3, 7, generator=gen, dtype=F64).to(DEVICE)  # ȳ

    print("gradcheck (float64):", torch.autograd.gradcheck(triton_softmax, (x,)))

    y = triton_softmax(x)
    dx, = torch.autograd.grad(y, x, dy)
    y_naive = naive_softmax(x.detach())
    dx_naive = naive_softmax_backward(y_naive, dy)
    print(f"y  vs naive: relative error {course.relative_error(y, y_naive):.1e}")
    print(f"x̄  vs naive: relative error {course.relative_error(dx, dx_naive):.1e}")
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Parts A–D first: this cell runs triton_softmax.")

# %% [markdown]
# ## 7 · Bytes moved, and why that is the speed limit
#
# A kernel's time is at least the larger of two numbers: its FLOPs divided by the chip's peak
# FLOP rate, and its bytes divided by the memory bandwidth. Their ratio, **arithmetic
# intensity** = FLOPs / bytes, says which one wins. The *ridge point* of a chip is peak FLOP/s
# divided by bandwidth: a kernel whose intensity sits below it is **bandwidth-bound** and can
# go no faster than its bytes allow, however clever its arithmetic.
#
# Count softmax per element, in float32 (4 bytes). The forward does about 5 operations (max,
# subtract, exp, sum, divide) and moves 8 bytes (read $x$, write $y$); the backward does about
# 4 (multiply, sum, subtract, multiply) and moves 12 (read $y$ and $\bar y$, write $\bar x$).
# An H100 SXM has about 3.35 TB/s of HBM bandwidth and about 67 TFLOP/s of float32 arithmetic
# without tensor cores, a ridge point near 20 FLOPs per byte. (Tensor cores multiply float32
# matrices much faster, but only by cutting the inputs to TF32, a 10-bit mantissa — and that is
# what Triton's `tl.dot` does with float32 inputs on such a GPU by default, unless asked for
# `input_precision="ieee"`. Softmax has no matmul, so the figure without tensor cores is the one
# that applies.)
# %%
BANDWIDTH = 3.35e12  # bytes/s, H100 SXM HBM3
PEAK = 67e12  # FLOP/s, H100 SXM float32 without tensor cores
ridge = PEAK / BANDWIDTH  # FLOP/byte

N = 4096
flops = {"forward": 5 * N, "backward": 4 * N}  # per row
kernels = {name: (flops[name.split(",")[0]], 4 * count) for name, count in elements_moved(N).items()}  # (FLOPs, bytes)

intensity = torch.logspace(-2, 3, 200)
fig, ax = plt.subplots(figsize=(6.4, 4.0))
ax.loglog(intensity, torch.minimum(torch.tensor(PEAK), intensity * BANDWIDTH), color="black", label="roofline")
ax.axvline(ridge, color="grey", linestyle="--", linewidth=1)
ax.annotate(f"ridge point ≈ {ridge:.0f} FLOP/byte", (ridge * 1.1, PEAK / 30), fontsize=8, color="grey")
for name, (f, b) in kernels.items():
    ax.plot(f / b, f / b * BANDWIDTH, "o", label=f"softmax {name}: {f / b:.2f} FLOP/byte")
ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="attainable FLOP/s",
       title="softmax on an H100 SXM (float32): far left of the ridge")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=8, loc="lower right")
plt.show()

M = 4096  # rows
for name, (f, b) in kernels.items():
    print(f"{name:16} on {M}×{N}: ≥ {M * b / BANDWIDTH * 1e6:5.0f} µs from bytes, ≥ {M * f / PEAK * 1e6:4.1f} µs from FLOPs")

# %% [markdown]
# **What the plot says.** All four kernels sit 30 to 200 times left of the ridge: the chip could
# do far more arithmetic per byte than softmax asks for, so the bytes set the time, and the
# FLOP count barely matters — even if you charge `exp` ten operations instead of one. Two
# things follow:
#
# - **Fusion is the optimisation.** The fused forward moves 4× fewer bytes than the naive one, so
#   it can be up to 4× faster; the fused backward up to 3×. Nothing else comes close.
# - **A good softmax kernel is judged in GB/s, not FLOP/s**: bytes moved divided by time,
#   against the chip's bandwidth. Saving $y$ and not $x$ matters for the same reason — every
#   tensor the backward reads is bytes on the clock.
#
# With a GPU, the cell below measures it, the way Triton's tutorial does: the bytes softmax must
# move (read $x$, write $y$) divided by the time. Same kernels, now compiled. A fused kernel gets
# close to the chip's bandwidth (about 3350 GB/s on an H100 SXM); the naive one, which moves 4× the
# bytes, gets about a quarter of that.
# %%
if course.INTERPRETED:
    print("On the CPU the interpreter runs one program at a time; timing it says nothing about a GPU. Skipped.")
else:
    try:
        x = torch.randn(4096, 4096, device=DEVICE)  # (M, N) float32
        useful = 2 * x.numel() * x.element_size()  # read x once, write y once: the bytes softmax cannot avoid
        for name, fn in [("naive_softmax", naive_softmax), ("torch.softmax", lambda t: torch.softmax(t, dim=-1)),
                         ("triton_softmax", triton_softmax)]:
            ms = triton.testing.do_bench(lambda: fn(x))  # mean time in milliseconds
            print(f"{name:15} {ms * 1e3:7.1f} µs   {useful / (ms * 1e-3) / 1e9:6.0f} GB/s of useful traffic")
    except Exception as exc:
        if not unfinished(exc):
            raise
        print("Finish Parts A–D first: this cell times triton_softmax.")

# %% [markdown]
# ## What to take away
#
# - One program per row; `BLOCK = triton.next_power_of_2(N)`; `mask = cols < n_cols` on every
#   load and store, with an `other` that leaves the reduction alone (−inf for a max-and-sum, 0 for a sum).
# - Load and store the tensors' own dtype; add in float32. A row statistic held in half precision
#   keeps 11 bits (8 in bfloat16), and the backward subtracts $s$ from every $\bar y_j$. Notebook 08
#   measures the errors and writes the tolerances.
# - The forward saves $y$ and nothing else; the backward reads $y$ and $\bar y$, computes the
#   scalar $s$ in registers, and writes $\bar x$: $2N$ in, $N$ out.
# - Softmax is bandwidth-bound in both directions, so the bytes you do not move are the speed you gain.
# - Check a hand-written backward with `gradcheck` in float64, and its forward against a naive
#   reference: one says the backward matches the forward, the other that the forward is right.
#
# Next, notebook 04: LayerNorm, where the row couples through two scalars instead of one, and
# the parameter gradients need a reduction across programs.

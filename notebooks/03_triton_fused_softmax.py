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
# your code changes between the two. The interpreter is slow and handles only float32 and
# float64 well, so every experiment here uses small tensors in those two dtypes.
#
# Each test cell prints `✓ ...` when your code is right; when it is wrong, its first line
# names the kind of bug (`diagnosis: non-finite — ...`) and the next lines say where.
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
# the same number is added to every entry — but it keeps every exponent $\le 0$, so
# $e^{x - m}$ never overflows. (In float32, $e^{x}$ is inf from $x \approx 88.7$.)
#
# The backward, from notebook 02: given $\bar y$, the gradient of the loss with respect to
# the row's output,
#
# $$s = \langle y, \bar y\rangle = \sum_j y_j \bar y_j, \qquad \bar x = y \odot (\bar y - s).$$
#
# Two facts about that formula decide the kernel design:
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
# **The mask keeps those lanes out.** `mask = cols < n_cols` is true on the row, false on the
# tail. `tl.load(ptr + cols, mask=mask, other=v)` reads only the lanes where the mask is true
# and gives `v` to the others; `tl.store(ptr + cols, val, mask=mask)` writes only where it is
# true. Without the mask, the load reads whatever lies after the row (the next row, another
# tensor, or an illegal address), and the store overwrites it.
#
# **`other` must be harmless.** The forward takes a max and a sum over the block, so the
# masked-off lanes must change neither: `other=-float("inf")` does it, since $\max$ ignores
# $-\infty$ and $e^{-\infty} = 0$. (With `other=0.0` those lanes would add $e^{0 - m}$ each to
# $\ell$.) In the backward, `other=0.0` is harmless: a zero adds nothing to $s$.
#
# **Rows are found by their stride.** Row `row` starts at `X_ptr + row * x_row_stride`, and the
# stride need not equal `n_cols`: a slice `x[:, :1000]` of a wider tensor has rows that are
# farther apart. Pass each tensor's `stride(0)` and never assume.
#
# The same steps in PyTorch, for one row of 5 (the numbers after it in memory could be anything):
# %% check-output
n_cols = 5
BLOCK = 1 << (n_cols - 1).bit_length()  # the next power of two, as triton.next_power_of_2(n_cols)
memory = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, 7.0, float("nan"), -3.0])  # the row, then what follows it
cols = torch.arange(BLOCK)  # tl.arange(0, BLOCK)
mask = cols < n_cols
# torch reads every lane and then picks; a masked tl.load never touches the masked-off addresses
x = torch.where(mask, memory[cols], -math.inf)  # tl.load(X_ptr + cols, mask=mask, other=-float("inf"))
m = x.max()
e = torch.exp(x - m)

print(f"n_cols = {n_cols}, BLOCK = {BLOCK}")
print("mask      ", mask.int().tolist())
print("loaded x  ", [f"{v:.1f}" for v in x.tolist()])
print("e^(x - m) ", [f"{v:.3f}" for v in e.tolist()])
print("y         ", [f"{v:.3f}" for v in (e / e.sum()).tolist()], "<- store only the first", n_cols)

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
# - One program per row: `row = tl.program_id(0)`. Each row's elements are adjacent in memory
#   (column stride 1); rows are `x_row_stride` apart in `X` and `y_row_stride` apart in `Y`.
# - Mask the load and the store with `cols < n_cols`, and give the load an `other` that changes nothing.
# - Subtract the row max before `tl.exp`. Compute in the dtype you load (float64 stays float64:
#   the gradient check in §6 needs it).
# - Use the names of §1: `m`, `e`, `ell` (for ℓ), `y`.
#
# The test cell launches your kernel on rows that sit inside wider buffers, with NaN in the
# padding after each row, so that a load without a mask shows up, and it checks that the
# padding of the output is untouched, so that a store without a mask shows up too.
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
    """y = e / ℓ with e = exp(x − m), m = max x, ℓ = Σ e over the row; one row per program.

    Reads N elements and writes N per row; m, e and ℓ never leave the program.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2³¹ on a large tensor
    cols = tl.arange(0, BLOCK)  # (BLOCK,)
    mask = cols < n_cols  # False on the lanes past the end of the row
    # Masked-off lanes read −inf: the max ignores them and exp(−inf) = 0 adds nothing to ℓ.
    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))  # read N
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)  # every exponent ≤ 0: no overflow
    ell = tl.sum(e, axis=0)
    y = e / ell
    tl.store(Y_ptr + row * y_row_stride + cols, y, mask=mask)  # write N
    ### END SOLUTION

# %% test id=test_softmax_fwd_kernel points=2
"""softmax_fwd_kernel: rows of 5 and 13 inside wider NaN-padded buffers at batch 1 and 7, float32 and float64, and large logits, against torch.softmax; the padding after each output row is left untouched."""
course.selfcheck.softmax_fwd_kernel(softmax_fwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_fwd_kernel(softmax_fwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
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
# forward) and $\bar x$ (to write). One program per row again:
#
# 1. load the row of $\bar y$ and the row of $y$ — $2N$ reads;
# 2. $s = \sum_j y_j \bar y_j$ — one `tl.sum` over the block, a scalar that stays in a register;
# 3. $\bar x = y \odot (\bar y - s)$ — elementwise, with $s$ broadcast over the block;
# 4. store the row of $\bar x$ — $N$ writes.
#
# Compare the naive backward: it wrote $y \odot \bar y$ to memory only to read it back for the
# sum, then wrote $\bar y - s$ only to read it back for the product — $9N$ elements moved
# where $3N$ do. No $N \times N$ Jacobian appears anywhere, and neither does any $N$-long
# temporary in memory.
#
# The masked-off lanes load `other=0.0` for both $y$ and $\bar y$: then $y_j \bar y_j = 0$ there
# and $s$ is exact.
# %% [markdown]
# ## Part B — softmax_bwd_kernel (2 points)
#
# Write the body of the backward kernel. It is launched as
#
# ```python
# softmax_bwd_kernel[(n_rows,)](dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), n_cols, BLOCK=BLOCK)
# ```
#
# - One program per row; each row's elements are adjacent in memory, rows are the given
#   strides apart.
# - Mask both loads and the store with `cols < n_cols`.
# - Use the names of §1: `s` for the scalar hub, `dx` for $\bar x$.
#
# The test cell checks it the way Part A's does, against torch's own autograd.
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
    """x̄ = y ⊙ (ȳ − s) with s = ⟨y, ȳ⟩ = Σ y·ȳ over the row; one row per program.

    Reads 2N elements and writes N per row; s never leaves the program.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2³¹ on a large tensor
    cols = tl.arange(0, BLOCK)  # (BLOCK,)
    mask = cols < n_cols
    # Masked-off lanes read 0, so they add nothing to s.
    dy = tl.load(DY_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)  # read N
    y = tl.load(Y_ptr + row * y_row_stride + cols, mask=mask, other=0.0)  # read N
    s = tl.sum(y * dy, axis=0)  # the scalar hub: one number per row instead of an N×N Jacobian
    dx = y * (dy - s)
    tl.store(DX_ptr + row * dx_row_stride + cols, dx, mask=mask)  # write N
    ### END SOLUTION

# %% test id=test_softmax_bwd_kernel points=2
"""softmax_bwd_kernel: rows of 5 and 13 inside wider NaN-padded buffers at batch 1 and 7, float32 and float64, against torch's autograd; the padding after each output row is left untouched."""
course.selfcheck.softmax_bwd_kernel(softmax_bwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_bwd_kernel(softmax_bwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Wiring the kernels into autograd: save y, nothing else
#
# A `torch.autograd.Function` pairs a forward with a hand-written backward. Its `forward(ctx, x)`
# computes the output and stores on `ctx` what the backward will need; autograd later calls
# `backward(ctx, dy)` with $\bar y$ and expects $\bar x$, shaped like $x$, back.
#
# **What should the forward save?** The backward reads $y$ and $\bar y$, so: $y$, with
# `ctx.save_for_backward(y)`. Saving $x$ as well would keep $N$ more elements per row alive
# until the backward, for nothing. Saving $x$ *instead* of $y$ would force the backward to
# recompute $y$ — read $x$, redo the max and the sum — before it could start. (Saving the two
# scalars $m$ and $\ell$ and recomputing $e^{x - m} / \ell$ is what FlashAttention does, in
# notebook 05; it pays off there because the tensor it avoids storing is $T \times T$, not $N$.)
# Use `ctx.save_for_backward`, not `ctx.y = y`: autograd then checks that nobody modified $y$ in
# place before the backward ran.
#
# **Launching.** One program per row, `grid = (n_rows,)`, and `BLOCK = triton.next_power_of_2(N)`
# for rows of `N`. `BLOCK` is a compile-time constant: on a GPU each new value compiles the
# kernel once more (rows of 1000 and of 1020 share `BLOCK = 1024`).
#
# **$\bar y$ need not be contiguous.** Autograd passes on whatever gradient the next op produced:
# after `y.mT` it is a transposed view, after `y.sum()` it is a single 1 expanded to the shape of
# $y$ with stride 0. The kernel steps along a row one element at a time, so make it
# contiguous first: `dy = dy.contiguous()` (free when it already is).
# %% [markdown]
# ## Part C — TritonSoftmax (2 points)
#
# Write `TritonSoftmax`, for an input `x` of shape `(n_rows, n_cols)` whose rows are contiguous
# (Part D takes care of other shapes):
#
# - `forward(ctx, x)` allocates `y`, launches `softmax_fwd_kernel`, saves `y` and nothing else,
#   and returns `y`;
# - `backward(ctx, dy)` launches `softmax_bwd_kernel` on `dy` and the saved `y` and returns `dx`.
#   It must not call autograd (the checks stop any call into it).
#
# Both are `@staticmethod`s. The test cell runs your class through autograd, checks what it
# saved, and feeds it a contiguous $\bar y$ and a transposed one.
# %% solution id=TritonSoftmax
class TritonSoftmax(torch.autograd.Function):
    """Softmax over the rows of a (n_rows, n_cols) tensor with contiguous rows, by the two kernels above.

    forward(ctx, x): launch softmax_fwd_kernel, save y only, return y.
    backward(ctx, dy): launch softmax_bwd_kernel on dy and the saved y, return dx (the shape of x).
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

# %% test id=test_TritonSoftmax points=2
"""TritonSoftmax: y and x̄ through autograd at batch 1 and 7, float32 and float64; saves y and nothing else; a contiguous and a transposed ȳ; no autograd inside backward."""
course.selfcheck.TritonSoftmax(TritonSoftmax)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.TritonSoftmax(TritonSoftmax)
### END HIDDEN TESTS

# %% [markdown]
# ## Part D — triton_softmax (1 point)
#
# The function users call: softmax over the **last** dimension of `x` of any rank, differentiable.
#
# - Flatten the leading dimensions into rows: `x.reshape(-1, N)` gives `(n_rows, N)`. It returns a
#   view when it can, and a view may still have rows that are not contiguous (a transposed
#   input, say), so add `.contiguous()`: free when the rows already are.
# - Run `TritonSoftmax.apply` on the rows and give the result the shape of `x`.
# - Check the input first, with a message a user can act on (a 0-d tensor has no last dimension).
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

# %% test id=test_triton_softmax points=1
"""triton_softmax: y and x̄ for 1-D, 2-D (batch 1 and 7) and 3-D inputs, a transposed view and rows of 3000, float32 and float64, run through TritonSoftmax."""
course.selfcheck.triton_softmax(triton_softmax)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.triton_softmax(triton_softmax)
### END HIDDEN TESTS

# %% [markdown]
# ## 6 · gradcheck against a naive reference
#
# Two independent checks of the whole thing, both in float64 (central differences lose about
# half of a dtype's digits, and float32 keeps too few):
#
# 1. `torch.autograd.gradcheck` perturbs each input entry by ±ε, runs **your forward** twice,
#    and compares the difference quotients with what **your backward** returns. It checks that the
#    backward is the derivative of the forward — whatever the forward computes.
# 2. So compare the forward, and the gradient, with the naive PyTorch version of §2 too: that
#    checks the forward is softmax.
#
# The interpreter runs float64 kernels exactly as a GPU would, so this works on a laptop.
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
# without tensor cores, a ridge point near 20 FLOPs per byte.
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
# - The forward saves $y$ and nothing else; the backward reads $y$ and $\bar y$, computes the
#   scalar $s$ in registers, and writes $\bar x$: $2N$ in, $N$ out.
# - Softmax is bandwidth-bound in both directions, so the bytes you do not move are the speed you gain.
# - Check a hand-written backward with `gradcheck` in float64, and its forward against a naive
#   reference: one says the backward matches the forward, the other that the forward is right.
#
# Next, notebook 04: LayerNorm, where the row couples through two scalars instead of one, and
# the parameter gradients need a reduction across programs.

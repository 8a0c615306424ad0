# %% [markdown]
# # 09 · The matmul backward in Triton
#
# Every linear layer — each attention projection, each MLP matrix, the output head — computes $y = xW + b$ in the
# forward pass and two more GEMMs in the backward: $\bar x = \bar y\,W^\top$ for the layer below and
# $\bar W = x^\top \bar y$ for the optimizer (from notebook 01). Each of the three costs the same $2MKN$ FLOPs, so the
# backward is two thirds of a linear layer's work, and linear layers do most of a transformer's FLOPs at common
# sequence lengths: this is the backward kernel a training step runs most often. Its two halves are not alike. Notebook 01 pictured why:
# $\bar x$ parallelises over the batch like the forward, and $\bar W$ *reduces* over it. Here you write both as
# Triton kernels, the reduction two ways — partial sums in a buffer added in a fixed order, and atomics — and
# measure what each costs: programs and waves on a real GPU, bytes moved, and the last bits of the answer.
#
# | part | you write | points |
# |---|---|---|
# | A | `linear_dx_kernel` — `@triton.jit`, x̄ = ȳwᵀ, one BLOCK_M × BLOCK_K tile of x̄ per program, a loop over N | 3 |
# | B | `linear_dw_splitk_kernel` — `@triton.jit`, one tile of w̄ over one split of the rows into a partial buffer | 3 |
# | C | `linear_dw_atomic_kernel` — `@triton.jit`, the same tile added into w̄ with `tl.atomic_add` | 2 |
# | D | `TritonLinear` — the forward and the three backward products wired into an autograd.Function, b̄ from Part B's kernel | 2 |
#
# **Notation** (from notebooks 00 and 01). $L$ is the scalar loss; $\bar t = \partial L / \partial t$ has the shape
# of $t$ and is `dt` in code. The weight is $W$ in the math and `w` in code. $x$ is $(M, K)$: $M$ rows — every token
# of the batch, leading axes flattened; notebook 01's $B$ — of $K$ features. $W$ is $(K, N)$, $b$ is $(N,)$ and
# $y = xW + b$ is $(M, N)$. So the three GEMMs share one set of letters: $y$ and $\bar x$ have $M$ rows, and the
# axis a GEMM sums over is $K$ for $y$, $N$ for $\bar x$ and $M$ for $\bar W$.
#
# **Where the kernels run.** As in notebooks 03–08: with a CUDA GPU Triton compiles your kernels for it; without
# one, its interpreter runs the same `@triton.jit` functions on the CPU, one program after another. The interpreter
# is slow, so every experiment here uses small matrices; its `tl.dot` needs every side of a tile to be 16 or more,
# which is why every launch below uses `BLOCK = 16`. The numbers for a real layer are computed, not run (§2).
#
# Each test cell prints `✓ ...` when your code is right; when it is wrong, its first line names the kind of bug
# (`diagnosis: out-of-bounds — ...`, `race`, `transpose`, `batch-reduction`, `half-accumulation`, …), the next
# lines say where, and the last one points to the hint that covers it. Every exercise is followed by collapsed
# hints — open the first only when you are stuck; they ask questions and give partial steps, never the code — and
# every test cell by a collapsed recap of the answer: open it once your check passes.
# %%
import course

# %% [markdown]
# **The given cell** below holds what you do not write: `BLOCK` and `ROWS_PER_SPLIT` for this notebook's small
# launches, and the launchers that allocate the outputs and launch your kernels — `launch_dx` (Part A's kernel),
# `launch_dw_partials` (Part B's, returning the partial buffers) and `launch_dw_atomic` (Part C's). Each exercise
# quotes the launch line it must serve. `accumulator(dtype)` is the dtype every sum of this notebook is kept in,
# and `gpu_tiles` fits the tiles a launcher is asked for to a GPU with less shared memory than an A100 (a T4, an
# RTX card): on the CPU it changes nothing.
# %%
import torch

import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernels in Triton's interpreter
BLOCK = 16  # every tile side in this notebook's launches: the interpreter's tl.dot needs 16 or more
ROWS_PER_SPLIT = 64  # rows of x per split of w̄'s reduction at this notebook's small shapes (Part B asks what a GPU wants)


def cdiv(a, b):
    return (a + b - 1) // b


def gpu_tiles(block, dtype, device):
    """(tile side, Triton's launch options) for the tiles of side `block` a caller asks for, on device.

    On the CPU, an A100, an H100 or an MI300X: `block`, with Triton's defaults. The NVIDIA GPUs with less shared
    memory per program — a T4 (64 KiB), an RTX 3090, A10, L4 or RTX 4090 (99 KiB) — run float64 tiles on two stages
    (three stages of 64 × 64 need 128 KiB), and a T4 takes 16-bit tiles of at most 32 (of 64 they spill registers).
    """
    if device.type != "cuda":
        return block, {}
    gpu = triton.runtime.driver.active
    shared = gpu.utils.get_device_properties(device.index or 0)["max_shared_mem"]
    if gpu.get_current_target().backend != "cuda" or shared >= 160 * 1024:
        return block, {}
    if dtype in (torch.float16, torch.bfloat16) and shared <= 64 * 1024:
        block = min(block, 32)
    return block, {"num_stages": 2} if dtype == torch.float64 else {}


def launch_dx(dy, w, block=BLOCK):
    """Given: x̄ = ȳ wᵀ for ȳ (M, N) and w (K, N), any strides, by linear_dx_kernel; x̄ (M, K) in ȳ's dtype."""
    (M, N), K = dy.shape, w.shape[0]
    dx = torch.empty(M, K, dtype=dy.dtype, device=dy.device)
    block, options = gpu_tiles(block, dy.dtype, dy.device)
    linear_dx_kernel[(cdiv(M, block), cdiv(K, block))](
        dy, w, dx, M, N, K, dy.stride(0), dy.stride(1), w.stride(0), w.stride(1), dx.stride(0), dx.stride(1),
        BLOCK_M=block, BLOCK_N=block, BLOCK_K=block, **options)
    return dx


def accumulator(dtype):
    """The dtype partial sums are kept in: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def launch_dw_partials(x, dy, rows_per_split=ROWS_PER_SPLIT, bias=False, block=BLOCK):
    """Given: linear_dw_splitk_kernel's partials of w̄ (SPLIT, K, N), and of b̄ (SPLIT, N) when ``bias``."""
    (M, K), N = x.shape, dy.shape[1]
    split = cdiv(M, rows_per_split)
    pw = torch.empty(split, K, N, dtype=accumulator(x.dtype), device=x.device)
    pb = torch.empty(split, N, dtype=accumulator(x.dtype), device=x.device)
    block, options = gpu_tiles(block, x.dtype, x.device)
    linear_dw_splitk_kernel[(cdiv(K, block), cdiv(N, block), split)](
        x, dy, pw, pb, M, N, K, rows_per_split, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
        HAS_BIAS=bias, BLOCK_M=block, BLOCK_N=block, BLOCK_K=block, **options)
    return pw, pb


def launch_dw_atomic(x, dy, rows_per_split=ROWS_PER_SPLIT, block=BLOCK):
    """Given: w̄ (K, N) by linear_dw_atomic_kernel, added into a zeroed accumulator, in x's dtype."""
    (M, K), N = x.shape, dy.shape[1]
    dw = torch.zeros(K, N, dtype=accumulator(x.dtype), device=x.device)
    block, options = gpu_tiles(block, x.dtype, x.device)
    linear_dw_atomic_kernel[(cdiv(K, block), cdiv(N, block), cdiv(M, rows_per_split))](
        x, dy, dw, M, N, K, rows_per_split, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
        dw.stride(0), dw.stride(1), BLOCK_M=block, BLOCK_N=block, BLOCK_K=block, **options)
    return dw.to(x.dtype)

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

F64 = torch.float64


def unfinished(exc):
    """True when `exc` is, or was caused by, a stub's course.todo(): Triton wraps a kernel's errors in its own,
    so the message and every cause in the chain are read."""
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "course.todo()" in str(exc):
            return True
        exc = exc.__cause__
    return False


def show(report, *tensors):
    """Print the sanitizer's report and, in the interpreter, draw which programs touched each named tensor argument
    (on a GPU nothing is recorded)."""
    print(report)
    if course.INTERPRETED:
        for name in tensors:
            report.plot(name)
        plt.show()

# %% [markdown]
# ## 1 · Two GEMMs, tile by tile
#
# A GEMM kernel gives each program one tile of the output and a loop over the summed axis. Each step loads one tile
# of each operand and multiplies them with `tl.dot` — a whole tile product in one call, on tensor cores on a GPU —
# into an accumulator that stays in the program's registers until one store at the end. What differs between
# $\bar x$ and $\bar W$ is the axis that is summed, and so which programs share a sum. Elementwise (notebook 01, §2):
#
# $$\bar x_{mk} = \sum_{n} \bar y_{mn}\, W_{kn}, \qquad \bar W_{kn} = \sum_{m} x_{mk}\, \bar y_{mn}.$$
#
# Answer from the formulas before you look at the picture. The program that owns tile $(i, j)$ of $\bar x$ —
# rows $i \cdot \texttt{BLOCK\_M}\dots$, columns $j \cdot \texttt{BLOCK\_K}\dots$ — which tiles of $\bar y$ and of
# $W$ does it read? Which other programs read the same tiles, and does it need any number another program computes?
# Then the same questions for a tile of $\bar W$, when the $M$ rows are cut into `SPLIT` splits.
# %%
def draw_matrix(ax, title, blocks, tiles, split_at=()):
    """A matrix of `blocks` = (row blocks, column blocks) tiles; `tiles` maps (r, c) to (colour, label);
    a dashed line above each row block in `split_at`."""
    rows, cols = blocks
    for (r, c), (colour, label) in tiles.items():
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colour, edgecolor="none"))
        ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=7)
    for r in range(rows + 1):
        ax.plot([0, cols], [r, r], color="0.7", linewidth=0.6)
    for c in range(cols + 1):
        ax.plot([c, c], [0, rows], color="0.7", linewidth=0.6)
    for r in split_at:
        ax.plot([0, cols], [r, r], "k--", linewidth=1.3)
    ax.set(xlim=(-0.05, cols + 0.05), ylim=(rows + 0.05, -0.05), aspect="equal", xticks=[], yticks=[])
    ax.set_title(title, fontsize=9)
    for spine in ax.spines.values():
        spine.set_visible(False)


READ, WRITE, OTHER = "#9ecae1", "#fb6a4a", "#eeeeee"
Mb, Nb, Kb = 6, 4, 3  # blocks of rows of x, columns of ȳ, columns of x
fig, axes = plt.subplots(2, 3, figsize=(10, 6.6))
i, j = 2, 1  # x̄'s program (i, j)
draw_matrix(axes[0, 0], f"ȳ (M, N): row block {i}, all of N", (Mb, Nb), {(i, n): (READ, f"step {n}") for n in range(Nb)})
draw_matrix(axes[0, 1], f"W (K, N): row block {j}, read as tiles of Wᵀ", (Kb, Nb),
            {(j, n): (READ, f"step {n}") for n in range(Nb)})
draw_matrix(axes[0, 2], f"x̄ (M, K): program ({i}, {j}) stores tile ({i}, {j})", (Mb, Kb), {(i, j): (WRITE, "once")})
i, j, s, per_split = 1, 2, 1, 3  # W̄'s program (i, j, s); SPLIT = 2 splits of 3 row blocks
mine = range(s * per_split, (s + 1) * per_split)
others = {(m, i): (OTHER, "s = 0") for m in range(per_split)}
draw_matrix(axes[1, 0], f"x (M, K): split {s}'s rows, column block {i}", (Mb, Kb),
            {**others, **{(m, i): (READ, f"step {m - mine[0]}") for m in mine}}, split_at=[per_split])
others = {(m, j): (OTHER, "s = 0") for m in range(per_split)}
draw_matrix(axes[1, 1], f"ȳ (M, N): split {s}'s rows, column block {j}", (Mb, Nb),
            {**others, **{(m, j): (READ, f"step {m - mine[0]}") for m in mine}}, split_at=[per_split])
draw_matrix(axes[1, 2], f"W̄ (K, N): program ({i}, {j}, {s}) holds a partial\nof tile ({i}, {j}); "
            f"program ({i}, {j}, 0) the other", (Kb, Nb), {(i, j): (WRITE, "partial")})
axes[0, 0].set_ylabel("x̄: one program of grid (M/BM, K/BK)", fontsize=9)
axes[1, 0].set_ylabel("W̄: one program of grid (K/BK, N/BN, SPLIT)", fontsize=9)
fig.suptitle("what one program reads (blue, one tile per step of its loop) and writes (red)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **$\bar x$: the sum stays inside one program.** Program $(i, j)$ reads row block $i$ of $\bar y$ and row block
# $j$ of $W$, across the whole of $N$, one tile of each per step. Every term of its tile's sum over $n$ is in those
# two row blocks, so the reduction runs start to end in the program's loop, in registers, and the tile is stored once:
# no other program contributes to it. Programs $(i, j')$ read the same tiles of $\bar y$ — loads only, which never
# race, and on a GPU they hit the cache. The grid is $(\lceil M/\text{BM} \rceil, \lceil K/\text{BK} \rceil)$: at
# $M = 65{,}536$ tokens, $K = 1{,}024$ and 128 × 128 tiles, 4,096 programs. The batch is the parallelism, as in the
# forward.
#
# **$\bar W$: the sum runs across programs.** A tile of $\bar W$ reads a column block of $x$ and one of $\bar y$
# over all $M$ rows. One program per tile would loop over 65,536 rows, and at $K = N = 1{,}024$ there are only
# $8 \times 8 = 64$ tiles of 128 × 128: 64 programs for a GPU with 108 or 132 streaming multiprocessors (SMs), 40 to
# 50% of it idle. So the rows are cut into `SPLIT` splits, a third axis of the grid, and program $(i, j, s)$ sums over
# split $s$ only: a *partial* $\bar W$ tile. Programs cannot add into each other's registers, so the `SPLIT`
# partials of a tile meet in memory, either in a buffer summed by a second pass (Part B) or by atomic additions
# into $\bar W$ itself (Part C).
# %% [markdown]
# ## Part A — linear_dx_kernel (3 points)
#
# Write the body of `linear_dx_kernel`: $\bar x = \bar y\, W^\top$ for $\bar y$ $(M, N)$ and $W$ $(K, N)$. The
# prologue — the rows and columns of the program's tile, and `acc_dtype` — is given, above the part you write.
# `launch_dx` in the given cell launches it as
#
# ```python
# linear_dx_kernel[(cdiv(M, block), cdiv(K, block))](
#     dy, w, dx, M, N, K, dy.stride(0), dy.stride(1), w.stride(0), w.stride(1), dx.stride(0), dx.stride(1),
#     BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
# ```
#
# - Program $(i, j)$ writes the `BLOCK_M` × `BLOCK_K` tile of $\bar x$ at rows `i·BLOCK_M…`, columns `j·BLOCK_K…`,
#   once, and no other element. It loops over $N$ in steps of `BLOCK_N`.
# - $M$, $N$ and $K$ need not be multiples of the block, and the check's are not: the last tiles are partial. No
#   load or store may reach past a matrix, and the lanes a mask turns off must add nothing to the sum.
# - Any strides: every address goes through its tensor's own two strides. The check passes transposed and sliced
#   views, and Part D hands this kernel a transposed matrix.
# - Sum in `acc_dtype` — float32 for float16 and float32 inputs, float64 for float64 ones (the check gradchecks in
#   float64) — and store $\bar x$ in its own dtype, once, at the end.
# - `tl.dot(a, b)` multiplies a $(P, Q)$ block by a $(Q, R)$ block, and here each side is 16 or more. Which block,
#   of which shape, must the second operand be, and how do you load it from $W$'s $(K, N)$ layout without making a
#   transposed copy of $W$?
# %% solution id=linear_dx_kernel
@triton.jit
def linear_dx_kernel(
    DY_ptr,  # (M, N) ȳ; element (m, n) at DY_ptr + m·stride_dym + n·stride_dyn
    W_ptr,  # (K, N) w; element (k, n) at W_ptr + k·stride_wk + n·stride_wn
    DX_ptr,  # (M, K) x̄, written; element (m, k) at DX_ptr + m·stride_dxm + k·stride_dxk
    M, N, K,
    stride_dym, stride_dyn,
    stride_wk, stride_wn,
    stride_dxm, stride_dxk,
    BLOCK_M: tl.constexpr,  # rows of x̄ per program
    BLOCK_N: tl.constexpr,  # columns of ȳ (rows of wᵀ) per step of the loop
    BLOCK_K: tl.constexpr,  # columns of x̄ per program
):
    """Grid (cdiv(M, BLOCK_M), cdiv(K, BLOCK_K)): program (i, j) writes the BLOCK_M × BLOCK_K tile of x̄ at rows
    i·BLOCK_M…, columns j·BLOCK_K…, and nothing else."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows of ȳ and x̄ (int64)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)  # (BLOCK_K,) columns of x̄ = rows of w
    acc_dtype = tl.float64 if DY_ptr.dtype.element_ty == tl.float64 else tl.float32  # the sums' dtype
    ### BEGIN SOLUTION
    acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=acc_dtype)
    for n0 in range(0, N, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N)  # (BLOCK_N,) this step's slice of the reduced axis
        dy = tl.load(DY_ptr + rows[:, None] * stride_dym + ns[None, :] * stride_dyn,
                     mask=(rows[:, None] < M) & (ns[None, :] < N), other=0.0)  # (BLOCK_M, BLOCK_N)
        wt = tl.load(W_ptr + cols[None, :] * stride_wk + ns[:, None] * stride_wn,
                     mask=(cols[None, :] < K) & (ns[:, None] < N), other=0.0)  # (BLOCK_N, BLOCK_K): a tile of wᵀ
        acc += tl.dot(dy, wt).to(acc_dtype)
    tl.store(DX_ptr + rows[:, None] * stride_dxm + cols[None, :] * stride_dxk, acc.to(DX_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < K))
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which program does what, and its masks</summary>
#
# The prologue gives the program its tile: `rows` are its rows of $\bar y$ and $\bar x$, `cols` its columns of
# $\bar x$, which are rows of $W$. Take $M = 37$ and `BLOCK_M = 16`: which lanes of `rows` in program $(2, 0)$ name a
# row that exists? The same question for `cols` against $K$, and for this step's slice of $N$ on the last step.
# Each load needs a mask that is true exactly where *both* of its offsets are inside the matrix, and a fill that
# adds nothing to a product; the store needs the mask of the tile of $\bar x$.
# If the check says `out-of-bounds`, it names the program, the line and the element: past which of $M$, $N$, $K$
# did that address go? If it says `race`, two programs stored the same element of $\bar x$: whose tile is it, and
# why did the other one reach it?
#
# </details>
#
# <details><summary>Hint 2 — the operands' layout, and the accumulator's dtype</summary>
#
# In one step the tile of $\bar y$ is `(BLOCK_M, BLOCK_N)`, so the second operand of `tl.dot` must be
# `(BLOCK_N, BLOCK_K)`: a tile of $W^\top$. Its element at $(n, k)$ is $W$'s element $(k, n)$, at
# `W_ptr + k·stride_wk + n·stride_wn`. In an offset block of shape `(BLOCK_N, BLOCK_K)`, which index runs down the
# rows and which across the columns — and so which of the two offset vectors gets `[:, None]`? A check that
# says `transpose` found the product of the wrong layout; try a non-square case by hand.
# The running sum is a `(BLOCK_M, BLOCK_K)` block created before the loop: in which dtype? `tl.dot` of two float16
# tiles returns float32, but a sum kept in float16 rounds at every step — the check calls that `half-accumulation`.
#
# </details>
#
# <details><summary>Hint 3 — the loop's skeleton</summary>
#
# ```python
# acc = ...  # zeros, (BLOCK_M, BLOCK_K), in acc_dtype
# for n0 in range(...):  # one step per BLOCK_N columns of ȳ
#     ns = ...  # this step's offsets along N
#     dy = ...  # (BLOCK_M, BLOCK_N) tile of ȳ, masked on rows and ns
#     wt = ...  # (BLOCK_N, BLOCK_K) tile of wᵀ read from w, masked on ns and cols
#     ...  # add the step's product into acc
# ...  # one masked store of acc, converted to x̄'s dtype
# ```
#
# Count the steps for $N = 40$ and `BLOCK_N = 16`: how many, and which lanes of the last one are masked?
#
# </details>
# %% test id=test_linear_dx_kernel points=3
"""linear_dx_kernel: x̄ = ȳwᵀ in NaN-padded buffers at shapes that divide no
block, batch 1 first (a square w); ȳ and w as transposed views; float32 and
float64, float16 within one rounding (a float16 accumulator is
half-accumulation); a float64 gradcheck through the kernel."""
course.selfcheck.linear_dx_kernel(linear_dx_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_dx_kernel(linear_dx_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# One loop over $N$ inside the program, one store after it:
#
# $$\boxed{\;\bar x_{[i,\,j]} = \sum_{\text{steps } n_0} \operatorname{tl.dot}\big(\bar y_{[i,\; n_0]},\; W^\top_{[n_0,\; j]}\big)\;}$$
#
# — in code, `acc += tl.dot(dy, wt)` with `acc` a `(BLOCK_M, BLOCK_K)` block of `acc_dtype` zeros. The tile of
# $W^\top$ is read from $W$ itself, with the offsets exchanged: `ns` runs down the rows of the block and `cols`
# across, at `W_ptr + cols[None, :] * stride_wk + ns[:, None] * stride_wn`. No transposed copy of $W$ exists
# anywhere; strides are the whole transpose. Both loads are masked on both of their offsets with `other=0.0`, so a
# lane past $M$, $K$ or $N$ contributes $0 \cdot$ anything $= 0$ to the dot, and the one store converts `acc` to
# `DX_ptr.dtype.element_ty` under the tile's mask, `(rows[:, None] < M) & (cols[None, :] < K)`.
#
# On a GPU the $\lceil K/\text{BK} \rceil$ programs of a row block read the same tiles of $\bar y$, and all the
# programs read the same $W$: the L2 cache serves the repeats, and the kernel moves close to one read of each input
# and one write of $\bar x$ — §2 counts it so.
#
# </details>
#
# Your kernel under the sanitizer, on sizes that are not multiples of 16: $\bar y$ is $40 \times 24$ and $W$ is
# $20 \times 24$, so the grid is $3 \times 2$ programs and the last tiles are partial. The first picture is
# $\bar x$: one writer per element. The second is $\bar y$: read-only, each element by the two programs of its row
# block.
# %%
try:
    gen = torch.Generator().manual_seed(9)
    dy = torch.randn(40, 24, generator=gen).to(DEVICE)  # (M, N)
    w = torch.randn(20, 24, generator=gen).to(DEVICE)  # (K, N)
    with course.sanitize() as report:
        dx = launch_dx(dy, w)
    print("x̄ matches ȳ @ w.T:", torch.allclose(dx, dy @ w.T, atol=1e-5))
    show(report, "DX_ptr", "DY_ptr")
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Part A first: this cell launches your linear_dx_kernel.")

# %% [markdown]
# ## 2 · What the two GEMMs cost on a GPU
#
# Put numbers on a real layer: $M = 65{,}536$ tokens (32 sequences of 2,048), $K = N = 1{,}024$, every tensor in
# bfloat16 (2 bytes), sums in float32. Two GPUs, from their datasheets: the number of SMs, the HBM bandwidth and the
# dense bfloat16 tensor-core throughput. A kernel cannot beat either floor, the time to move its bytes or the time to
# do its FLOPs; the larger one is the time it can hope for.
# %% check-output
GPUS = {  # name: (SMs, HBM bytes/s, dense bf16 tensor-core FLOP/s), from the datasheets
    "A100 80GB SXM": (108, 2.039e12, 312e12),
    "H100 SXM": (132, 3.35e12, 989e12),
}
M_GPU, K_GPU, N_GPU = 65_536, 1_024, 1_024  # a real layer's shapes; the kernels in this notebook run much smaller ones
BF16_BYTES, ACC_BYTES = 2, 4  # a bfloat16 element; a float32 partial sum
FLOPS_GPU = 2 * M_GPU * K_GPU * N_GPU  # every one of the three GEMMs: a multiply and an add per (m, k, n)
INPUT_BYTES = (M_GPU * K_GPU + M_GPU * N_GPU) * BF16_BYTES  # x and ȳ: what W̄'s kernel must read

KERNEL_BYTES = {  # each read once, each written once
    "x̄ = ȳ Wᵀ": (M_GPU * N_GPU + K_GPU * N_GPU + M_GPU * K_GPU) * BF16_BYTES,  # read ȳ and W, write x̄
    "W̄ = xᵀ ȳ": INPUT_BYTES + K_GPU * N_GPU * BF16_BYTES,  # read x and ȳ, write W̄
}
print(f"each GEMM: {FLOPS_GPU / 1e9:.0f} GFLOP")
for kernel, nbytes in KERNEL_BYTES.items():
    print(f"{kernel}: {nbytes / 2**20:5.0f} MiB moved, {FLOPS_GPU / nbytes:4.0f} FLOP per byte")
for name, (_, bandwidth, flops) in GPUS.items():
    print(f"{name}: ridge at {flops / bandwidth:4.0f} FLOP per byte; either GEMM's floors: FLOPs"
          f" {FLOPS_GPU / flops * 1e3:.3f} ms, bytes {KERNEL_BYTES['x̄ = ȳ Wᵀ'] / bandwidth * 1e3:.3f} ms")

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2))
labels, memory_ms, compute_ms = [], [], []
for name, (sms, bandwidth, flops) in GPUS.items():
    for kernel, nbytes in KERNEL_BYTES.items():
        labels.append(f"{kernel}\n{name}")
        memory_ms.append(nbytes / bandwidth * 1e3)
        compute_ms.append(FLOPS_GPU / flops * 1e3)
    labels.append(f"W̄, one program per\n128 × 128 tile: 64 SMs busy\n{name}")  # the same FLOPs on 64 SMs only
    memory_ms.append(KERNEL_BYTES["W̄ = xᵀ ȳ"] / bandwidth * 1e3)
    compute_ms.append(FLOPS_GPU / (flops * 64 / sms) * 1e3)
at = np.arange(len(labels))
ax.barh(at + 0.2, compute_ms, height=0.4, color="C1", label="FLOPs / peak tensor-core throughput")
ax.barh(at - 0.2, memory_ms, height=0.4, color="C0", label="bytes moved / HBM bandwidth")
ax.set_yticks(at, labels, fontsize=8)
ax.invert_yaxis()
ax.set(xlabel="ms, at best", title=f"each backward GEMM at M = {M_GPU:,}, K = N = {K_GPU:,} (bfloat16)")
ax.title.set_fontsize(10)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# Both GEMMs are **compute-bound**: about 500 FLOPs for every byte they move, well past either GPU's *ridge*, the
# arithmetic intensity at which the two floors meet. Their time is the FLOP time — if every SM is busy for all of
# it. That is the catch for $\bar W$. Its 64 tiles keep 64 SMs busy at most, so one program per tile takes
# $108/64$ of its floor on A100 and $132/64$ on H100 (the third bars), whatever the kernel's inner loop. Splitting the rows buys programs, and each
# split adds a float32 $K \times N$ partial that is written and read again: bytes, which were cheap until now.
# %% [markdown]
# ## 3 · Split-K: partial sums and a fixed-order second pass
#
# Notebook 01 listed the ways to combine the partials of $\bar W$. Split-K writes each one to its own slot of a
# buffer: program $(i, j, s)$ stores its partial tile at `PW[s]`, a $(\text{SPLIT}, K, N)$ float32 tensor, where
# nobody else writes, and a second pass adds the `SPLIT` slots of every element:
#
# $$\bar W = \sum_{s=0}^{\text{SPLIT}-1} P_s, \qquad P_s = \sum_{m \,\in\, \text{split } s} x_{m,:}^\top\, \bar y_{m,:}.$$
#
# The second pass is one more launch — in this notebook a `.sum` over the first axis — and reads every element's
# partials in the same order each time, so the result is the same to the last bit however the programs of the first
# pass were scheduled (Part C tests that claim). The price is the buffer: `SPLIT` times the bytes of a float32
# $\bar W$, written once and read once.
#
# How many splits? Too few and SMs sit idle; too many and the partials outweigh the inputs. The table models both for
# the layer of §2 on the two GPUs, with 128 × 128 tiles of $\bar W$ (64 of them) and these assumptions:
#
# - one program per SM at a time (a 128 × 128 float32 accumulator and its staged input tiles fill an SM's registers
#   and shared memory), so $P$ programs run in $\lceil P / \text{SMs} \rceil$ *waves*, and the SMs are busy
#   $P / (\lceil P / \text{SMs} \rceil \cdot \text{SMs})$ of the time: the last wave may be part empty;
# - the first pass takes at least the larger of its FLOP time at that share of the peak and the time to read $x$ and
#   $\bar y$ and write the partials; the second pass, the time to read the partials and write $\bar W$.
# %% check-output
TILES_GPU = (K_GPU // 128) * (N_GPU // 128)  # tiles of W̄ at 128 × 128


def split_k_floor(split, sms, bandwidth, flops):
    """(waves, share of the SMs busy, ms at least) for split-K with `split` splits on one GPU, as §3 models it."""
    programs = TILES_GPU * split
    waves = math.ceil(programs / sms)
    busy = programs / (waves * sms)
    partial_bytes = split * K_GPU * N_GPU * ACC_BYTES
    first = max(FLOPS_GPU / (flops * busy), (INPUT_BYTES + partial_bytes) / bandwidth)
    second = (partial_bytes + K_GPU * N_GPU * BF16_BYTES) / bandwidth
    return programs / sms, busy, (first + second) * 1e3


SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
print(f"{'SPLIT':>5} {'rows/split':>10} {'programs':>8} {'partials':>9} {'/ inputs':>8} |"
      + "".join(f" {name[:4]}: {'waves':>5} {'busy':>4} {'ms':>5} |" for name in GPUS))
for split in SPLITS:
    partials = split * K_GPU * N_GPU * ACC_BYTES
    row = f"{split:5} {M_GPU // split:10,} {TILES_GPU * split:8,} {partials / 2**20:5.0f} MiB {partials / INPUT_BYTES:8.3f} |"
    for gpu in GPUS.values():
        waves, busy, ms = split_k_floor(split, *gpu)
        row += f" {'':4}  {waves:5.1f} {busy:4.0%} {ms:5.3f} |"
    print(row)

# %% [markdown]
# Pick the `SPLIT` you would ship for this layer. One kernel binary runs on both GPUs, so one number for both.
# This cell is not graded; it prints your row.
# %%
SPLIT_CHOICE = None  # your pick: replace None by a whole number of splits

if SPLIT_CHOICE is None:
    print("Set SPLIT_CHOICE above, then run this cell again.")
elif not isinstance(SPLIT_CHOICE, int) or SPLIT_CHOICE < 1:
    print(f"SPLIT_CHOICE must be a whole number of splits, 1 or more; got {SPLIT_CHOICE!r}")
else:
    for name, gpu in GPUS.items():
        waves, busy, ms = split_k_floor(SPLIT_CHOICE, *gpu)
        best = min(SPLITS, key=lambda s: split_k_floor(s, *gpu)[2])
        print(f"{name}: SPLIT = {SPLIT_CHOICE}: {waves:.1f} waves, SMs {busy:.0%} busy, at least {ms:.3f} ms "
              f"(the table's best is SPLIT = {best}, {split_k_floor(best, *gpu)[2]:.3f} ms)")

# %% [markdown]
# **Question.** Defend your `SPLIT` in three sentences, in this cell: what a smaller one would cost on each GPU,
# what a larger one would cost, and which columns of the table show it. Why does H100 stop gaining at a smaller
# `SPLIT` than A100?
#
# *Your answer:*
# %% [markdown]
# <details><summary>Discussion (open once you have written your answer)</summary>
#
# **Too few splits starve the GPU.** At `SPLIT = 1` 64 programs leave 44 of A100's SMs and 68 of H100's idle, and
# the first pass takes $1/0.59$ and $1/0.48$ of its FLOP time. The share of busy SMs is the whole story at small
# `SPLIT`, and it is lumpy: A100 gains nothing from 1 to 2 (its second wave holds only 20 programs), H100 gains
# nearly 2× (128 programs in 132 SMs). With more waves the last, part-empty one matters less — the *tail effect*
# shrinks like 1/waves — and the busy share approaches 100%.
#
# **Too many splits pay in bytes.** Each split is a 4 MiB float32 $K \times N$ partial, written and read back:
# at `SPLIT = 64` the partials are as many bytes as $x$ and $\bar y$ together. H100's ridge is twice A100's — it does
# 295 FLOPs in the time it moves a byte, A100 153 — so its bytes run out first. Its SMs are 97% busy from
# `SPLIT = 2` on, so every further split only adds bytes, and at 64 even the first pass becomes memory-bound.
#
# **A pick for both.** The table's best is 8 on A100 and 2 on H100, a lucky fit of 128 programs into 132 SMs that
# the next GPU will not share. `SPLIT = 8` is within 6% of the best on both: about 4 waves or more, partials an
# eighth of the inputs. As a rule: enough programs for several waves on the largest GPU, and partials well under
# the inputs. Libraries choose per shape for this reason — cuBLAS by heuristics, Triton's autotuner by timing —
# and a smaller $M$ (fine-tuning, inference-time backward) moves the choice up: the rows, not the tiles, are what is
# split. CUTLASS's *stream-K* schedule removes the tail outright, by giving every SM the same number of loop steps
# whatever the tiles.
#
# </details>
# %% [markdown]
# ## Part B — linear_dw_splitk_kernel (3 points)
#
# Write the body of `linear_dw_splitk_kernel`: the partials $P_s$ of §3. `launch_dw_partials` in the given cell
# allocates the two buffers and launches it as
#
# ```python
# linear_dw_splitk_kernel[(cdiv(K, block), cdiv(N, block), split)](
#     x, dy, pw, pb, M, N, K, rows_per_split, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
#     HAS_BIAS=bias, BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
# ```
#
# with `split = cdiv(M, rows_per_split)`, `pw` of shape `(split, K, N)` and `pb` of shape `(split, N)`, both
# contiguous and in `accumulator(x.dtype)`.
#
# - Program $(i, j, s)$ writes tile $(i, j)$ of partial $s$ — the `BLOCK_K` × `BLOCK_N` block of `PW[s]` at rows
#   `i·BLOCK_K…`, columns `j·BLOCK_N…` — once, and nothing else of `PW`.
# - Split $s$ owns the rows `s·rows_per_split` up to, not including, the next split's first row, and no row at or
#   past $M$: the last split may be short. No row belongs to two splits, and the sum over a split's rows is the
#   program's own loop, in steps of `BLOCK_M`.
# - $x$ and $\bar y$ have any strides; `PW` and `PB` are contiguous, so their addresses follow from their shapes.
#   Masks as in Part A: $M$, $N$, $K$ and `rows_per_split` need not be multiples of the block.
# - Sum in `acc_dtype`. Which tile of $x$ does the product need, of which shape, and read how?
# - With `HAS_BIAS` — Part D's `TritonLinear` launches it so, and this check launches both ways — the programs whose
#   `tl.program_id(0)` is 0 also store, into `PB[s]` at columns `j·BLOCK_N…`, the sum of $\bar y$ over the split's
#   rows: $\bar b = \sum_m \bar y_{m,:}$ (notebook 01) sums over the same rows as $\bar W$. Why only those programs?
#   Part D asks. With `HAS_BIAS` false, `PB` is not touched.
# %% solution id=linear_dw_splitk_kernel
@triton.jit
def linear_dw_splitk_kernel(
    X_ptr,  # (M, K) x; element (m, k) at X_ptr + m·stride_xm + k·stride_xk
    DY_ptr,  # (M, N) ȳ; element (m, n) at DY_ptr + m·stride_dym + n·stride_dyn
    PW_ptr,  # (SPLIT, K, N) contiguous float32/float64 partials of w̄, written
    PB_ptr,  # (SPLIT, N) contiguous partials of b̄, written when HAS_BIAS
    M, N, K,
    rows_per_split,  # rows of x and ȳ per split; split s owns rows s·rows_per_split … (s+1)·rows_per_split − 1
    stride_xm, stride_xk,
    stride_dym, stride_dyn,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows per step of the loop over the split's rows
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Grid (cdiv(K, BLOCK_K), cdiv(N, BLOCK_N), SPLIT): program (i, j, s) writes the BLOCK_K × BLOCK_N tile of
    partial s at rows i·BLOCK_K…, columns j·BLOCK_N…: the sum over split s's rows of xᵀȳ; with HAS_BIAS, the
    programs with i = 0 also write the sum of ȳ over those rows into PB[s, j·BLOCK_N…]."""
    ks = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)  # (BLOCK_K,) rows of w̄
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) columns of w̄
    split = tl.program_id(2).to(tl.int64)  # int64: split·K·N can pass 2³¹ on a real layer
    acc_dtype = tl.float64 if X_ptr.dtype.element_ty == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    start = split * rows_per_split
    end = tl.minimum(start + rows_per_split, M)  # this split's rows stop here, or at the end of x
    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=acc_dtype)
    db = tl.zeros([BLOCK_N], dtype=acc_dtype)
    for m0 in range(0, rows_per_split, BLOCK_M):
        ms = start + m0 + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        xt = tl.load(X_ptr + ms[None, :] * stride_xm + ks[:, None] * stride_xk,
                     mask=(ms[None, :] < end) & (ks[:, None] < K), other=0.0)  # (BLOCK_K, BLOCK_M): a tile of xᵀ
        dy = tl.load(DY_ptr + ms[:, None] * stride_dym + ns[None, :] * stride_dyn,
                     mask=(ms[:, None] < end) & (ns[None, :] < N), other=0.0)  # (BLOCK_M, BLOCK_N)
        acc += tl.dot(xt, dy).to(acc_dtype)
        if HAS_BIAS:
            db += tl.sum(dy.to(acc_dtype), axis=0)
    tl.store(PW_ptr + split * K * N + ks[:, None] * N + ns[None, :], acc.to(PW_ptr.dtype.element_ty),
             mask=(ks[:, None] < K) & (ns[None, :] < N))
    if HAS_BIAS:
        if tl.program_id(0) == 0:  # one program per column block writes b̄: the others would race to store it
            tl.store(PB_ptr + split * N + ns, db.to(PB_ptr.dtype.element_ty), mask=ns < N)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which program does what, and its masks</summary>
#
# The prologue gives program $(i, j, s)$ its rows of $\bar W$ (`ks`), its columns (`ns`) and its split. Which rows
# of $x$ does the split own, as a first row and an end that is the smaller of two numbers? With $M = 100$,
# `rows_per_split = 64` and `BLOCK_M = 16`: how many steps does split 1's loop take, and which lanes of its last
# steps are rows of split 1? A mask on the rows must stop at the split's end, not only at $M$ — what happens to a
# row of split 2 that split 1's loop also reads? That row is counted twice, and the check says so. And a loop
# that starts at row 0 whatever the split? Right with one split, wrong with several: a `batch-reduction`.
# `PW[s]` is a $K \times N$ slab of a contiguous buffer: where does slab $s$ begin, and what is the distance between
# its rows? If the check says `race`, two programs stored the same element: a store with the wrong slab (or, with
# `HAS_BIAS`, a store of `PB` by more than one program per column block). If it says `out-of-bounds`, which of the
# masks let that address through?
#
# </details>
#
# <details><summary>Hint 2 — the operands' layout, and the accumulator's dtype</summary>
#
# The product for one step is a `(BLOCK_K, BLOCK_N)` block: a tile of $x^\top$ times a tile of $\bar y$. The tile of
# $\bar y$ is `(BLOCK_M, BLOCK_N)`, as it is stored. The tile of $x^\top$ is `(BLOCK_K, BLOCK_M)`: $x$'s element
# $(m, k)$ is at `X_ptr + m·stride_xm + k·stride_xk`, so which offset vector runs down the block's rows now?
# Part A read $W^\top$ the same way. A check that says `transpose` found a product with the wrong layout.
# The accumulator is created in `acc_dtype` before the loop, and stored into `PW`, whose dtype is `acc_dtype` too:
# float32 partials of float16 inputs. A partial kept in float16 is a `half-accumulation`.
#
# </details>
#
# <details><summary>Hint 3 — the loop over the split's rows</summary>
#
# ```python
# start = ...  # the split's first row
# end = ...  # one past its last row: the next split's first row, or M
# acc = ...  # zeros, (BLOCK_K, BLOCK_N), in acc_dtype
# for m0 in range(...):  # steps of BLOCK_M through the split's rows
#     ms = ...  # this step's rows
#     xt = ...  # (BLOCK_K, BLOCK_M) tile of xᵀ, masked on ms (against end) and ks
#     dy = ...  # (BLOCK_M, BLOCK_N) tile of ȳ, masked on ms (against end) and ns
#     ...  # add the step's product into acc
# ...  # one masked store of acc into slab `split` of PW
# ```
#
# The loop's range can be the same for every split — why does the mask make that safe for the last, short one?
#
# </details>
# %% test id=test_linear_dw_splitk_kernel points=3
"""linear_dw_splitk_kernel: each split's partial of w̄ (and of b̄ with
HAS_BIAS) against float64: one split first, then several whose
rows_per_split is no multiple of BLOCK_M; two programs storing one element is
a race; right with one split only is batch-reduction."""
course.selfcheck.linear_dw_splitk_kernel(linear_dw_splitk_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_dw_splitk_kernel(linear_dw_splitk_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Part A's loop, with the summed axis now the split's rows:
#
# $$\boxed{\;P_s[i, j] = \sum_{\text{steps } m_0} \operatorname{tl.dot}\big(x^\top_{[i,\; m_0]},\; \bar y_{[m_0,\; j]}\big),
# \qquad m_0 \text{ over the rows } s\,r \le m < \min\big((s + 1)\, r,\ M\big)\;}$$
#
# with $r$ = `rows_per_split`. In code: the split's first row is `split` times `rows_per_split`, and its `end` the
# `tl.minimum` of the next split's first row and `M`; every step's rows `ms` are masked against `end` (not $M$), so a step
# that runs past the split's end reads zeros instead of the next split's rows; the tile of $x^\top$ is read from $x$
# with the offsets exchanged, `X_ptr + ms[None, :] * stride_xm + ks[:, None] * stride_xk`; `acc += tl.dot(xt, dy)`;
# and one store into slab `split` of the contiguous buffer, at `PW_ptr + split * K * N + ks[:, None] * N + ns[None, :]`.
# Each element of `PW` has exactly one writer, so the launch has no race and needs no atomic. The `HAS_BIAS` branch
# is recapped after Part D.
#
# </details>
#
# Your kernel under the sanitizer: $x$ is $100 \times 20$ and $\bar y$ is $100 \times 24$, so with 64 rows per split
# there are two splits, the second 36 rows long, and a grid of $2 \times 2 \times 2$ programs. The picture is the
# partial buffer, its two slabs one above the other: one writer per element, and each program's tile in its own
# slab.
# %%
try:
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(100, 20, generator=gen, dtype=F64).to(DEVICE)  # (M, K)
    dy = torch.randn(100, 24, generator=gen, dtype=F64).to(DEVICE)  # (M, N)
    with course.sanitize() as report:
        pw, pb = launch_dw_partials(x, dy, rows_per_split=64)  # (2, K, N) partials
    print("partials' shape:", tuple(pw.shape))
    print("split 0 is x[:64]ᵀ ȳ[:64]:  ", torch.allclose(pw[0], x[:64].T @ dy[:64]))
    print("the partials add up to xᵀ ȳ:", torch.allclose(pw.sum(dim=0), x.T @ dy))
    show(report, "PW_ptr")
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Part B first: this cell launches your linear_dw_splitk_kernel.")

# %% [markdown]
# Each slab of `PW` is one split's $x^\top \bar y$, and no element has two writers. What the launch leaves undone is
# the addition of the slabs: the second pass, `SPLIT` float32 reads per element of $\bar W$.
# %% [markdown]
# ## Part C — linear_dw_atomic_kernel (2 points)
#
# The other way to combine the partials: add each one straight into $\bar W$. `tl.atomic_add(pointers, values,
# mask=...)` does, for each lane, a read, an add and a write of one address that no other program can come between:
# when the `SPLIT` programs of a tile each add their partial, every addition lands. There is no buffer and no second
# pass — at `SPLIT = 8` for §2's layer, 28 MiB less memory and one launch fewer than split-K — and a GPU does the
# additions in its L2 cache, where `SPLIT` of them per element are cheap next to the GEMM.
#
# What atomics give up is the order. The programs of a tile finish in whatever order the GPU schedules them, and
# floating-point addition is not associative: $(a + b) + c$ and $a + (b + c)$ can differ in the last bit. §4 measures
# what that does to $\bar W$. (And the dtype: `launch_dw_atomic` adds into a float32 $\bar W$ and converts it at the
# end. bfloat16 atomics exist on recent GPUs, but each one would round the running total to 8 bits — notebook 08's
# half-accumulation, done by the memory system.)
#
# `launch_dw_atomic` in the given cell zeroes $\bar W$ in `accumulator(x.dtype)` and launches the kernel as
#
# ```python
# linear_dw_atomic_kernel[(cdiv(K, block), cdiv(N, block), cdiv(M, rows_per_split))](
#     x, dy, dw, M, N, K, rows_per_split, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
#     dw.stride(0), dw.stride(1), BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
# ```
#
# - The same grid, splits and loop as Part B: program $(i, j, s)$ sums split $s$'s rows of $x^\top \bar y$ for
#   tile $(i, j)$.
# - Then it adds that partial into tile $(i, j)$ of $\bar W$, which the other `SPLIT − 1` programs of the tile add
#   into too. $\bar W$ has the strides `stride_dwk`, `stride_dwn`: use them.
# - No plain store, and no load-add-store, of $\bar W$: on a GPU the programs of a tile run at the same time, and
#   one's store overwrites another's sum. The check's sanitizer calls it a `race`.
# - How many atomic additions per element does one program make: one per step of its loop, or one in all? Which is
#   cheaper, and does it change the result?
# %% solution id=linear_dw_atomic_kernel
@triton.jit
def linear_dw_atomic_kernel(
    X_ptr,  # (M, K) x
    DY_ptr,  # (M, N) ȳ
    DW_ptr,  # (K, N) w̄, zero before the launch; element (k, n) at DW_ptr + k·stride_dwk + n·stride_dwn
    M, N, K,
    rows_per_split,
    stride_xm, stride_xk,
    stride_dym, stride_dyn,
    stride_dwk, stride_dwn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Grid (cdiv(K, BLOCK_K), cdiv(N, BLOCK_N), SPLIT): program (i, j, s) adds the sum over split s's rows of
    xᵀȳ into the BLOCK_K × BLOCK_N tile of w̄ at rows i·BLOCK_K…, columns j·BLOCK_N…"""
    ks = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    acc_dtype = tl.float64 if X_ptr.dtype.element_ty == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    start = split * rows_per_split
    end = tl.minimum(start + rows_per_split, M)
    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=acc_dtype)
    for m0 in range(0, rows_per_split, BLOCK_M):
        ms = start + m0 + tl.arange(0, BLOCK_M)
        xt = tl.load(X_ptr + ms[None, :] * stride_xm + ks[:, None] * stride_xk,
                     mask=(ms[None, :] < end) & (ks[:, None] < K), other=0.0)
        dy = tl.load(DY_ptr + ms[:, None] * stride_dym + ns[None, :] * stride_dyn,
                     mask=(ms[:, None] < end) & (ns[None, :] < N), other=0.0)
        acc += tl.dot(xt, dy).to(acc_dtype)
    # Atomic: the SPLIT programs of this tile add into the same elements, in whatever order they finish.
    tl.atomic_add(DW_ptr + ks[:, None] * stride_dwk + ns[None, :] * stride_dwn, acc,
                  mask=(ks[:, None] < K) & (ns[None, :] < N))
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which program does what, and its masks</summary>
#
# Everything up to the end of the loop is Part B's: the same rows, the same masks, the same partial tile. What
# changes is where it goes. Every program of tile $(i, j)$ writes the same elements of $\bar W$ — so which kind of
# write lets them all count, and which mask keeps the lanes past $K$ or $N$ from adding into memory that is not
# $\bar W$'s? If the check says `race`, a plain `tl.store` (or a load, an add and a store) met another program's
# update of the same element: on a GPU one of the two sums is lost. If it says `out-of-bounds`, the atomic's mask
# let a lane past $K$ or $N$ through.
#
# </details>
#
# <details><summary>Hint 2 — the operands' layout, and the accumulator's dtype</summary>
#
# The tiles and the product are Part B's: a `(BLOCK_K, BLOCK_M)` tile of $x^\top$, read from $x$ through its strides,
# times a `(BLOCK_M, BLOCK_N)` tile of $\bar y$ (a `transpose` from the check means the layout of one of them).
# The accumulator is a block of `acc_dtype` zeros; $\bar W$ is allocated in the same dtype, so the atomic adds a
# float32 partial into a float32 total for float16 inputs. A `half-accumulation` means a sum was kept narrower.
# $\bar W$'s element $(k, n)$ is at `DW_ptr + k·stride_dwk + n·stride_dwn`: a `(BLOCK_K, BLOCK_N)` block of pointers,
# like the partial it receives.
#
# </details>
#
# <details><summary>Hint 3 — the loop, and one atomic after it</summary>
#
# ```python
# ...  # Part B's start, end, zeroed acc and loop over the split's rows, unchanged
# ...  # after the loop: one atomic add of acc into tile (i, j) of w̄, masked on ks and ns
# ```
#
# A `batch-reduction` from the check means $\bar W$ is not the sum over every row exactly once — every split
# summing the first split's rows, say; a failure that names a split's end means its rows were read past it (counted
# twice). With $M = 100$ and 64 rows per split, list the rows each of the two programs of
# a tile adds.
#
# </details>
# %% test id=test_linear_dw_atomic_kernel points=2
"""linear_dw_atomic_kernel: w̄ added into a zeroed, strided, sentinel-padded
buffer, one split then several; a plain store between the splits is a race;
a square w̄ shows a transposed placement."""
course.selfcheck.linear_dw_atomic_kernel(linear_dw_atomic_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_dw_atomic_kernel(linear_dw_atomic_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Part B's kernel up to the end of its loop, then a single atomic addition per element in place of the store:
#
# $$\boxed{\;\bar W[i, j] \mathrel{+}= P_s[i, j] \quad \text{atomically, by each of the SPLIT programs } (i, j, s)\;}$$
#
# — in code, one `tl.atomic_add` of `acc` at `DW_ptr + ks[:, None] * stride_dwk + ns[None, :] * stride_dwn`, under the
# tile's mask on `ks < K` and `ns < N`.
# One atomic per element per program, after the loop, not one per step: the loop's steps add in registers for free,
# and the atomics, the only additions that other programs can interleave with, are `SPLIT` per element of $\bar W$.
#
# </details>
# %% [markdown]
# ## 4 · Same inputs, different bits
#
# On a GPU the programs of a launch run in an order nobody chooses. Triton's interpreter runs them one after
# another, in grid order, so on a CPU every run is the same run. `course.shuffled_programs(seed)` changes that: every
# interpreted launch inside `with course.shuffled_programs(seed):` runs its programs in an order drawn from
# `random.Random(seed)`, so eight seeds are eight schedules a GPU could have picked.
#
# The cell below computes $\bar W$ both ways, in float32, once per schedule, and compares each result with the first
# bit by bit. The rows of $x$ span six decades of magnitude, so the partial sums of the four splits differ in size
# and their roundings show. The difference is counted in *ULPs*, units in the last place: how many float32 numbers
# lie between two results.
# %%
ORDERS = 8  # program schedules tried for each kernel
gen = torch.Generator().manual_seed(12)
x = torch.randn(256, 32, generator=gen) * 10.0 ** torch.empty(256, 1).uniform_(-3, 3, generator=gen)  # (M, K)
dy = torch.randn(256, 32, generator=gen)  # (M, N); 256 rows: 4 splits of 64, so 4 programs meet in every element
x, dy = x.to(DEVICE), dy.to(DEVICE)


def ordered(values):
    """float32 values as int64s in the same order, consecutive floats consecutive ints: a difference counts ULPs."""
    bits = values.view(torch.int32).to(torch.int64)
    return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def in_every_order(compute):
    """(ORDERS, K, N): `compute()` once per schedule (on a GPU, once per run: the GPU picks the order itself)."""
    runs = []
    for seed in range(ORDERS):
        with course.shuffled_programs(seed):  # on a GPU it changes nothing: the GPU picks the order
            runs.append(compute().cpu())
    return torch.stack(runs)


try:
    runs = {"atomic": in_every_order(lambda: launch_dw_atomic(x, dy)),
            "split-K": in_every_order(lambda: launch_dw_partials(x, dy)[0].sum(dim=0))}
    exact = (x.double().T @ dy.double()).cpu()
    spread = {}
    for name, dw in runs.items():
        ulps = (ordered(dw) - ordered(dw[0])).abs()  # each schedule against the first
        spread[name] = ulps.max(dim=0).values  # (K, N): the largest difference over the schedules
        differing = [int((u > 0).sum()) for u in ulps[1:]]
        error = ((dw[0].double() - exact).norm() / exact.norm()).item()
        print(f"{name:8} elements that differ from schedule 0, per schedule: {differing}; "
              f"most ULPs apart: {int(ulps.max())}; error of schedule 0 against float64: {error:.1e}")

    bins = [(0, 0, "0"), (1, 1, "1"), (2, 2, "2"), (3, 4, "3–4"), (5, 16, "5–16"), (17, 64, "17–64"),
            (65, 2**31, "> 64")]  # (least, most, label) ULPs
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    at = np.arange(len(bins))
    for shift, (name, ulps) in zip((-0.2, 0.2), spread.items()):
        counts = [int(((ulps >= lo) & (ulps <= hi)).sum()) for lo, hi, _ in bins]
        ax.bar(at + shift, counts, width=0.4, label=name)
    ax.set_xticks(at, [label for _, _, label in bins])
    ax.set(xlabel=f"most ULPs apart over {ORDERS} schedules", ylabel="elements of W̄",
           title="W̄ = xᵀȳ in float32, computed in 8 program orders")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Parts B and C first: this cell runs both kernels.")

# %% [markdown]
# The atomic $\bar W$ changes from schedule to schedule in most of its elements, mostly by a few ULPs and by far more
# where the four partials nearly cancel and the sum is small; the split-K $\bar W$ is the same number to the last
# bit every time. Neither is more accurate — both are within float32's rounding of the
# float64 sum, as notebook 08's bounds say: they are two roundings of one sum, added in different orders. The split-K
# result is pinned because every element's partials are added in one fixed order, by the second pass, whatever order
# their programs ran in.
#
# **When each is right.**
#
# - **Reproducibility.** Debugging a loss spike, bisecting a regression, or checking that a refactor changed nothing
#   needs two runs that agree bit for bit, and training does not forgive a last-bit difference: each step starts
#   from the weights the last one left, so two runs that differ in one ULP drift further apart step after step.
#   `torch.use_deterministic_algorithms(True)` makes PyTorch raise on every CUDA op whose only kernel is
#   nondeterministic — most are scatters and index-adds built on atomics — and, for cuBLAS, raises unless
#   `CUBLAS_WORKSPACE_CONFIG=:4096:8` (or `:16:8`) pins its workspace. A split-K backward passes that bar; an
#   atomic one cannot.
# - **Deterministic is not portable.** Split-K's bits are fixed for a fixed `SPLIT` and block size. A library that
#   picks `SPLIT` per GPU (§3) gives a different, equally correct, rounding on each: reproducible on one machine, not
#   across them.
# - **Atomics' speed.** No partial buffer, no second launch, no bytes for the partials: when memory is short, or the
#   "buffer" would be as large as the output times the number of writers — an embedding table's gradient, the
#   scatter of notebook 06 — atomics are the practical choice, and most frameworks' defaults use them there.
# - **The dtype of the atomic.** Weights kept in bfloat16 still get a float32 $\bar W$ from an atomic backward: the
#   atomics add into a float32 buffer, converted once at the end. A bfloat16 atomic would round the running total at
#   every addition, and the last programs' partials would vanish in it (notebook 08, §2).
# %% [markdown]
# ## Part D — TritonLinear (2 points)
#
# **The bias rides along.** From notebook 01, $\bar b = \sum_m \bar y_{m,:}$: a sum over the rows, the same axis as
# $\bar W$'s. So it needs no kernel of its own. The programs of Part B's kernel already load every row of $\bar y$,
# split by split, a column block at a time; with `HAS_BIAS` they also add up those rows, and the split's column sums
# go to `PB[s]` — partials of $\bar b$, summed by the same second pass as $\bar W$'s. No extra read of $\bar y$.
#
# But every program $(i, j, s)$ with the same $j$ and $s$ loads the same tile of $\bar y$ — there are
# $\lceil K / \text{BLOCK\_K} \rceil$ of them — and computes the same column sums. The contract: only the programs
# whose `tl.program_id(0)` is 0 store them. **Question:** they would all store the same numbers, so why forbid the
# others? Run the sanitizer in your head: what does it report if every program stores `PB`, and what could it not
# know? On a GPU, what do the extra stores cost, and what does the memory model promise about two plain stores to
# one address from two programs?
#
# **The function.** Write `TritonLinear`, an autograd.Function for $y = xW + b$, with $x$ of shape $(\dots, K)$ —
# any number of leading axes, each a batch axis (notebook 01, §3) — $W$ $(K, N)$ and $b$ $(N,)$:
#
# - **forward(ctx, x, w, b)** computes $xW$ with `linear_dx_kernel`, through `launch_dx`, and adds $b$. Which two
#   arguments make `launch_dx(dy, w)`, built for $\bar y\, W^\top$, compute $xW$ instead — and does either need a
#   copy? Save what the backward needs, and only that.
# - **backward(ctx, dy)** returns $(\bar x, \bar W, \bar b)$: $\bar x$ by `launch_dx`, $\bar W$ and $\bar b$ by
#   `launch_dw_partials(..., bias=True)` and a second pass over the partials in a fixed order. Each in its
#   input's shape and dtype.
# - $\bar y$ arrives from autograd in whatever layout the next op produced; the leading axes of $x$ and $\bar y$ are
#   rows of the GEMMs.
# %% solution id=TritonLinear
class TritonLinear(torch.autograd.Function):
    """y = x @ w + b for x (..., K), w (K, N), b (N,): the forward and both backward GEMMs by the kernels above.

    forward(ctx, x, w, b): y (..., N) by linear_dx_kernel; save what the backward needs.
    backward(ctx, dy): (dx, dw, db) — dx by linear_dx_kernel, dw and db by linear_dw_splitk_kernel's partials and a
    second pass that sums them in a fixed order.
    """

    @staticmethod
    def forward(ctx, x, w, b):
        ### BEGIN SOLUTION
        K, N = w.shape
        x2 = x.reshape(-1, K)  # (M, K): every leading dimension is a row of the GEMM
        y = launch_dx(x2, w.t())  # y = x w is x̄'s GEMM with ȳ → x and w → wᵀ: the same kernel, other strides
        ctx.save_for_backward(x, w)
        return (y + b).reshape(*x.shape[:-1], N)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, dy):
        ### BEGIN SOLUTION
        x, w = ctx.saved_tensors
        K, N = w.shape
        x2 = x.reshape(-1, K)
        dy2 = dy.reshape(-1, N)  # reshape copies a ȳ whose layout does not allow a view
        dx = launch_dx(dy2, w)  # (M, K)
        pw, pb = launch_dw_partials(x2, dy2, rows_per_split=ROWS_PER_SPLIT, bias=True)  # (SPLIT, K, N), (SPLIT, N)
        dw = pw.sum(0).to(w.dtype)  # the second pass: every element's partials summed in one fixed order
        db = pb.sum(0).to(w.dtype)
        return dx.reshape(x.shape), dw, db
        ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — the forward, and what to save</summary>
#
# `launch_dx(dy, w)` computes $A\,B^\top$ for $A$ of shape $(M, N)$ and $B$ of shape $(K, N)$, through their
# strides. $xW$ is $x\,(W^\top)^\top$: which tensor plays $A$, which plays $B$, and what are their shapes? A
# transposed view has the same storage and swapped strides — does the kernel care? Then the backward: $\bar x$
# needs $W$, $\bar W$ needs $x$, $\bar b$ needs neither. Does it need $y$? Save with `ctx.save_for_backward`, so
# autograd can tell if a saved tensor was changed in place before the backward.
#
# </details>
#
# <details><summary>Hint 2 — the backward, and the second pass</summary>
#
# Three products: $\bar x = \bar y\,W^\top$ is exactly what `launch_dx` was built for. $\bar W$ and $\bar b$ come
# from one `launch_dw_partials` launch with `bias=True`, as two buffers of partials: `(SPLIT, K, N)` and
# `(SPLIT, N)`. What must the second pass do to them, along which axis, and in which dtype should the results be
# returned? A check that says `batch-reduction` found a $\bar W$ or $\bar b$ that is not the sum over every row: one
# split's partial alone, or the partials reduced along the wrong axis. Why must the second pass be in a fixed order
# to keep the whole backward deterministic? A failure that names Part A or Part B is in that kernel, met here: its
# own hints cover it. And the backward is written by hand: autograd inside it is refused.
#
# </details>
#
# <details><summary>Hint 3 — shapes and layouts</summary>
#
# Take $x$ of shape $(2, 3, K)$: how many rows does each GEMM see, and what shape must $\bar x$ have when it is
# returned? The kernels take 2-D matrices: flatten the leading axes into rows on the way in and restore them on
# the way out — in the forward for $y$ $(\dots, N)$, in the backward for $\bar x$. $\bar y$ can come from autograd
# as a non-contiguous view (a transpose, an expand): which of `view` and `reshape` works on any layout? And the
# launchers allocate in which dtype?
#
# </details>
# %% test id=test_TritonLinear points=2
"""TritonLinear: y = xw + b for 2-D and 3-D x, float32 and float64; x̄, w̄, b̄
for a contiguous and a transposed ȳ; saves x and w only; the kernels it
launches checked first; more than ROWS_PER_SPLIT rows after fewer (w̄ from one
split only is batch-reduction); a float64 gradcheck."""
course.selfcheck.TritonLinear(TritonLinear)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.TritonLinear(TritonLinear)
### END HIDDEN TESTS
# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The forward is Part A's GEMM with other strides.** `launch_dx(dy, w)` computes $A B^\top$; with $A = x$ and
# $B = W^\top$ it computes $x W$: `y = launch_dx(x2, w.t())`, where `x2 = x.reshape(-1, K)` makes every leading axis
# a row and `w.t()` is a view — strides `(1, N)` — that the kernel reads in place. One kernel, three GEMMs, no copy.
# The backward needs $x$ and $W$, never $y$: those two go to `ctx.save_for_backward`, and nothing else.
#
# **The backward** flattens $\bar y$ with `reshape` (a copy only when its layout forbids a view), computes
# $\bar x$ with `launch_dx(dy2, w)`, and $\bar W$ and $\bar b$ with one `launch_dw_partials(x2, dy2, bias=True)`,
# then the second pass over the partials:
#
# $$\boxed{\;\bar W = \sum_{s} P_s, \qquad \bar b = \sum_{s} \textstyle\sum_{m \in \text{split } s} \bar y_{m,:}\;}$$
#
# each a `.sum(0)` over the split axis, in one fixed order, converted to $W$'s dtype; $\bar x$ goes back in $x$'s
# shape.
#
# **The bias branch** of Part B's kernel adds `tl.sum(dy.to(acc_dtype), axis=0)` into a `(BLOCK_N,)` running sum at
# every step, and stores it only in the programs whose `tl.program_id(0)` is 0. The others computed the same sums and throw them
# away. Why one writer: two plain stores from two programs to one address are a race by definition — the GPU's
# memory model promises nothing about which one lands, or when, and the sanitizer cannot tell equal values from
# unequal ones, so it reports the address. The $\lceil K/\text{BLOCK\_K} \rceil - 1$ extra stores would also cost
# bandwidth for nothing, and the day two programs' sums differ in a bit — a different block size, a different
# instruction order — the result would depend on the schedule again.
#
# </details>
#
# Your `TritonLinear` against PyTorch's own autograd, on $x$ of shape $(2, 37, 24)$ — 74 rows, two splits, partial
# tiles everywhere — and the backward's partial launch under the sanitizer. The picture is `PB`, the partials of
# $\bar b$: one writer per element, the programs $(0, j, s)$.
# %%
try:
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(2, 37, 24, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)  # (..., K)
    w = torch.randn(24, 20, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)  # (K, N)
    b = torch.randn(20, generator=gen, dtype=F64).to(DEVICE).requires_grad_(True)  # (N,)
    dy = torch.randn(2, 37, 20, generator=gen, dtype=F64).to(DEVICE)  # (..., N)
    with course.sanitize() as report:
        y = TritonLinear.apply(x, w, b)
        mine = torch.autograd.grad(y, (x, w, b), dy)
    ref_y = x @ w + b
    ref = torch.autograd.grad(ref_y, (x, w, b), dy)
    print("y:", torch.allclose(y, ref_y), " x̄, W̄, b̄:", [torch.allclose(g, r) for g, r in zip(mine, ref)])
    show(report, "PB_ptr")
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Parts A, B and D first: this cell runs your TritonLinear.")

# %% [markdown]
# ## What to take away
#
# - A linear layer's backward is two GEMMs as large as its forward. $\bar x = \bar y\,W^\top$ sums over $N$, inside
#   one program's loop: the batch gives the parallelism, and the kernel is the forward's with other strides — a
#   transpose is a stride, never a copy.
# - $\bar W = x^\top \bar y$ (and $\bar b$ with it) sums over the batch, across programs. A GPU needs the rows split
#   to have enough programs: `SPLIT` trades idle SMs (too few waves, a part-empty last one) against the bytes of the
#   partials, and the right value depends on the GPU — 8 or so for a 65,536 × 1,024 × 1,024 layer on A100 and H100.
# - Partials meet in memory. Split-K writes them to a buffer and sums it in a fixed order: deterministic, at the cost
#   of `SPLIT` float32 copies of $\bar W$ and a second pass. Atomics add them in place: no buffer, no second pass, and
#   a result whose last bits depend on the schedule. Float32 accumulators either way, whatever the weights' dtype.
# - One writer per element for every plain store — even of equal values. Sums that many programs compute alike
#   (the bias's) are stored by one of them; the sanitizer names any other arrangement a race.
# - Bit-for-bit reproducibility is a property of the reduction order, and a fixed order is a design choice you make
#   in the kernel: `torch.use_deterministic_algorithms` can only refuse the kernels that did not make it.

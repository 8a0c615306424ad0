# %% [markdown]
# # 09 · The matmul backward in Triton
#
# (Skeleton: the story, hints, recaps and pictures are being written.)
#
# | part | you write | points |
# |---|---|---|
# | A | `linear_dx_kernel` — `@triton.jit`, x̄ = ȳwᵀ, one BLOCK_M × BLOCK_K tile of x̄ per program, a loop over N | 3 |
# | B | `linear_dw_splitk_kernel` — `@triton.jit`, one tile of w̄ over one split of the rows into a partial buffer | 3 |
# | C | `linear_dw_atomic_kernel` — `@triton.jit`, the same tile added into w̄ with `tl.atomic_add` | 2 |
# | D | `TritonLinear` — the forward and the three backward products wired into an autograd.Function, b̄ from Part B's kernel | 2 |
# %%
import course

# %%
import torch

import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernels in Triton's interpreter
BLOCK = 16  # every tile side in this notebook's launches: the interpreter's tl.dot needs 16 or more
ROWS_PER_SPLIT = 64  # rows of x per split of w̄'s reduction at this notebook's small shapes (Part B asks what a GPU wants)


def cdiv(a, b):
    return (a + b - 1) // b


def launch_dx(dy, w, block=BLOCK):
    """Given: x̄ = ȳ wᵀ for ȳ (M, N) and w (K, N), any strides, by linear_dx_kernel; x̄ (M, K) in ȳ's dtype."""
    (M, N), K = dy.shape, w.shape[0]
    dx = torch.empty(M, K, dtype=dy.dtype, device=dy.device)
    linear_dx_kernel[(cdiv(M, block), cdiv(K, block))](
        dy, w, dx, M, N, K, dy.stride(0), dy.stride(1), w.stride(0), w.stride(1), dx.stride(0), dx.stride(1),
        BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
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
    linear_dw_splitk_kernel[(cdiv(K, block), cdiv(N, block), split)](
        x, dy, pw, pb, M, N, K, rows_per_split, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
        HAS_BIAS=bias, BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
    return pw, pb


def launch_dw_atomic(x, dy, rows_per_split=ROWS_PER_SPLIT, block=BLOCK):
    """Given: w̄ (K, N) by linear_dw_atomic_kernel, added into a zeroed accumulator, in x's dtype."""
    (M, K), N = x.shape, dy.shape[1]
    dw = torch.zeros(K, N, dtype=accumulator(x.dtype), device=x.device)
    linear_dw_atomic_kernel[(cdiv(K, block), cdiv(N, block), cdiv(M, rows_per_split))](
        x, dy, dw, M, N, K, rows_per_split, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
        dw.stride(0), dw.stride(1), BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
    return dw.to(x.dtype)

# %% [markdown]
# ## Part A — linear_dx_kernel (3 points)
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
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows of ȳ and x̄
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

# %% test id=test_linear_dx_kernel points=3
"""linear_dx_kernel: ..."""
course.selfcheck.linear_dx_kernel(linear_dx_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_dx_kernel(linear_dx_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part B — linear_dw_splitk_kernel (3 points)
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
    split = tl.program_id(2)
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

# %% test id=test_linear_dw_splitk_kernel points=3
"""linear_dw_splitk_kernel: ..."""
course.selfcheck.linear_dw_splitk_kernel(linear_dw_splitk_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_dw_splitk_kernel(linear_dw_splitk_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part C — linear_dw_atomic_kernel (2 points)
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

# %% test id=test_linear_dw_atomic_kernel points=2
"""linear_dw_atomic_kernel: ..."""
course.selfcheck.linear_dw_atomic_kernel(linear_dw_atomic_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_dw_atomic_kernel(linear_dw_atomic_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part D — TritonLinear (2 points)
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
        x2, dy2 = x.reshape(-1, K), dy.reshape(-1, N)  # reshape copies a ȳ whose layout does not allow a view
        dx = launch_dx(dy2, w)  # (M, K)
        pw, pb = launch_dw_partials(x2, dy2, rows_per_split=ROWS_PER_SPLIT, bias=True)  # (SPLIT, K, N), (SPLIT, N)
        dw = pw.sum(0).to(w.dtype)  # the second pass: every element's partials summed in one fixed order
        db = pb.sum(0).to(w.dtype)
        return dx.reshape(x.shape), dw, db
        ### END SOLUTION

# %% test id=test_TritonLinear points=2
"""TritonLinear: ..."""
course.selfcheck.TritonLinear(TritonLinear)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.TritonLinear(TritonLinear)
### END HIDDEN TESTS

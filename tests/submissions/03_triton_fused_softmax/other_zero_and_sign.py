# Mutant: the forward's masked load fills the tail with 0 (so exp(0 − m) joins the sum); the backward has its subtraction backwards.
# expect: test_softmax_fwd_kernel wrong-values
# expect: test_softmax_bwd_kernel sign
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax wrong-values
# %% softmax_fwd_kernel
import triton
import triton.language as tl


@triton.jit
def softmax_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) input x
    Y_ptr,  # (n_rows, n_cols) output y
    x_row_stride,
    y_row_stride,
    n_cols,
    BLOCK: tl.constexpr,
):
    """y = e / ℓ, one row per program."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=0.0)  # the bug: 0 is not harmless here
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    ell = tl.sum(e, axis=0)
    tl.store(Y_ptr + row * y_row_stride + cols, e / ell, mask=mask)
# %% softmax_bwd_kernel
@triton.jit
def softmax_bwd_kernel(
    DY_ptr,  # (n_rows, n_cols) upstream gradient ȳ
    Y_ptr,  # (n_rows, n_cols) forward output y
    DX_ptr,  # (n_rows, n_cols) result x̄
    dy_row_stride,
    y_row_stride,
    dx_row_stride,
    n_cols,
    BLOCK: tl.constexpr,
):
    """x̄ = y ⊙ (ȳ − s), one row per program."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(DY_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)
    y = tl.load(Y_ptr + row * y_row_stride + cols, mask=mask, other=0.0)
    s = tl.sum(y * dy, axis=0)
    tl.store(DX_ptr + row * dx_row_stride + cols, y * (s - dy), mask=mask)  # the bug: s − ȳ

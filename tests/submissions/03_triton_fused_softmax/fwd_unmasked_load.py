# Mutant: the forward kernel loads the whole block without a mask, so it reads past the end of each row.
# expect: test_softmax_fwd_kernel non-finite
# expect: test_TritonSoftmax non-finite
# expect: test_triton_softmax non-finite
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
    x = tl.load(X_ptr + row * x_row_stride + cols)  # the bug: no mask, so lanes ≥ n_cols read whatever follows
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    ell = tl.sum(e, axis=0)
    tl.store(Y_ptr + row * y_row_stride + cols, e / ell, mask=cols < n_cols)

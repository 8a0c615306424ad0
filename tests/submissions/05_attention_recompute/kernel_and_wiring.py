# Mutant: a D kernel without its column mask, and two user functions that bypass their Functions.
# expect: test_manual_attention wrong-values
# expect: test_recompute_attention wrong-values
# expect: test_attention_delta_kernel non-finite
# %% manual_attention
def manual_attention(q, k, v):
    """PyTorch's own attention: right values, but autograd never runs ManualAttention's backward."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
# %% recompute_attention
def recompute_attention(q, k, v):
    """Routes through manual_attention: right values, and P saved after all."""
    return manual_attention(q, k, v)
# %% attention_delta_kernel
import triton
import triton.language as tl


@triton.jit
def attention_delta_kernel(
    O_ptr,
    DO_ptr,
    Delta_ptr,
    o_row_stride,
    do_row_stride,
    n_rows,
    head_dim,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Masks the rows only: lanes head_dim…BLOCK_D − 1 of every row read whatever lies after it."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_rows
    o = tl.load(O_ptr + rows[:, None] * o_row_stride + cols[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(DO_ptr + rows[:, None] * do_row_stride + cols[None, :], mask=row_ok[:, None], other=0.0)
    tl.store(Delta_ptr + rows, tl.sum(o * do, axis=1), mask=row_ok)

# Mutant: a kernel that reads, adds and stores (a race on a GPU, invisible on a CPU), and dropout's mask read backwards.
# expect: test_scatter_add_kernel non-atomic-scatter
# expect: test_dropout_backward wrong-values
# %% scatter_add_kernel
import triton
import triton.language as tl


@triton.jit
def scatter_add_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    """out += row as load, add, store: two programs sharing a destination can interleave."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    dest = tl.load(INDEX_ptr + i)
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)
    out = tl.load(OUT_ptr + dest * out_row_stride + cols, mask=mask, other=0.0)
    tl.store(OUT_ptr + dest * out_row_stride + cols, out + row, mask=mask)
# %% dropout_backward
def dropout_backward(dy, mask, p):
    """Takes True in the mask for "dropped": the gradient flows exactly where it must not."""
    return dy * ~mask / (1 - p)

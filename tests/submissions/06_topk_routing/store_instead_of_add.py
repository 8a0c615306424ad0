# Mutant: every scatter stores where it must add — right until two contributions land on one slot.
# expect: test_topk_backward non-atomic-scatter
# expect: test_embedding_backward non-atomic-scatter
# expect: test_maxpool1d_backward non-atomic-scatter
# expect: test_scatter_add_kernel non-atomic-scatter
# %% topk_backward
def topk_backward(dy, indices, n):
    """scatter_ stores: a repeated index keeps one ȳ."""
    dx = dy.new_zeros(*dy.shape[:-1], n)
    dx.scatter_(-1, indices, dy)
    return dx
# %% embedding_backward
def embedding_backward(dy, ids, num_embeddings):
    """dW[ids] = dy: a token read twice keeps the gradient of its last occurrence."""
    D = dy.shape[-1]
    dW = dy.new_zeros(num_embeddings, D)
    dW[ids] = dy
    return dW
# %% maxpool1d_backward
def maxpool1d_backward(dy, x, kernel_size, stride):
    """Right positions, but stored: a max shared by overlapping windows gets one window's gradient."""
    L_out = dy.shape[-1]
    a = x.unfold(-1, kernel_size, stride).argmax(dim=-1) + stride * torch.arange(L_out)
    return torch.zeros_like(x).scatter(-1, a, dy)
# %% scatter_add_kernel
import triton
import triton.language as tl


@triton.jit
def scatter_add_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    """tl.store instead of tl.atomic_add: the last program to write a row wins."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    dest = tl.load(INDEX_ptr + i)
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)
    tl.store(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)

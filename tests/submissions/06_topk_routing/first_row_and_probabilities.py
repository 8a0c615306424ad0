# Mutant: the embedding gradient of the first sequence only, the router's gradient stopped at p, a kernel that adds one column block.
# expect: test_embedding_backward batch-reduction
# expect: test_moe_gate_backward wrong-values
# expect: test_scatter_add_kernel wrong-values
# %% embedding_backward
def embedding_backward(dy, ids, num_embeddings):
    """Only ids[0] and dy[0]: right at batch 1, the other sequences never contribute."""
    D = dy.shape[-1]
    dW = dy.new_zeros(num_embeddings, D)
    dW.index_add_(0, ids[0].reshape(-1), dy[0].reshape(-1, D))
    return dW
# %% moe_gate_backward
def moe_gate_backward(dy, logits, indices, expert_out):
    """Returns p̄ as the logits' gradient: the softmax's own backward is skipped."""
    p = torch.softmax(logits, dim=-1)
    g = p.gather(-1, indices)
    dexpert_out = g[..., :, None] * dy[..., None, :]
    dg = (expert_out * dy[..., None, :]).sum(dim=-1)
    dp = torch.zeros_like(p).scatter_add_(-1, indices, dg)
    return dp, dexpert_out
# %% scatter_add_kernel
import triton
import triton.language as tl


@triton.jit
def scatter_add_kernel(SRC_ptr, INDEX_ptr, OUT_ptr, src_row_stride, out_row_stride, n_cols, BLOCK_D: tl.constexpr):
    """Columns 0 … BLOCK_D − 1 in every program: program_id(1) is never used."""
    i = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    dest = tl.load(INDEX_ptr + i)
    row = tl.load(SRC_ptr + i * src_row_stride + cols, mask=mask, other=0.0)
    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)

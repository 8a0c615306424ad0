# Mutant: K̄ built from S̄ instead of S̄ᵀ, the softmax step negated in the blockwise backward, and D read with head_dim as the row stride.
# expect: test_ManualAttention transpose
# expect: test_manual_attention transpose
# expect: test_attention_backward_recompute sign
# expect: test_RecomputeAttention sign
# expect: test_recompute_attention sign
# expect: test_attention_delta_kernel wrong-values
# %% ManualAttention
class ManualAttention(torch.autograd.Function):
    """dk = c·S̄Q: the roles of Q and K swapped (shapes agree, since S̄ is square)."""

    @staticmethod
    def forward(ctx, q, k, v):
        P = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(q, k, v, P)
        return P @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, P = ctx.saved_tensors
        c = 1 / math.sqrt(q.shape[-1])
        dP = do @ v.mT
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
        return c * (dS @ k), c * (dS @ q), P.mT @ do
# %% attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """S̄ = P ⊙ (D − P̄): the softmax VJP with its sign turned around, so dq and dk are negated."""
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    D = (do * o).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    for j in range(0, T, BLOCK_K):
        kj, vj = k[:, j:j + BLOCK_K], v[:, j:j + BLOCK_K]
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for i in range(0, T, BLOCK_Q):
            qi, doi = q[:, i:i + BLOCK_Q], do[:, i:i + BLOCK_Q]
            P = torch.exp(c * (qi @ kj.mT) - lse[:, i:i + BLOCK_Q, None])
            dvj += P.mT @ doi
            dS = P * (D[:, i:i + BLOCK_Q, None] - doi @ vj.mT)
            dq[:, i:i + BLOCK_Q] += c * (dS @ kj)
            dkj += c * (dS.mT @ qi)
        dk[:, j:j + BLOCK_K], dv[:, j:j + BLOCK_K] = dkj, dvj
    return dq, dk, dv
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
    """Assumes rows are head_dim apart: right only when the rows are packed."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < head_dim)
    o = tl.load(O_ptr + rows[:, None] * head_dim + cols[None, :], mask=mask, other=0.0)
    do = tl.load(DO_ptr + rows[:, None] * head_dim + cols[None, :], mask=mask, other=0.0)
    tl.store(Delta_ptr + rows, tl.sum(o * do, axis=1), mask=rows < n_rows)

# Mutant: the softmax's row sum lost its keepdim in the manual backward, and the D term left out of the blockwise one.
# expect: test_ManualAttention broadcast-axis
# expect: test_manual_attention broadcast-axis
# expect: test_attention_backward_recompute wrong-values
# expect: test_RecomputeAttention wrong-values
# expect: test_recompute_attention wrong-values
# %% ManualAttention
class ManualAttention(torch.autograd.Function):
    """rowsum(P̄ ⊙ P) without keepdim: a (B, T) vector broadcast along the columns instead of down the rows."""

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
        dS = P * (dP - (dP * P).sum(dim=-1))
        return c * (dS @ k), c * (dS.mT @ q), P.mT @ do
# %% attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """S̄ = P ⊙ P̄: the softmax's row scalar D is never subtracted."""
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    for j in range(0, T, BLOCK_K):
        kj, vj = k[:, j:j + BLOCK_K], v[:, j:j + BLOCK_K]
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for i in range(0, T, BLOCK_Q):
            qi, doi = q[:, i:i + BLOCK_Q], do[:, i:i + BLOCK_Q]
            P = torch.exp(c * (qi @ kj.mT) - lse[:, i:i + BLOCK_Q, None])
            dvj += P.mT @ doi
            dS = P * (doi @ vj.mT)
            dq[:, i:i + BLOCK_Q] += c * (dS @ kj)
            dkj += c * (dS.mT @ qi)
        dk[:, j:j + BLOCK_K], dv[:, j:j + BLOCK_K] = dkj, dvj
    return dq, dk, dv

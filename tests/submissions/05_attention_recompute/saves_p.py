# Mutant: the T×T matrix comes back — built whole in the forward, rebuilt whole in the backward, and saved by the Function.
# expect: test_attention_forward_lse saved-quadratic-tensor
# expect: test_attention_backward_recompute saved-quadratic-tensor
# expect: test_RecomputeAttention saved-quadratic-tensor
# expect: test_recompute_attention saved-quadratic-tensor
# %% attention_forward_lse
BLOCK_Q = 64
BLOCK_K = 64


def attention_forward_lse(q, k, v):
    """Right values, from the whole (B, T, T) score matrix at once."""
    S = q @ k.mT / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(S, dim=-1)
    return torch.exp(S - lse[..., None]) @ v, lse
# %% attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """Rebuilds P from lse — all of it at once, (B, T, T), and dP and dS with it."""
    c = 1 / math.sqrt(q.shape[-1])
    P = torch.exp(c * (q @ k.mT) - lse[..., None])
    dS = P * (do @ v.mT - (do * o).sum(dim=-1, keepdim=True))
    return c * (dS @ k), c * (dS.mT @ q), P.mT @ do
# %% RecomputeAttention
class RecomputeAttention(torch.autograd.Function):
    """Saves lse — and P as well, 'to save the backward some time'."""

    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        P = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]) - lse[..., None])
        ctx.save_for_backward(q, k, v, o, lse, P)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, P = ctx.saved_tensors
        c = 1 / math.sqrt(q.shape[-1])
        dS = P * (do @ v.mT - (do * o).sum(dim=-1, keepdim=True))
        return c * (dS @ k), c * (dS.mT @ q), P.mT @ do

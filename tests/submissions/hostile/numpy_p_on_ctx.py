# Hostile: RecomputeAttention's forward keeps the T×T P as a NumPy array inside a namespace on ctx, and
# the backward reads it back; every value right.
# assignment: 05_attention_recompute
# expect: test_RecomputeAttention zero saved-quadratic-tensor
# expect: test_recompute_attention zero saved-quadratic-tensor
# %% RecomputeAttention
import types


class RecomputeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        S = (q @ k.mT) / math.sqrt(q.shape[-1])
        ctx.box = types.SimpleNamespace(P=torch.exp(S - lse[..., None]).detach().numpy())  # (B, T, T), in NumPy
        ctx.save_for_backward(q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o = ctx.saved_tensors
        P = torch.from_numpy(ctx.box.P)
        c = 1 / math.sqrt(q.shape[-1])
        dP = do @ v.mT
        dS = P * (dP - (do * o).sum(dim=-1, keepdim=True))
        return c * dS @ k, c * dS.mT @ q, P.mT @ do

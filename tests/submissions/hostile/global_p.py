# Hostile: RecomputeAttention's forward keeps the T×T P in a global dict instead of on ctx, built with the dispatch
# modes off; the backward reads it back and uses the formulas; every value right. What the forward still holds
# when it returns is measured where it ran.
# assignment: 05_attention_recompute
# expect: test_RecomputeAttention zero saved-quadratic-tensor
# expect: test_recompute_attention zero saved-quadratic-tensor
# %% RecomputeAttention
from torch.utils._python_dispatch import _disable_current_modes

_KEPT = {}


class RecomputeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        with _disable_current_modes():
            P = torch.exp((q @ k.mT) / math.sqrt(q.shape[-1]) - lse[..., None])  # (B, T, T)
        ctx.key = len(_KEPT)
        _KEPT[ctx.key] = P
        ctx.save_for_backward(q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o = ctx.saved_tensors
        P = _KEPT[ctx.key]
        c = 1 / math.sqrt(q.shape[-1])
        dS = P * (do @ v.mT - (do * o).sum(dim=-1, keepdim=True))
        return c * dS @ k, c * dS.mT @ q, P.mT @ do

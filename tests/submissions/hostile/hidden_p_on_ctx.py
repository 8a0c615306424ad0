# Hostile: RecomputeAttention's forward builds P with the dispatch modes off and keeps it two levels down
# on ctx (a dict in a namespace), out of ctx.save_for_backward's sight; the backward uses it; values right.
# assignment: 05_attention_recompute
# expect: test_RecomputeAttention zero saved-quadratic-tensor
# expect: test_recompute_attention zero saved-quadratic-tensor
# %% RecomputeAttention
import types

from torch.utils._python_dispatch import _disable_current_modes


class RecomputeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        with _disable_current_modes():
            P = torch.exp((q @ k.mT) / math.sqrt(q.shape[-1]) - lse[..., None])  # (B, T, T)
        ctx.box = types.SimpleNamespace(inner={"P": P})
        ctx.save_for_backward(q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o = ctx.saved_tensors
        P = ctx.box.inner["P"]
        c = 1 / math.sqrt(q.shape[-1])
        dS = P * (do @ v.mT - (do * o).sum(dim=-1, keepdim=True))
        return c * dS @ k, c * dS.mT @ q, P.mT @ do

# Hostile: P built with the dispatch modes off and kept in a global dict, not on ctx at all, and the softmax
# backward left to torch's own kernel aten._softmax_backward_data, with the modes off again.
# assignment: 05_attention_recompute
# expect: test_RecomputeAttention zero autograd-in-backward
# expect: test_recompute_attention zero autograd-in-backward
# %% RecomputeAttention
from torch.utils._python_dispatch import _disable_current_modes

_KEPT = {}


class RecomputeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        with _disable_current_modes():
            P = torch.softmax((q @ k.mT) / math.sqrt(q.shape[-1]), dim=-1)  # (B, T, T)
        ctx.key = len(_KEPT)
        _KEPT[ctx.key] = P
        ctx.save_for_backward(q, k, v)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v = ctx.saved_tensors
        P = _KEPT[ctx.key]
        c = 1 / math.sqrt(q.shape[-1])
        with _disable_current_modes():  # every T×T tensor of the backward out of the dispatch modes' sight too
            dS = torch.ops.aten._softmax_backward_data(do @ v.mT, P, -1, P.dtype)
            return c * dS @ k, c * dS.mT @ q, P.mT @ do

# Hostile: all of S = q kᵀ written with out= into a buffer made in a cell before the call, softmax done in place
# there: no allocation inside the call is bigger than O(T·d), no tensor of scores is ever allocated; values right.
# assignment: 05_attention_recompute
# expect: test_attention_forward_lse zero saved-quadratic-tensor
# %% cell-after:test_manual_attention
import torch

SCORES = torch.empty(18_000_000, dtype=torch.float64)  # 144 MB, made before any call
SCORES.fill_(0.0)
# %% attention_forward_lse
BLOCK_Q = 64
BLOCK_K = 64


def attention_forward_lse(q, k, v):
    B, T, d = q.shape
    S = SCORES[: B * T * T].view(B, T, T)
    torch.matmul(q, k.mT, out=S)
    S.mul_(d ** -0.5)
    m = S.amax(dim=-1)
    S.sub_(m[..., None]).exp_()
    ell = S.sum(dim=-1)
    o = torch.matmul(S, v) / ell[..., None]
    return o, m + ell.log()

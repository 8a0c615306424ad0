# Mutant: the blockwise forward and backward work in strips — a block of queries against every key — not tiles.
# expect: test_attention_forward_lse saved-quadratic-tensor
# expect: test_attention_backward_recompute saved-quadratic-tensor
# %% attention_forward_lse
BLOCK_Q = 64
BLOCK_K = 64


def attention_forward_lse(q, k, v):
    """Right values from a (B, 64, T) strip of scores per query block, reduced by torch.logsumexp."""
    B, T, d = q.shape
    o, lse = torch.empty_like(q), q.new_empty(B, T)
    for i in range(0, T, BLOCK_Q):
        S = q[:, i:i + BLOCK_Q] @ k.mT / math.sqrt(d)  # (B, 64, T): a strip, not a tile
        lse[:, i:i + BLOCK_Q] = torch.logsumexp(S, dim=-1)
        o[:, i:i + BLOCK_Q] = torch.exp(S - lse[:, i:i + BLOCK_Q, None]) @ v
    return o, lse
# %% attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """Right values from query strips over all keys: every P, dP and dS is (B, 64, T)."""
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    D = (do * o).sum(dim=-1)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(0, T, BLOCK_Q):
        qi, doi = q[:, i:i + BLOCK_Q], do[:, i:i + BLOCK_Q]
        P = torch.exp(c * (qi @ k.mT) - lse[:, i:i + BLOCK_Q, None])
        dv += P.mT @ doi
        dS = P * (doi @ v.mT - D[:, i:i + BLOCK_Q, None])
        dq[:, i:i + BLOCK_Q] = c * (dS @ k)
        dk += c * (dS.mT @ qi)
    return dq, dk, dv

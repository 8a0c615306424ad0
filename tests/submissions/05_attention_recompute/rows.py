# Mutant: the blockwise forward and backward walk one query row at a time against every key — the forward with torch.logsumexp over the row, the backward taking D from the row of P̄ ⊙ P — right values, O(T) memory, no tiles.
# expect: test_attention_forward_lse untiled
# expect: test_attention_backward_recompute untiled
# %% attention_forward_lse attention_forward_lse
def attention_forward_lse(q, k, v):
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    o = torch.empty_like(q)
    lse = q.new_empty(B, T)
    for i in range(T):  # bug: one query against all T keys: a (B, 1, T) row of scores, not a tile
        S = c * (q[:, i:i + 1] @ k.mT)
        lse[:, i:i + 1] = torch.logsumexp(S, dim=-1)
        o[:, i:i + 1] = torch.exp(S - lse[:, i:i + 1, None]) @ v
    return o, lse
# %% attention_backward_recompute attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(T):  # bug: one query row against all T keys, and D from that row of P̄ ⊙ P
        P = torch.exp(c * (q[:, i:i + 1] @ k.mT) - lse[:, i:i + 1, None])
        dP = do[:, i:i + 1] @ v.mT
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
        dv += P.mT @ do[:, i:i + 1]
        dq[:, i:i + 1] = c * (dS @ k)
        dk += c * (dS.mT @ q[:, i:i + 1])
    return dq, dk, dv

# Hostile: every chunk's (block's) logits kept alive until the end, then reduced: each allocation is one
# step's worth, which the walk may hold, but all of them together are the T×V logits; values right.
# assignment: 07_fused_linear_cross_entropy
# expect: test_chunked_linear_ce zero materialized-logits
# expect: test_vocab_blocked_lse zero materialized-logits
# %% chunked_linear_ce
def chunked_linear_ce(h, W, target, chunk, ignore_index=-100):
    T = h.shape[0]
    starts = range(0, T, chunk)
    zs = [h[s:s + chunk] @ W.T for s in starts]  # every chunk's logits, all kept
    n = (target != ignore_index).sum()
    loss, dh, dW = h.new_zeros(()), h.new_empty(h.shape), W.new_zeros(W.shape)
    for s, z in zip(starts, zs):
        tc = target[s:s + chunk]
        counted = tc != ignore_index
        t = tc.clamp(min=0)
        m = z.amax(dim=-1, keepdim=True)
        lse = m[:, 0] + (z - m).exp().sum(dim=-1).log()
        w = counted.to(h.dtype) / n
        loss = loss + ((lse - z.gather(1, t[:, None])[:, 0]) * w).sum()
        z.sub_(lse[:, None]).exp_()
        z[torch.arange(len(tc)), t] -= 1.0
        z.mul_(w[:, None])
        dh[s:s + chunk] = z @ W
        dW += z.T @ h[s:s + chunk]
    return loss, dh, dW
# %% vocab_blocked_lse
def vocab_blocked_lse(h, W, block):
    V = W.shape[0]
    zs = [h @ W[j:j + block].T for j in range(0, V, block)]  # every block's logits, all kept
    m = torch.stack([z.amax(dim=-1) for z in zs]).amax(dim=0)
    return m + sum((z - m[:, None]).exp().sum(dim=-1) for z in zs).log()

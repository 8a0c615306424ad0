# Mutant: the T×T matrix comes back — built whole in the forward, rebuilt whole in the backward, and saved by the Function.
# expect: test_attention_forward_lse saved-quadratic-tensor
# expect: test_attention_backward_recompute saved-quadratic-tensor
# expect: test_RecomputeAttention saved-quadratic-tensor
# expect: test_recompute_attention saved-quadratic-tensor
# %% attention_forward_lse attention_forward_lse
def attention_forward_lse(q, k, v):
    S = q @ k.mT / math.sqrt(q.shape[-1])  # bug: right values, from the whole (B, T, T) score matrix at once
    lse = torch.logsumexp(S, dim=-1)
    return torch.exp(S - lse[..., None]) @ v, lse
# %% attention_backward_recompute attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    c = 1 / math.sqrt(q.shape[-1])
    P = torch.exp(c * (q @ k.mT) - lse[..., None])  # bug: P rebuilt from lse all at once, (B, T, T), and dP and dS with it
    dS = P * (do @ v.mT - (do * o).sum(dim=-1, keepdim=True))
    return c * (dS @ k), c * (dS.mT @ q), P.mT @ do
# %% RecomputeAttention RecomputeAttention
-        ctx.save_for_backward(q, k, v, o, lse)  # four (B, T, d) and one (B, T): nothing T×T
+        P = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]) - lse[..., None])
+        ctx.save_for_backward(q, k, v, o, lse, P)  # bug: P saved beside lse, "to save the backward some time": T×T
-        q, k, v, o, lse = ctx.saved_tensors
+        q, k, v, o, lse, _ = ctx.saved_tensors

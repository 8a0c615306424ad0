# Mutant: a forward in strips of 16 queries against every key (each strip fits under one tile's element count), and a tiled backward whose D comes from a first pass over every tile of P̄ ⊙ P instead of from O.
# expect: test_attention_forward_lse untiled
# expect: test_attention_backward_recompute untiled
# %% attention_forward_lse attention_forward_lse
def attention_forward_lse(q, k, v):
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    o = torch.empty_like(q)
    lse = q.new_empty(B, T)
    for i in range(0, T, 16):  # bug: a (B, 16, T) strip of scores against every key, not a tile
        S = c * (q[:, i:i + 16] @ k.mT)
        lse[:, i:i + 16] = torch.logsumexp(S, dim=-1)
        o[:, i:i + 16] = torch.exp(S - lse[:, i:i + 16, None]) @ v
    return o, lse
# %% attention_backward_recompute attention_backward_recompute
-    D = (do * o).sum(dim=-1)  # (B, T): rowsum(dP ⊙ P), before a single tile of P exists
+    D = torch.zeros_like(lse)  # bug: D summed from the tiles of P̄ ⊙ P in a first pass: every tile of P built twice
+    for j in range(0, T, BLOCK_K):
+        for i in range(0, T, BLOCK_Q):
+            P = torch.exp(c * (q[:, i:i + BLOCK_Q] @ k[:, j:j + BLOCK_K].mT) - lse[:, i:i + BLOCK_Q, None])
+            D[:, i:i + BLOCK_Q] += ((do[:, i:i + BLOCK_Q] @ v[:, j:j + BLOCK_K].mT) * P).sum(dim=-1)

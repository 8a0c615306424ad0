# Mutant: right values, but each walk builds all T×V logits and slices its chunk (block) out of them.
# expect: test_chunked_linear_ce materialized-logits
# expect: test_vocab_blocked_lse materialized-logits
# %% chunked_linear_ce
-        zc = hc @ W.T  # (c, V) this chunk's logits, the only V-wide tensor: write c·V
+        zc = (h @ W.T)[rows]  # bug: the full (T, V) logits, sliced after they were made
# %% vocab_blocked_lse
-        zb = h @ W[j:j + block].T  # (T, b) this block's logits: write T·b
+        zb = (h @ W.T)[:, j:j + block]  # bug: all V columns computed, one block kept

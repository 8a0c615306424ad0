# Mutant: each chunk replaces dW instead of adding to it — right while one chunk covers all tokens.
# expect: test_chunked_linear_ce batch-reduction
# %% chunked_linear_ce
-        dW += dz.T @ hc  # every chunk contributes to dW: read c·V, add V·d
+        dW = dz.T @ hc  # bug: an assignment keeps the last chunk's contribution only

# Mutant: every kernel walks all the tiles of its sequence and masks each one: right values, twice the work.
# expect: test_causal_fwd_kernel dense-walk
# expect: test_causal_bwd_dq_kernel dense-walk
# expect: test_causal_bwd_dkdv_kernel dense-walk
# expect: test_varlen_fwd_kernel dense-walk
# %% causal_fwd_kernel causal_fwd_kernel
-    for start_n in range(0, end, BLOCK_N):
+    for start_n in range(0, seq_len, BLOCK_N):  # bug: every tile, the mask on each
-        if start_n >= diagonal:  # only the tiles the diagonal crosses hold keys some row must not see
-            s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
+        s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
# %% causal_bwd_dq_kernel causal_bwd_dq_kernel
-    for start_n in range(0, tl.minimum(start_m + BLOCK_M, seq_len), BLOCK_N):
+    for start_n in range(0, seq_len, BLOCK_N):  # bug: every tile of keys
# %% causal_bwd_dkdv_kernel causal_bwd_dkdv_kernel
-    for start_m in range((start_n // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):  # the first query that sees key start_n
+    for start_m in range(0, seq_len, BLOCK_M):  # bug: every tile of queries
# %% varlen_fwd_kernel varlen_fwd_kernel
-    for start_n in range(0, tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
+    for start_n in range(0, n, BLOCK_N):  # bug: every tile of the document

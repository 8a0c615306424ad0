# Mutant: the forward's walk ends BLOCK_N past the block's first query (right only when BLOCK_M = BLOCK_N); the dQ walk stops before the diagonal's tile; the dK/dV walk starts a block late.
# expect: test_causal_fwd_kernel wrong-values
# expect: test_causal_bwd_dq_kernel wrong-values
# expect: test_causal_bwd_dkdv_kernel wrong-values
# %% causal_fwd_kernel causal_fwd_kernel
-    end = tl.minimum(start_m + BLOCK_M, seq_len)  # past the block's last query: keys no row of it sees
+    end = tl.minimum(start_m + BLOCK_N, seq_len)  # bug: BLOCK_N where the block's queries reach BLOCK_M
# %% causal_bwd_dq_kernel causal_bwd_dq_kernel
-    for start_n in range(0, tl.minimum(start_m + BLOCK_M, seq_len), BLOCK_N):
+    for start_n in range(0, start_m, BLOCK_N):  # bug: the diagonal's tile left out
# %% causal_bwd_dkdv_kernel causal_bwd_dkdv_kernel
-    for start_m in range((start_n // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):  # the first query that sees key start_n
+    for start_m in range((start_n // BLOCK_M + 1) * BLOCK_M, seq_len, BLOCK_M):  # bug: one block late

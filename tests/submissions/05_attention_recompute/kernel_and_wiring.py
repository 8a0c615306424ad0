# Mutant: a D kernel without its column mask, a Triton forward that gives keys past T a score of 0, a K̄/V̄ kernel whose stores have no mask, and two user functions that bypass their Functions.
# expect: test_manual_attention wrong-values
# expect: test_recompute_attention wrong-values
# expect: test_attention_delta_kernel out-of-bounds
# expect: test_flash_fwd_kernel wrong-values
# expect: test_flash_bwd_dkdv_kernel out-of-bounds
# %% manual_attention manual_attention
-    return ManualAttention.apply(q, k, v)
+    return torch.nn.functional.scaled_dot_product_attention(q, k, v)  # bug: right values, but ManualAttention's backward never runs
# %% recompute_attention recompute_attention
-    return RecomputeAttention.apply(q, k, v)
+    return manual_attention(q, k, v)  # bug: routes through manual_attention: right values, and P saved after all
# %% attention_delta_kernel attention_delta_kernel
-    mask = row_ok[:, None] & (cols[None, :] < head_dim)  # (BLOCK_M, BLOCK_D)
+    mask = row_ok[:, None]  # bug: the rows only: lanes head_dim…BLOCK_D − 1 of every row read whatever lies after it
# %% flash_fwd_kernel flash_fwd_kernel
-        s = tl.where(keys[None, :] < seq_len, s, -float("inf"))  # keys past T get no weight: exp(−inf) = 0
+        # bug: the loads are masked, but the scores of keys past T are left at 0, which exp turns into weight
# %% flash_bwd_dkdv_kernel flash_bwd_dkdv_kernel
-    tl.store(DV_ptr + kv_offs, dv, mask=kv_mask)
+    tl.store(DV_ptr + kv_offs, dv)  # bug: every lane of the key block stored: past T, into memory that is not V̄

# Mutant: the 1/√d forgotten in the manual backward, the blockwise forward, the Triton forward and the Triton K̄, and a D kernel whose store has no row mask.
# expect: test_ManualAttention scale
# expect: test_manual_attention scale
# expect: test_attention_forward_lse scale
# expect: test_RecomputeAttention scale
# expect: test_recompute_attention scale
# expect: test_attention_delta_kernel out-of-bounds
# expect: test_flash_fwd_kernel scale
# expect: test_flash_bwd_dkdv_kernel scale
# %% ManualAttention ManualAttention.backward
-        dq = c * (dS @ k)  # (B, T, T) @ (B, T, d) -> (B, T, d)
-        dk = c * (dS.mT @ q)  # (B, T, T)ᵀ @ (B, T, d) -> (B, T, d)
+        dq = dS @ k  # bug: the forward scales the scores, the backward forgets that S = c·QKᵀ: √d too large
+        dk = dS.mT @ q  # bug: the same
# %% attention_forward_lse attention_forward_lse
-            S = c * (qi @ k[:, j:j + BLOCK_K].mT)  # (B, Tq, Tk): one tile of S, never all of it
+            S = qi @ k[:, j:j + BLOCK_K].mT  # bug: the online softmax is right, but the tiles of S lack the 1/√d
# %% attention_delta_kernel attention_delta_kernel
-    tl.store(Delta_ptr + rows, D, mask=row_ok)  # write BLOCK_M
+    tl.store(Delta_ptr + rows, D)  # bug: the loads are masked, the store writes all BLOCK_M rows, past n_rows in the last block
# %% flash_fwd_kernel flash_fwd_kernel
-        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N): a tile of S, in registers only (acc_dtype)
+        s = tl.dot(q, tl.trans(k))  # bug: Q Kᵀ without sm_scale: every softmax comes out too sharp
# %% flash_bwd_dkdv_kernel flash_bwd_dkdv_kernel
-    tl.store(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # K̄ and V̄ share K's strides
+    tl.store(DK_ptr + kv_offs, dk, mask=kv_mask)  # bug: K̄ stored without sm_scale: √d times too large

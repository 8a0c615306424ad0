# Mutant: K̄ built from S̄ instead of S̄ᵀ, the softmax step negated in the blockwise backward, and D and the Triton K̄/V̄ loop read with head_dim as the row stride.
# expect: test_ManualAttention transpose
# expect: test_manual_attention transpose
# expect: test_attention_backward_recompute sign
# expect: test_RecomputeAttention sign
# expect: test_recompute_attention sign
# expect: test_attention_delta_kernel out-of-bounds
# expect: test_flash_bwd_dkdv_kernel out-of-bounds
# %% ManualAttention ManualAttention.backward
-        dk = c * (dS.mT @ q)  # (B, T, T)ᵀ @ (B, T, d) -> (B, T, d)
+        dk = c * (dS @ q)  # bug: S̄Q, not S̄ᵀQ: the roles of Q and K swapped (shapes agree, since S̄ is square)
# %% attention_backward_recompute attention_backward_recompute
-            dS = P * (dP - D[:, i:i + BLOCK_Q, None])  # (B, Tq, Tk)
+            dS = P * (D[:, i:i + BLOCK_Q, None] - dP)  # bug: P ⊙ (D − P̄): the softmax VJP turned around, dq and dk negated
# %% attention_delta_kernel attention_delta_kernel
-    o = tl.load(O_ptr + r * o_row_stride + cols[None, :], mask=mask, other=0.0).to(acc)  # read BLOCK_M·d
-    do = tl.load(DO_ptr + r * do_row_stride + cols[None, :], mask=mask, other=0.0).to(acc)  # read BLOCK_M·d
+    o = tl.load(O_ptr + r * head_dim + cols[None, :], mask=mask, other=0.0).to(acc)  # bug: rows assumed head_dim apart: right only when packed
+    do = tl.load(DO_ptr + r * head_dim + cols[None, :], mask=mask, other=0.0).to(acc)
# %% flash_bwd_dkdv_kernel flash_bwd_dkdv_kernel
-        q = tl.load(Q_ptr + base + rows[:, None] * stride_t + cols[None, :] * stride_e, mask=q_mask, other=0.0)
-        do = tl.load(DO_ptr + base + rows[:, None] * stride_t + cols[None, :] * stride_e, mask=q_mask, other=0.0)
+        q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)  # bug: Q and Ō read as if rows were head_dim apart
+        do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)

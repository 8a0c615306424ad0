# Mutant: the softmax's row sum lost its keepdim in the manual backward, the D term left out of the blockwise backward and of the Triton K̄, and the Triton forward's rescale factor always 1.
# expect: test_ManualAttention broadcast-axis
# expect: test_manual_attention broadcast-axis
# expect: test_attention_backward_recompute wrong-values
# expect: test_RecomputeAttention wrong-values
# expect: test_recompute_attention wrong-values
# expect: test_flash_fwd_kernel wrong-values
# expect: test_flash_bwd_dkdv_kernel wrong-values
# %% ManualAttention ManualAttention.backward
-        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))  # (B, T, T): softmax, row by row
+        dS = P * (dP - (dP * P).sum(dim=-1))  # bug: a (B, T) rowsum broadcast along the columns instead of down the rows
# %% attention_backward_recompute attention_backward_recompute
-            dS = P * (dP - D[:, i:i + BLOCK_Q, None])  # (B, Tq, Tk)
+            dS = P * dP  # bug: S̄ = P ⊙ P̄: the softmax's row scalar D is never subtracted
# %% flash_fwd_kernel flash_fwd_kernel
-        alpha = tl.exp(m - m_new)  # restates the old sums under the new max (0 at the first block)
+        m = m_new  # bug: updated before the rescale factor is taken: alpha is always 1, old sums never rescaled
+        alpha = tl.exp(m - m_new)
# %% flash_bwd_dkdv_kernel flash_bwd_dkdv_kernel
-        ds = p * (dp - D[:, None])  # S̄_ij, from P in acc_dtype
+        ds = p * dp  # bug: S̄ = P ⊙ P̄: the row scalar D is loaded but never subtracted

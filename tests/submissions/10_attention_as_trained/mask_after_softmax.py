# Mutant: the forward masks the diagonal tile after the softmax (ℓ sums the hidden keys' exponentials); the dQ kernel rebuilds P with the diagonal left out (j < i).
# expect: test_causal_fwd_kernel wrong-values
# expect: test_causal_bwd_dq_kernel wrong-values
# %% causal_fwd_kernel causal_fwd_kernel
-        if start_n >= diagonal:  # only the tiles the diagonal crosses hold keys some row must not see
-            s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
-        m_new = tl.maximum(m, tl.max(s, axis=1))
-        alpha = tl.exp(m - m_new)
-        p = tl.exp(s - m_new[:, None])
-        ell = ell * alpha + tl.sum(p, axis=1)
+        m_new = tl.maximum(m, tl.max(s, axis=1))
+        alpha = tl.exp(m - m_new)
+        p = tl.exp(s - m_new[:, None])
+        ell = ell * alpha + tl.sum(p, axis=1)
+        if start_n >= diagonal:  # bug: the mask goes on after the softmax's denominator took every key
+            p = tl.where(keys[None, :] <= rows[:, None], p, 0.0)
# %% causal_bwd_dq_kernel causal_bwd_dq_kernel
-        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None])
+        seen = row_ok[:, None] & (keys[None, :] < rows[:, None])  # bug: a query's own key left out

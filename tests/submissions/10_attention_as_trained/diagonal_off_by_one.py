# Mutant: the forward masks j < i (query 0 sees no key); the dK/dV kernel lets each query see one key past the diagonal; the packed forward too.
# expect: test_causal_fwd_kernel non-finite
# expect: test_causal_bwd_dkdv_kernel wrong-values
# expect: test_varlen_fwd_kernel wrong-values
# %% causal_fwd_kernel causal_fwd_kernel
-            s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
+            s = tl.where(keys[None, :] < rows[:, None], s, -float("inf"))  # bug: a query's own key left out
# %% causal_bwd_dkdv_kernel causal_bwd_dkdv_kernel
-        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None])
+        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None] + 1)  # bug: one key past the diagonal
# %% varlen_fwd_kernel varlen_fwd_kernel
-        s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
+        s = tl.where(keys[None, :] <= rows[:, None] + 1, s, -float("inf"))  # bug: one key past the diagonal

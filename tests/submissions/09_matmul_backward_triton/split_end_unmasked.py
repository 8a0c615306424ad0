# Mutant: the split-K kernel masks its rows at M, not at its split's end, so the loop's last step adds the next split's first rows; the atomic kernel sums float64 in float32.
# expect: test_linear_dw_splitk_kernel wrong-values
# expect: test_linear_dw_atomic_kernel wrong-values
# expect: test_TritonLinear wrong-values
# %% linear_dw_splitk_kernel linear_dw_splitk_kernel
-                     mask=(ms[None, :] < end) & (ks[:, None] < K), other=0.0)  # (BLOCK_K, BLOCK_M): a tile of xᵀ
+                     mask=(ms[None, :] < M) & (ks[:, None] < K), other=0.0)  # bug: rows masked at M, not at the split's end
-                     mask=(ms[:, None] < end) & (ns[None, :] < N), other=0.0)  # (BLOCK_M, BLOCK_N)
+                     mask=(ms[:, None] < M) & (ns[None, :] < N), other=0.0)
# %% linear_dw_atomic_kernel linear_dw_atomic_kernel
-        acc += tl.dot(xt, dy).to(acc_dtype)
+        acc += tl.dot(xt.to(tl.float32), dy.to(tl.float32)).to(acc_dtype)  # bug: the products in float32 whatever the inputs

# Mutant: the dx kernel loads ȳ's tile without masking the columns past N; the atomic kernel adds its tile without masking the columns past N.
# expect: test_linear_dx_kernel out-of-bounds
# expect: test_linear_dw_atomic_kernel out-of-bounds
# expect: test_TritonLinear out-of-bounds
# %% linear_dx_kernel linear_dx_kernel
-                     mask=(rows[:, None] < M) & (ns[None, :] < N), other=0.0)  # (BLOCK_M, BLOCK_N)
+                     mask=rows[:, None] < M, other=0.0)  # bug: the columns past N are loaded too
# %% linear_dw_atomic_kernel linear_dw_atomic_kernel
-                  mask=(ks[:, None] < K) & (ns[None, :] < N))
+                  mask=ks[:, None] < K)  # bug: the columns past N are added to

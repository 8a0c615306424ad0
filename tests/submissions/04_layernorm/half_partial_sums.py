# Mutant: the partial sums of γ̄ and β̄ kept in x's dtype, so a float16 batch sums its rows in float16.
# expect: test_TritonLayerNorm half-accumulation
# %% TritonLayerNorm TritonLayerNorm.backward
-        dgamma_partial = torch.zeros(n_programs, n_cols, dtype=mean.dtype, device=x.device)
-        dbeta_partial = torch.zeros(n_programs, n_cols, dtype=mean.dtype, device=x.device)
+        dgamma_partial = torch.zeros(n_programs, n_cols, dtype=x.dtype, device=x.device)  # bug: float16 for float16 x
+        dbeta_partial = torch.zeros(n_programs, n_cols, dtype=x.dtype, device=x.device)

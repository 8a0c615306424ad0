# Mutant: every program adds its share of γ̄ and β̄ into row 0 of the partial buffers instead of its own row p.
# expect: test_TritonLayerNorm race
# expect: test_triton_layernorm race
# %% TritonLayerNorm layernorm_bwd_kernel
-            part = pid * n_cols + cols
+            part = cols  # bug: row 0 for every program: two programs' loads, adds and stores into it interleave on a GPU

# Mutant: dgamma summed over the rows from half-precision copies, then brought back to float32.
# expect: test_layernorm_backward_mixed half-accumulation
# %% layernorm_backward_mixed
-    dgamma = (dy_acc * xhat).reshape(-1, N).sum(dim=0)  # (N,) a sum over every row, in acc
+    dgamma = (dy * xhat.to(x.dtype)).reshape(-1, N).sum(dim=0)  # bug: summed in the half dtype

# Mutant: the kernel gives every row the factor 1/n, so a token whose target is ignore_index gets a loss and a gradient.
# expect: test_ce_grad_kernel wrong-values
# %% ce_grad_kernel
-    scale = tl.where(counted, tl.full([], 1.0, dtype) / n, 0.0).to(dtype)  # 1/n in the logits' dtype, or 0
+    scale = tl.full([], 1.0, dtype) / n  # bug: ignored rows weighted 1/n like the counted ones

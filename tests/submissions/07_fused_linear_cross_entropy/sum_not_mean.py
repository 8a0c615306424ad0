# Mutant: the loss and its gradients summed over the tokens, never divided by their count; the CE-gradient kernel's store mask off by one.
# expect: test_linear_ce_backward scale
# expect: test_ce_grad_kernel out-of-bounds
# %% linear_ce_backward
-    w = counted.to(h.dtype) / n  # (T,) each token's weight in the mean: 1/n, or 0 if ignored
+    w = counted.to(h.dtype)  # bug: weight 1 per counted token: a sum, n times the mean
# %% ce_grad_kernel ce_grad_kernel
-        tl.store(z_row + start + cols, g, mask=mask)
+        tl.store(z_row + start + cols, g, mask=start + cols <= V)  # bug: off by one: the lane at V is written too

# Mutant: the loss and its gradients summed over the tokens, never divided by their count.
# expect: test_linear_ce_backward scale
# %% linear_ce_backward
-    w = counted.to(h.dtype) / n  # (T,) each token's weight in the mean: 1/n, or 0 if ignored
+    w = counted.to(h.dtype)  # bug: weight 1 per counted token: a sum, n times the mean

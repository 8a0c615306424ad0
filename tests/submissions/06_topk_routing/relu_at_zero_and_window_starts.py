# Mutant: ReLU's mask lets 0 through (wrong when an in-place ReLU hands over y), max-pool's windows placed kernel_size apart.
# expect: test_relu_backward wrong-values
# expect: test_maxpool1d_backward wrong-values
# %% relu_backward
-    return dy * (x > 0)  # read ȳ and x (or a 1-bit mask), write x̄: a select, no FLOPs
+    return dy * (x >= 0)  # bug: an entry of y that is exactly 0 was dropped, and gets ȳ here
# %% maxpool1d_backward
-    starts = stride * torch.arange(L_out, device=x.device)  # (L_out,): j · s
+    starts = kernel_size * torch.arange(L_out, device=x.device)  # bug: window j starts at j·stride, not j·kernel_size

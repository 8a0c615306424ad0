# Mutant: W̄ placed transposed, hᵀ z̄ for z̄ᵀ h, in the dense backward and in the walk.
# expect: test_linear_ce_backward transpose
# expect: test_chunked_linear_ce transpose
# %% linear_ce_backward
-    dW = dz.T @ h  # (V, d): read T·V
+    dW = h.T @ dz  # bug: (d, V), the transpose of W̄
# %% chunked_linear_ce
-    return loss, dh, dW
+    return loss, dh, dW.T  # bug: W̄ handed back transposed

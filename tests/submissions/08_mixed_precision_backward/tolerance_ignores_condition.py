# Mutant: the sum's typical error taken relative to the result, whatever the result cancelled.
# expect: test_grad_tolerance wrong-values
# %% grad_tolerance
-    return 2 * u[dtype] + 2 * condition * math.sqrt(n) * u_acc
+    return 2 * u[dtype] + 2 * math.sqrt(n) * u_acc  # bug: √n·u relative to the result, κ never used

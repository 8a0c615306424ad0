# Mutant: a tolerance that depends on the dtype only, blind to the length of the reductions.
# expect: test_grad_tolerance wrong-values
# %% grad_tolerance
-    return 2 * u[dtype] + 2 * math.sqrt(n) * u_acc  # the output's rounding + a typical n-term sum, 2× each
+    return 2 * u[dtype] + 2 * u_acc  # bug: n plays no part

# Mutant: a tolerance that depends on the dtype only, blind to the length of the reductions.
# expect: test_grad_tolerance wrong-values
# %% grad_tolerance
-    return 2 * u[dtype] + 2 * condition * math.sqrt(n) * u_acc
+    return 2 * u[dtype] + 2 * condition * u_acc  # bug: n plays no part

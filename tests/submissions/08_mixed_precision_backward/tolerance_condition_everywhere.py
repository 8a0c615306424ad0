# Mutant: the condition factor also multiplies the one rounding of the stored result.
# expect: test_grad_tolerance wrong-values
# %% grad_tolerance
-    return 2 * u[dtype] + 2 * condition * math.sqrt(n) * u_acc
+    return condition * (2 * u[dtype] + 2 * math.sqrt(n) * u_acc)  # bug: κ scales the output's rounding too

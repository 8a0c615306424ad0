# Mutant: on overflow the scaler backs off but lets the optimizer take the step anyway.
# expect: test_DynamicLossScaler wrong-values
# %% DynamicLossScaler DynamicLossScaler.update
-            return False  # skip: these gradients are not numbers
+            return True  # bug: the step with inf/NaN gradients is applied

# Mutant: the scaler backs off on overflow but never grows the scale back.
# expect: test_DynamicLossScaler wrong-values
# %% DynamicLossScaler DynamicLossScaler.update
-        if self.good_steps == self.growth_interval:  # a long run without overflow: try a larger scale
-            self.scale *= self.growth_factor
-            self.good_steps = 0
+        if self.good_steps == self.growth_interval:  # bug: the run is counted, the scale left as it is
+            self.good_steps = 0

# Mutant: right values, but dx handed back in float32 instead of the input's half precision.
# expect: test_softmax_backward_mixed wrong-values
# %% softmax_backward_mixed
-    return (y_acc * (dy_acc - s)).to(y.dtype)  # ȳ − s in acc (it cancels), rounded once, at the very end
+    return y_acc * (dy_acc - s)  # bug: dx stays in the accumulation dtype

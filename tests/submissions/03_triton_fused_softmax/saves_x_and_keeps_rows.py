# Mutant: TritonSoftmax saves x beside y; triton_softmax returns the flattened rows instead of the shape of x.
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax shape
# %% TritonSoftmax TritonSoftmax
-        ctx.save_for_backward(y)  # y only: the backward is written in terms of the output
+        ctx.save_for_backward(x, y)  # bug: x is never needed by the backward
-        (y,) = ctx.saved_tensors
+        _, y = ctx.saved_tensors
# %% triton_softmax triton_softmax
-    return TritonSoftmax.apply(rows).view(x.shape)
+    return TritonSoftmax.apply(rows)  # bug: y must have the shape of x

# Mutant: TritonSoftmax saves x beside y; triton_softmax returns the flattened rows instead of the shape of x; the backward kernel computes in the dtype it loads, so a float16 hub.
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax shape
# expect: test_softmax_bwd_kernel half-accumulation
# %% TritonSoftmax TritonSoftmax
-        ctx.save_for_backward(y)  # y only: the backward is written in terms of the output
+        ctx.save_for_backward(x, y)  # bug: x is never needed by the backward
-        (y,) = ctx.saved_tensors
+        _, y = ctx.saved_tensors
# %% triton_softmax triton_softmax
-    return TritonSoftmax.apply(rows).view(x.shape)
+    return TritonSoftmax.apply(rows)  # bug: y must have the shape of x
# %% softmax_bwd_kernel softmax_bwd_kernel
-    dy = dy.to(tl.float32) if dy.dtype.primitive_bitwidth < 32 else dy
-    y = y.to(tl.float32) if y.dtype.primitive_bitwidth < 32 else y
+    # bug: no widening, so y ⊙ ȳ, s and ȳ − s are float16 on float16 rows

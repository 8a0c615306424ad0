# Mutant: the kernel's hub starts as a zero of the loaded dtype and each piece is summed unconverted.
# expect: test_softmax_bwd_mixed_kernel half-accumulation
# %% softmax_bwd_mixed_kernel softmax_bwd_mixed_kernel
-    s = tl.zeros([], tl.float32) + tl.zeros([], dtype)  # 0 in the wider of float32 and the loaded dtype
+    s = tl.zeros([], dtype)  # bug: the hub accumulates in the loaded dtype
-        s += tl.sum(y.to(s.dtype) * dy.to(s.dtype), axis=0)  # upcast before the product and the sum
+        s += tl.sum(y * dy, axis=0)  # bug: the product and its sum in float16

# Mutant: the forward's masked load fills the tail with 0 (so exp(0 − m) joins the sum); the backward has its subtraction backwards.
# expect: test_softmax_fwd_kernel wrong-values
# expect: test_softmax_bwd_kernel sign
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax wrong-values
# %% softmax_fwd_kernel softmax_fwd_kernel
-    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))  # read N
+    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=0.0)  # bug: 0 is not harmless here
# %% softmax_bwd_kernel softmax_bwd_kernel
-    dx = y * (dy - s)
+    dx = y * (s - dy)  # bug: s − ȳ

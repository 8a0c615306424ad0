# Mutant: right values, but dx handed back in float32 instead of the input's half precision; the kernel's second walk loads y without a mask.
# expect: test_softmax_backward_mixed wrong-values
# expect: test_softmax_bwd_mixed_kernel out-of-bounds
# %% softmax_backward_mixed
-    return (y_acc * (dy_acc - s)).to(y.dtype)  # ȳ − s in acc (it cancels), rounded once, at the very end
+    return y_acc * (dy_acc - s)  # bug: dx stays in the accumulation dtype
# %% softmax_bwd_mixed_kernel softmax_bwd_mixed_kernel
-        y = tl.load(Y_ptr + row * y_row_stride + start + cols, mask=mask, other=0.0).to(s.dtype)
+        y = tl.load(Y_ptr + row * y_row_stride + start + cols).to(s.dtype)  # bug: no mask: the block's tail reads past the row

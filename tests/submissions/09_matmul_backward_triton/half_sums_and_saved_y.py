# Mutant: the dx kernel accumulates in the dtype it loads (float16 sums); the atomic kernel adds into w̄ with its strides swapped; TritonLinear saves y beside x and w.
# expect: test_linear_dx_kernel half-accumulation
# expect: test_linear_dw_atomic_kernel transpose
# expect: test_TritonLinear wrong-values
# %% linear_dx_kernel linear_dx_kernel
-    acc_dtype = tl.float64 if DY_ptr.dtype.element_ty == tl.float64 else tl.float32  # the sums' dtype
+    acc_dtype = DY_ptr.dtype.element_ty  # bug: the sums in the loaded dtype
# %% linear_dw_atomic_kernel linear_dw_atomic_kernel
-    tl.atomic_add(DW_ptr + ks[:, None] * stride_dwk + ns[None, :] * stride_dwn, acc,
+    tl.atomic_add(DW_ptr + ks[:, None] * stride_dwn + ns[None, :] * stride_dwk, acc,  # bug: w̄'s strides swapped
# %% TritonLinear TritonLinear.forward
-        ctx.save_for_backward(x, w)
+        ctx.save_for_backward(x, w, y)  # bug: y saved too

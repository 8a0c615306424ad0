# Mutant: swiglu_bwd_kernel stores ā without the mask; rope_kernel loads the second half of each pair without it.
# expect: test_swiglu_bwd_kernel out-of-bounds
# expect: test_rope_kernel out-of-bounds
# %% swiglu_bwd_kernel swiglu_bwd_kernel
-    tl.store(DA_ptr + row * stride_da + cols, da.to(DA_ptr.dtype.element_ty), mask=inside)
+    tl.store(DA_ptr + row * stride_da + cols, da.to(DA_ptr.dtype.element_ty))  # bug: no mask
# %% rope_kernel rope_kernel
-    x2 = tl.load(X_ptr + row * stride_x + second, mask=inside, other=0.0)
+    x2 = tl.load(X_ptr + row * stride_x + second)  # bug: no mask

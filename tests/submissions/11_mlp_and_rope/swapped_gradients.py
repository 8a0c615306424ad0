# Mutant: swiglu_backward returns b̄ where ā belongs and ā where b̄ does; the kernel stores each into the other's output.
# expect: test_swiglu_backward wrong-values
# expect: test_swiglu_bwd_kernel wrong-values
# %% swiglu_backward swiglu_backward
-    return dh * b * s * (1 + a * (1 - s)), dh * a * s
+    return dh * a * s, dh * b * s * (1 + a * (1 - s))  # bug: the pair in the wrong order
# %% swiglu_bwd_kernel swiglu_bwd_kernel
-    tl.store(DA_ptr + row * stride_da + cols, da.to(DA_ptr.dtype.element_ty), mask=inside)
-    tl.store(DB_ptr + row * stride_db + cols, db.to(DB_ptr.dtype.element_ty), mask=inside)
+    tl.store(DA_ptr + row * stride_da + cols, db.to(DA_ptr.dtype.element_ty), mask=inside)  # bug: swapped
+    tl.store(DB_ptr + row * stride_db + cols, da.to(DB_ptr.dtype.element_ty), mask=inside)

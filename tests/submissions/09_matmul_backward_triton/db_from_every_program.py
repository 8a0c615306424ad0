# Mutant: every program along K stores b̄'s partial, not only the programs with program_id(0) == 0.
# expect: test_linear_dw_splitk_kernel race
# expect: test_TritonLinear race
# %% linear_dw_splitk_kernel linear_dw_splitk_kernel
-        if tl.program_id(0) == 0:  # one program per column block writes b̄: the others would race to store it
-            tl.store(PB_ptr + split * N + ns, db.to(PB_ptr.dtype.element_ty), mask=ns < N)
+        tl.store(PB_ptr + split * N + ns, db.to(PB_ptr.dtype.element_ty), mask=ns < N)  # bug: every program along K stores the same b̄ elements

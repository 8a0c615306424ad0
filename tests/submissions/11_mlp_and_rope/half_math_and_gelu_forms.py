# Mutant: swiglu_bwd_kernel takes σ(a) in float32 (tl.exp refuses float16), the rest in the loaded dtype; gelu_backward gives the exact GELU the tanh form's derivative.
# expect: test_gelu_backward wrong-values
# expect: test_swiglu_bwd_kernel half-accumulation
# %% gelu_backward gelu_backward
-    if approximate == "tanh":
+    if True:  # bug: the tanh form for both
# %% swiglu_bwd_kernel swiglu_bwd_kernel
-    b = tl.load(B_ptr + row * stride_b + cols, mask=inside, other=0.0).to(cdtype)
-    dh = tl.load(DH_ptr + row * stride_dh + cols, mask=inside, other=0.0).to(cdtype)
-    a = a.to(cdtype)
-    s = 1 / (1 + tl.exp(-a))
+    s = (1 / (1 + tl.exp(-a.to(cdtype)))).to(a.dtype)  # bug: only the exponential in cdtype
+    b = tl.load(B_ptr + row * stride_b + cols, mask=inside, other=0.0)  # bug: no cast to cdtype
+    dh = tl.load(DH_ptr + row * stride_dh + cols, mask=inside, other=0.0)

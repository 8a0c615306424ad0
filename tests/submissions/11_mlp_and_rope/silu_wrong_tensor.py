# Mutant: swiglu_backward takes silu' of the output h instead of a; the kernel takes it of silu(a); gelu_backward drops the product rule's x·φ(x) term.
# expect: test_gelu_backward wrong-values
# expect: test_swiglu_backward wrong-values
# expect: test_swiglu_bwd_kernel wrong-values
# %% gelu_backward gelu_backward
-    return dy * (cdf + x * pdf)
+    return dy * cdf  # bug: d(x·Φ)/dx taken as Φ
# %% swiglu_backward swiglu_backward
-    s = torch.sigmoid(a)
-    return dh * b * s * (1 + a * (1 - s)), dh * a * s
+    h = torch.nn.functional.silu(a) * b
+    s = torch.sigmoid(h)  # bug: silu' of the saved output
+    return dh * b * s * (1 + h * (1 - s)), dh * torch.nn.functional.silu(a)
# %% swiglu_bwd_kernel swiglu_bwd_kernel
-    s = 1 / (1 + tl.exp(-a))
-    da = dh * b * s * (1 + a * (1 - s))
-    db = dh * a * s
+    s = 1 / (1 + tl.exp(-a))
+    db = dh * a * s
+    a = a * s  # bug: silu(a) where a was meant below
+    s = 1 / (1 + tl.exp(-a))
+    da = dh * b * s * (1 + a * (1 - s))

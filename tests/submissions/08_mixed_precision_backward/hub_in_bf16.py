# Mutant: the hub s summed from the half-precision inputs, so it comes out rounded to bf16/fp16.
# expect: test_softmax_backward_mixed half-accumulation
# %% softmax_backward_mixed
-    s = (y_acc * dy_acc).sum(dim=-1, keepdim=True)  # (..., 1) the hub, summed in acc
+    s = (y * dy).sum(dim=-1, keepdim=True).to(acc)  # bug: the hub rounded to the inputs' half precision

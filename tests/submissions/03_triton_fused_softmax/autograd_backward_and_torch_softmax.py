# Mutant: TritonSoftmax.backward borrows torch's softmax backward through torch.func.vjp; triton_softmax calls torch.softmax.
# expect: test_TritonSoftmax autograd-in-backward
# expect: test_triton_softmax wrong-values
# %% TritonSoftmax TritonSoftmax.backward
    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        # bug: softmax(log y) = y, so autograd's own backward gives x̄ — but this is autograd, not a hand-written backward
        _, pullback = torch.func.vjp(lambda z: torch.softmax(z, dim=-1), torch.log(y))
        return pullback(dy)[0]
# %% triton_softmax triton_softmax
-    return TritonSoftmax.apply(rows).view(x.shape)
+    return torch.softmax(x, dim=-1)  # bug: the kernels never run

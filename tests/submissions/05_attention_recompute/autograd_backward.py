# Mutant: every hand-written backward hands the work to autograd.
# expect: test_ManualAttention autograd-in-backward
# expect: test_manual_attention autograd-in-backward
# expect: test_attention_backward_recompute autograd-in-backward
# expect: test_RecomputeAttention autograd-in-backward
# expect: test_recompute_attention autograd-in-backward
# %% ManualAttention ManualAttention.backward
    @staticmethod
    def backward(ctx, do):
        q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors[:3])
        with torch.enable_grad():  # bug: re-runs the forward under autograd and asks it for the gradients
            o = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v
        return torch.autograd.grad(o, (q, k, v), do)
# %% attention_backward_recompute attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():  # bug: torch.autograd.grad through a recomputed attention
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return torch.autograd.grad(out, (q, k, v), do)
# %% RecomputeAttention RecomputeAttention.backward
    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        with torch.enable_grad():  # bug: saves the right things, then lets autograd differentiate a recomputed forward
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            (out * do).sum().backward()
        return q.grad, k.grad, v.grad

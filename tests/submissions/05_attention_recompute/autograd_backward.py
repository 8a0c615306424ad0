# Mutant: every hand-written backward hands the work to autograd.
# expect: test_ManualAttention autograd-in-backward
# expect: test_manual_attention autograd-in-backward
# expect: test_attention_backward_recompute autograd-in-backward
# expect: test_RecomputeAttention autograd-in-backward
# expect: test_recompute_attention autograd-in-backward
# %% ManualAttention
class ManualAttention(torch.autograd.Function):
    """The backward re-runs the forward under autograd and asks it for the gradients."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
        with torch.enable_grad():
            o = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v
        return torch.autograd.grad(o, (q, k, v), do)
# %% attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """torch.autograd.grad through a recomputed attention."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return torch.autograd.grad(out, (q, k, v), do)
# %% RecomputeAttention
class RecomputeAttention(torch.autograd.Function):
    """Saves the right things, then lets autograd differentiate a recomputed forward."""

    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = attention_forward_lse(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        with torch.enable_grad():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            (out * do).sum().backward()
        return q.grad, k.grad, v.grad

# Mutant: every row of top-k flattened into one, ReLU applied to the gradient, and the softmax hub subtracted the wrong way.
# expect: test_topk_backward shape
# expect: test_relu_backward wrong-values
# expect: test_moe_gate_backward sign
# %% topk_backward
def topk_backward(dy, indices, n):
    """All rows scattered into one vector of n: the leading axes are lost."""
    return dy.new_zeros(n).scatter_add_(0, indices.reshape(-1), dy.reshape(-1))
# %% relu_backward
def relu_backward(dy, x):
    """ReLU of ȳ: the gradient's own sign decides, not the input's."""
    return torch.relu(dy)
# %% moe_gate_backward
def moe_gate_backward(dy, logits, indices, expert_out):
    """z̄ = p ⊙ (s − p̄), and h̄ with the gate's sign flipped too."""
    p = torch.softmax(logits, dim=-1)
    g = p.gather(-1, indices)
    dg = (expert_out * dy[..., None, :]).sum(dim=-1)
    dp = torch.zeros_like(p).scatter_add_(-1, indices, dg)
    s = (p * dp).sum(dim=-1, keepdim=True)
    return p * (s - dp), -g[..., :, None] * dy[..., None, :]

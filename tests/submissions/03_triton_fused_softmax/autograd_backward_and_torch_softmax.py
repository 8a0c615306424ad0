# Mutant: TritonSoftmax.backward borrows torch's softmax backward through torch.func.vjp; triton_softmax calls torch.softmax.
# expect: test_TritonSoftmax autograd-in-backward
# expect: test_triton_softmax wrong-values
# %% TritonSoftmax
class TritonSoftmax(torch.autograd.Function):
    """Softmax over the rows of a (n_rows, n_cols) tensor."""

    @staticmethod
    def forward(ctx, x):
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_fwd_kernel[(n_rows,)](x, y, x.stride(0), y.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        # the bug: softmax(log y) = y, so autograd's own backward gives x̄ — but this is autograd, not a hand-written backward
        _, pullback = torch.func.vjp(lambda z: torch.softmax(z, dim=-1), torch.log(y))
        return pullback(dy)[0]
# %% triton_softmax
MAX_COLS = 8192


def triton_softmax(x):
    """Softmax over the last dimension of x."""
    return torch.softmax(x, dim=-1)  # the bug: the kernels never run

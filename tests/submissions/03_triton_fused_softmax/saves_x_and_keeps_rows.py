# Mutant: TritonSoftmax saves x beside y; triton_softmax returns the flattened rows instead of the shape of x.
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax shape
# %% TritonSoftmax
class TritonSoftmax(torch.autograd.Function):
    """Softmax over the rows of a (n_rows, n_cols) tensor."""

    @staticmethod
    def forward(ctx, x):
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_fwd_kernel[(n_rows,)](x, y, x.stride(0), y.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        ctx.save_for_backward(x, y)  # the bug: x is never needed by the backward
        return y

    @staticmethod
    def backward(ctx, dy):
        _, y = ctx.saved_tensors
        dy = dy.contiguous()
        n_rows, n_cols = y.shape
        dx = torch.empty_like(y)
        softmax_bwd_kernel[(n_rows,)](
            dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols),
        )
        return dx
# %% triton_softmax
MAX_COLS = 8192


def triton_softmax(x):
    """Softmax over the last dimension of x."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    return TritonSoftmax.apply(rows)  # the bug: y must have the shape of x

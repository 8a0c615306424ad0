# Mutant: TritonSoftmax.backward launches on ȳ as autograd hands it over (maybe strided); triton_softmax reshapes a transposed x without making its rows contiguous.
# expect: test_TritonSoftmax wrong-values
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
        n_rows, n_cols = y.shape  # the bug: no dy.contiguous(), yet the kernel steps through a row one element at a time
        dx = torch.empty_like(y)
        softmax_bwd_kernel[(n_rows,)](
            dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols),
        )
        return dx
# %% triton_softmax
MAX_COLS = 8192


def triton_softmax(x):
    """Softmax over the last dimension of x."""
    rows = x.reshape(-1, x.shape[-1])  # the bug: a view of a transposed x keeps its strided rows
    return TritonSoftmax.apply(rows).view(x.shape)

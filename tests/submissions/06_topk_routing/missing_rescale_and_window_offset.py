# Mutant: dropout without 1/(1 − p), and max-pool's argmax taken as a position in x instead of in its window.
# expect: test_dropout_backward scale
# expect: test_maxpool1d_backward wrong-values
# %% dropout_backward
def dropout_backward(dy, mask, p):
    """The mask is reused, but the forward's 1/(1 − p) is forgotten."""
    return dy * mask
# %% maxpool1d_backward
def maxpool1d_backward(dy, x, kernel_size, stride):
    """argmax within each window, never shifted by the window's start j · stride."""
    a = x.unfold(-1, kernel_size, stride).argmax(dim=-1)
    return torch.zeros_like(x).scatter_add_(-1, a, dy)

# Mutant: the 1/√d forgotten in the manual backward and in the blockwise forward, and a D kernel whose store has no row mask.
# expect: test_ManualAttention scale
# expect: test_manual_attention scale
# expect: test_attention_forward_lse scale
# expect: test_RecomputeAttention scale
# expect: test_recompute_attention scale
# expect: test_attention_delta_kernel wrong-values
# %% ManualAttention
class ManualAttention(torch.autograd.Function):
    """The forward scales the scores; the backward forgets that S = c·QKᵀ: dq and dk are √d too large."""

    @staticmethod
    def forward(ctx, q, k, v):
        P = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(q, k, v, P)
        return P @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, P = ctx.saved_tensors
        dP = do @ v.mT
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
        return dS @ k, dS.mT @ q, P.mT @ do
# %% attention_forward_lse
BLOCK_Q = 64
BLOCK_K = 64


def attention_forward_lse(q, k, v):
    """The online softmax is right, but the tiles of S are q kᵀ without the 1/√d."""
    B, T, d = q.shape
    o = torch.empty_like(q)
    lse = q.new_empty(B, T)
    for i in range(0, T, BLOCK_Q):
        qi = q[:, i:i + BLOCK_Q]
        m = qi.new_full(qi.shape[:2], -math.inf)
        ell = qi.new_zeros(qi.shape[:2])
        acc = torch.zeros_like(qi)
        for j in range(0, T, BLOCK_K):
            S = qi @ k[:, j:j + BLOCK_K].mT
            m_new = torch.maximum(m, S.amax(dim=-1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(S - m_new[..., None])
            ell = alpha * ell + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[:, j:j + BLOCK_K]
            m = m_new
        o[:, i:i + BLOCK_Q] = acc / ell[..., None]
        lse[:, i:i + BLOCK_Q] = m + torch.log(ell)
    return o, lse
# %% attention_delta_kernel
import triton
import triton.language as tl


@triton.jit
def attention_delta_kernel(
    O_ptr,
    DO_ptr,
    Delta_ptr,
    o_row_stride,
    do_row_stride,
    n_rows,
    head_dim,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Loads are masked; the store writes all BLOCK_M rows, past n_rows in the last block."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < head_dim)
    o = tl.load(O_ptr + rows[:, None] * o_row_stride + cols[None, :], mask=mask, other=0.0)
    do = tl.load(DO_ptr + rows[:, None] * do_row_stride + cols[None, :], mask=mask, other=0.0)
    tl.store(Delta_ptr + rows, tl.sum(o * do, axis=1))

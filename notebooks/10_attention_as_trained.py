# %% [markdown]
# # 10 · Attention as it is trained: causal, grouped-query, packed
#
# Notebook 05 derived attention's backward with recompute on full attention: every query sees every key. No
# language model trains that way. Three changes sit between notebook 05 and a real training step, and each one
# changes the backward in a way a kernel writer has to work out:
#
# 1. **Causal masking.** A query sees only the keys at or before its own position. Half of the score matrix is
#    never needed, so a kernel should not visit those tiles at all, and only the tiles the diagonal crosses need
#    an element mask.
# 2. **Grouped-query attention (GQA).** Llama 3, Mistral and Qwen give $G$ = 4–8 query heads one shared key/value
#    head. The forward reads the shared head; the backward has to *sum* $\bar K$ and $\bar V$ over the $G$ query
#    heads of a group, which is a sum across programs again (notebook 09's question).
# 3. **Packed sequences.** Short documents are laid end to end in one row so that no token is padding; each
#    query sees only its own document's keys. FlashAttention's varlen API describes the packing with
#    `cu_seqlens`, the documents' start offsets.
#
# | part | you write | points |
# |---|---|---|
# | A | `causal_fwd_kernel` — `@triton.jit`: the causal forward for one block of queries of one head, K/V read from its group's head | 2 |
# | B | `causal_bwd_dq_kernel` — `@triton.jit`: $\bar Q$ for one block of queries, the key walk stopping at the diagonal | 2 |
# | C | `causal_bwd_dkdv_kernel` — `@triton.jit`: $\bar K$ and $\bar V$ for one block of keys of one query head, summed into its group's K/V head | 3 |
# | D | `varlen_fwd_kernel` — `@triton.jit`: the causal forward over packed documents, one block of one document's queries per program | 2 |
#
# **Notation** (notebook 05's). One head's $q$, $k$, $v$ are $(T, d)$; $c = 1/\sqrt d$; $S = c\,qk^\top$,
# $P = \operatorname{softmax}(S)$ row by row, $O = Pv$, and $L = m + \log \ell$ per query row is what the forward
# saves. $\bar t$ (in code `dt`) is the gradient of the loss with respect to $t$. The backward's row scalar is
# $D = \operatorname{rowsum}(\bar O \odot O)$.
#
# **What notebook 05 settled, and what is new here.** Notebook 05 derived attention's backward once, tile by tile:
# $P_{ij} = e^{S_{ij} - L_i}$ rebuilt from the saved $L$; $\bar V_j = \sum_i P_{ij}^\top \bar O_i$;
# $\bar S_{ij} = P_{ij} \odot (\bar O_i V_j^\top - D_i)$; $\bar Q_i = c \sum_j \bar S_{ij} K_j$ and
# $\bar K_j = c \sum_i \bar S_{ij}^\top Q_i$ — and its kernels ran them with one program per block of queries (the
# forward, $\bar Q$) or per block of keys ($\bar K$, $\bar V$). Those formulas hold here unchanged, and nothing is
# derived again. Each part asks what the mask, the group or the packing does to them: which tiles a program visits,
# which elements of a tile it must mask, and which programs share a sum.
#
# **Where the kernels run.** As in notebooks 03–09: with a CUDA GPU Triton compiles your kernels for it; without
# one, its interpreter runs the same `@triton.jit` functions on the CPU, one program after another. Its `tl.dot`
# needs every side of a tile to be 16 or more, so this notebook's launches use blocks of 16, on small shapes; the
# one measurement at long sequences (§2) uses blocks of 128 and a single head.
#
# Each test cell prints `✓ ...` when your kernel is right; when it is wrong, its first line names the kind of bug
# (`diagnosis: wrong-values — ...`, `dense-walk`, `race`, `batch-reduction`, `out-of-bounds`, …), the next lines
# say where, and the last one points to the hint that covers it. Every exercise is followed by three collapsed hints
# — questions and partial steps, never the code; open the first only when you are stuck — and every test cell by
# a collapsed recap of the answer: open it once your check passes.
# %%
import course

# %% [markdown]
# **The given cell** holds what you do not write: the block sizes of this notebook's launches and the launchers
# that allocate outputs and launch your kernels (on the warps a T4 needs: `backward_warps`). Every kernel sees its
# tensors as *slabs*: $(B \cdot H, T, d)$ for $q$, $O$, $\bar O$, $\bar Q$ and $(B \cdot H_{kv}, T, d)$ for $k$, $v$,
# $\bar K$, $\bar V$, all with the same three strides; $L$ and $D$ are contiguous $(B \cdot H, T)$.
# %%
import math

import torch

import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernels in Triton's interpreter
F64 = torch.float64
BLOCK_M = 16  # queries per block (the interpreter's tl.dot needs 16 or more)
BLOCK_N = 16  # keys per block


def cdiv(a, b):
    return (a + b - 1) // b


def accumulator(dtype):
    """The dtype of every running sum, of L and D: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def block_d(d):
    """The head dim padded to a power of two of at least 16 lanes."""
    return max(16, triton.next_power_of_2(d))


def as_slabs(t):
    """(B, H, T, d) -> a contiguous (B·H, T, d): every slab tensor of a launch then shares one set of strides."""
    return t.reshape(-1, *t.shape[-2:]).contiguous()


def backward_warps(d, dtype, device):
    """(Q̄'s warps, K̄V̄'s warps) for head dim d on device: 4 and 4 (Triton's default), but on a T4 — an NVIDIA GPU
    with 64 KiB of shared memory per program — past d = 64 Q̄ on 4 warps spills registers (8 warps), and a float64
    K̄V̄ program on 4 warps needs 66 KiB (1 warp)."""
    if device.type != "cuda" or d <= 64:
        return 4, 4
    gpu = triton.runtime.driver.active
    if gpu.get_current_target().backend != "cuda" or gpu.utils.get_device_properties(device.index or 0)["max_shared_mem"] > 65536:
        return 4, 4
    return 8, 1 if dtype == torch.float64 else 4


def causal_forward(q, k, v, block_m=BLOCK_M, block_n=BLOCK_N):
    """Given: (o, L) for q (B, H, T, d) and k, v (B, H_kv, T, d) by causal_fwd_kernel; o like q, L (B, H, T)."""
    B, H, T, d = q.shape
    group = H // k.shape[1]  # G query heads per K/V head
    qs, ks, vs = as_slabs(q), as_slabs(k), as_slabs(v)
    o = torch.empty_like(qs)
    L = torch.empty(B * H, T, dtype=accumulator(q.dtype), device=q.device)
    causal_fwd_kernel[(cdiv(T, block_m), B * H)](
        qs, ks, vs, o, L, *qs.stride(), 1 / math.sqrt(d), T, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
    return o.view(q.shape), L.view(B, H, T)


def causal_backward(q, k, v, o, L, do, block_m=BLOCK_M, block_n=BLOCK_N):
    """Given: (dq, dk, dv) by causal_bwd_dq_kernel and causal_bwd_dkdv_kernel; D from torch (notebook 05 made it a kernel)."""
    B, H, T, d = q.shape
    group = H // k.shape[1]
    qs, ks, vs, os_, dos = (as_slabs(t) for t in (q, k, v, o, do))
    acc = accumulator(q.dtype)
    D = (dos.to(acc) * os_.to(acc)).sum(-1)  # (B·H, T), like L
    Ls = L.reshape(B * H, T).contiguous()
    dq = torch.empty_like(qs)
    dk = torch.zeros(ks.shape, dtype=acc, device=k.device)  # zeroed, in the sums' dtype: Part C adds into them
    dv = torch.zeros(vs.shape, dtype=acc, device=v.device)
    scale = 1 / math.sqrt(d)
    dq_warps, dkdv_warps = backward_warps(d, q.dtype, q.device)
    causal_bwd_dq_kernel[(cdiv(T, block_m), B * H)](
        qs, ks, vs, dos, Ls, D, dq, *qs.stride(), scale, T, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d), num_warps=dq_warps)
    causal_bwd_dkdv_kernel[(cdiv(T, block_n), B * H)](
        qs, ks, vs, dos, Ls, D, dk, dv, *qs.stride(), scale, T, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d), num_warps=dkdv_warps)
    return dq.view(q.shape), dk.to(k.dtype).view(k.shape), dv.to(v.dtype).view(v.shape)


class CausalAttention(torch.autograd.Function):
    """Causal (grouped-query) attention by your kernels; saves q, k, v, o and L, nothing T×T."""

    @staticmethod
    def forward(ctx, q, k, v):
        o, L = causal_forward(q, k, v)
        ctx.save_for_backward(q, k, v, o, L)
        return o

    @staticmethod
    def backward(ctx, do):
        return causal_backward(*ctx.saved_tensors, do)


def varlen_forward(q, k, v, cu_seqlens, max_seqlen, block_m=BLOCK_M, block_n=BLOCK_N):
    """Given: (o, L) for packed documents by varlen_fwd_kernel, laid out as FlashAttention's varlen API lays them:
    q (total, H, d), k and v (total, H_kv, d), cu_seqlens int32 (n_docs + 1,); o like q, L (H, total)."""
    total, H, d = q.shape
    group = H // k.shape[1]
    qs, ks, vs = (t.transpose(0, 1).contiguous() for t in (q, k, v))  # (heads, total, d): one set of strides
    o = torch.empty_like(qs)
    L = torch.empty(H, total, dtype=accumulator(q.dtype), device=q.device)
    n_docs = cu_seqlens.numel() - 1
    varlen_fwd_kernel[(cdiv(max_seqlen, block_m), H, n_docs)](
        qs, ks, vs, o, L, cu_seqlens, *qs.stride(), 1 / math.sqrt(d), total, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
    return o.transpose(0, 1), L

# %% [markdown]
# **Pictures and measurements.** The next cell holds what the pictures below need: the colours of the three kinds of
# tile, a function that sorts the tiles of any mask into those kinds, one that draws them, one that reads from
# the sanitizer's records which tiles a kernel actually loaded, and one that tells an unfinished part (a stub's
# `course.todo()`) from a bug, so that a cell that runs your kernels says what to finish first.
# %%
import contextlib
import io

import matplotlib.pyplot as plt
import numpy as np
import torch.nn.functional as F
from matplotlib.patches import Patch, Rectangle

KIND_COLOUR = {"skipped": "#f0f0f0", "full": "#6baed6", "diagonal": "#fd8d3c"}  # the three kinds of tile (§1)


def tile_kinds(visible, block_m, block_n):
    """{(query block, key block): kind} for a boolean (T, T) mask, True where query i sees key j: 'skipped' where
    the mask hides the whole tile, 'full' where it hides nothing, 'diagonal' in between."""
    T = visible.shape[0]
    kinds = {}
    for i in range(cdiv(T, block_m)):
        for j in range(cdiv(T, block_n)):
            tile = visible[i * block_m:(i + 1) * block_m, j * block_n:(j + 1) * block_n]
            kinds[i, j] = "full" if tile.all() else "diagonal" if tile.any() else "skipped"
    return kinds


def draw_tiles(ax, visible, block_m, block_n, title, marks=()):
    """The (T, T) scores: the elements the mask lets through dark, the tiles shaded by kind; the tiles in `marks`
    (a mapping (query block, key block) -> text) outlined, with their text."""
    T = visible.shape[0]
    ax.imshow(np.where(visible, 0.55, 0.0), cmap="Greys", vmin=0, vmax=1, extent=(0, T, T, 0), interpolation="nearest")
    for (i, j), kind in tile_kinds(visible, block_m, block_n).items():
        x, y = j * block_n, i * block_m
        w, h = min(block_n, T - x), min(block_m, T - y)
        ax.add_patch(Rectangle((x, y), w, h, facecolor=KIND_COLOUR[kind], alpha=0.55, edgecolor="0.25", lw=0.8))
        if (i, j) in marks:  # outlined, on top of the shading
            ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="k", lw=2))
            ax.text(x + w / 2, y + h / 2, marks[i, j], ha="center", va="center", fontsize=7)
    ax.set(xlim=(0, T), ylim=(T, 0), xlabel="key j", ylabel="query i")
    ax.set_title(title, fontsize=9)


def kinds_legend(fig, extra=()):
    """One legend for a figure of tile pictures: the three kinds, and `extra` handles."""
    kinds = [Patch(facecolor=colour, alpha=0.55, edgecolor="0.25", label=f"{kind} tile")
             for kind, colour in KIND_COLOUR.items()]
    fig.legend(handles=kinds + list(extra), loc="lower center", ncol=len(kinds) + len(extra), fontsize=8)


def tiles_read(launch, tensor, T, d, block, axis=0):
    """The set of (program's block, block of `tensor`'s tokens) pairs for every load `launch` made from `tensor`,
    a slab tensor of T tokens of head dim d: the tiles a kernel visited, read from the sanitizer's records (the
    program's block is its program_id(axis))."""
    program, element = launch.touched[tensor]["load"]
    own = np.array(launch.programs, dtype=np.int64)[program, axis]
    token = (element // d) % T
    return set(zip(own.tolist(), (token // block).tolist()))


def finish_first(exc, parts):
    """Say which parts to finish when `exc` comes from a stub's course.todo(), however deeply Triton wrapped it;
    raise it again otherwise."""
    chain = [exc]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    if not any(isinstance(e, NotImplementedError) or "course.todo()" in str(e) for e in chain):
        raise exc
    print(f"Finish {parts} first: this cell runs your kernels.")

# %% [markdown]
# ## 1 · The causal mask, tile by tile
#
# A causal language model predicts token $i + 1$ from tokens $0 \dots i$, so query $i$ may see key $j$ only when
# $j \le i$. Every score above the diagonal is set to $-\infty$ before the softmax, and its weight $e^{-\infty}$ is
# 0. Notebook 05's kernels cut $S$ into tiles of `BLOCK_M` queries × `BLOCK_N` keys, with one program per row of
# tiles. Under the causal mask each tile is one of three kinds:
#
# - **skipped** — every key of the tile comes after every query of its block. The mask hides all of it: its scores,
#   its weights, its shares of $\ell$ and of $O$ are all zero. A kernel that loads and masks such a tile still gets
#   the right answer, and spends two tile products and two tile loads on nothing.
# - **full** — every key comes at or before every query. The mask hides nothing: this is notebook 05's tile.
# - **diagonal** — the diagonal $j = i$ crosses the tile: some elements are visible, some hidden. Only these need
#   the element mask.
#
# Answer before you look: at $T = 72$ with blocks of 16 — five blocks each way, the last ones 8 long — how many
# tiles of each kind are there? And with `BLOCK_M` = 32, `BLOCK_N` = 16?
# %%
T_PIC = 72  # 4½ blocks of 16: the last block of queries and of keys is partial
causal = np.tril(np.ones((T_PIC, T_PIC), dtype=bool))  # (T, T): query i sees key j iff j ≤ i
fig, axes = plt.subplots(1, 2, figsize=(10, 5.4))
for ax, (bm, bn) in zip(axes, [(BLOCK_M, BLOCK_N), (2 * BLOCK_M, BLOCK_N)]):
    counts = list(tile_kinds(causal, bm, bn).values())
    tally = ", ".join(f"{counts.count(kind)} {kind}" for kind in KIND_COLOUR)
    draw_tiles(ax, causal, bm, bn, f"T = {T_PIC}, BLOCK_M = {bm}, BLOCK_N = {bn}\n{tally}")
kinds_legend(fig)
fig.tight_layout(rect=(0, 0.05, 1, 1))
plt.show()

# %% [markdown]
# With square blocks, $n = T / \text{BLOCK}$ of them, the diagonal crosses the $n$ tiles on the diagonal of the tile
# grid, and the row of tiles of query block $i$ holds $i$ full tiles, one diagonal tile and $n - 1 - i$ skipped
# ones. A kernel that visits only what the mask leaves something in loads
#
# $$1 + 2 + \dots + n = \frac{n(n + 1)}{2} \ \text{ of the } n^2 \text{ tiles}, \qquad
# \frac{n(n+1)/2}{n^2} = \frac{n + 1}{2n} \;\longrightarrow\; \frac12,$$
#
# and every tile it visits costs the same two products, $QK^\top$ and $PV$: $4 \cdot \text{BLOCK\_M} \cdot
# \text{BLOCK\_N} \cdot d$ FLOPs. So the FLOPs fall with the tiles, towards one half — not quite: the diagonal tiles
# are computed whole and half thrown away, which is why the count is $n(n+1)/2$ and not the $T(T+1)/2$ visible
# scores. §2 measures your kernel's count against this formula.
#
# With `BLOCK_M` = 2 · `BLOCK_N` (right) the diagonal crosses *two* key tiles of every query block, and a block of
# queries ends partway through the last one. Which tiles a program must mask is a question about where a tile's keys
# start against where the block's queries start — Part A's hint 2 asks it.
# %% [markdown]
# ## Part A — causal_fwd_kernel (2 points)
#
# Write the body of `causal_fwd_kernel`: notebook 05's `flash_fwd_kernel` under the causal mask, for a query head
# that may share its keys and values with others. `causal_forward` in the given cell launches it as
#
# ```python
# causal_fwd_kernel[(cdiv(T, block_m), B * H)](
#     qs, ks, vs, o, L, *qs.stride(), 1 / math.sqrt(d), T, d, group,
#     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
# ```
#
# - One program per block of `BLOCK_M` queries (`program_id(0)`) of one query slab (`program_id(1)`, that is
#   $b \cdot H + h$). The prologue gives its rows, its block of $Q$, and the bases of its query slab and of the
#   K/V slab it reads: slab `bh // group`, because the $G$ query heads of a group share one K/V head (§4 says why).
# - Walk the key blocks in steps of `BLOCK_N`, and visit only those the causal mask leaves something in (§1). The
#   check reads from the sanitizer's records which tiles of $K$ your kernel loads: one it did not need is a
#   `dense-walk`, one it needed and skipped a `wrong-values`.
# - Mask elements where the diagonal crosses a tile; a full tile takes notebook 05's update as it is. $T$ need
#   not be a multiple of either block: no load may reach past a slab, and a lane past $T$ must count nowhere.
# - Keep $m$, $\ell$ and the accumulator in `acc_dtype`, give `tl.dot` operands of one dtype, and store this
#   block's rows of $O$ and of $L$ — nothing else.
# %% solution id=causal_fwd_kernel
@triton.jit
def causal_fwd_kernel(
    Q_ptr,  # (B·H, T, d) queries
    K_ptr,  # (B·H_kv, T, d) keys
    V_ptr,  # (B·H_kv, T, d) values
    O_ptr,  # (B·H, T, d) output O
    L_ptr,  # (B·H, T) output L = m + log ℓ per query row, contiguous
    stride_bh,  # elements from one slab to the next (Q, K, V and O alike)
    stride_t,  # elements from one token to the next
    stride_e,  # elements from one head-dim entry to the next
    sm_scale,  # c = 1/√d
    seq_len,  # T
    head_dim,  # d
    group,  # G: query heads per K/V head
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal O = softmax(c·Q Kᵀ) V and L for one block of BLOCK_M queries of one query head.

    Grid (cdiv(T, BLOCK_M), B·H). Element (s, t, e) of a slab tensor sits at ptr + s·stride_bh + t·stride_t +
    e·stride_e; row t of slab bh of L at L_ptr + bh·seq_len + t. Query slab bh reads K/V slab bh // group.
    Query i sees key j only when j ≤ i. Writes O and L for this program's rows, and nothing else.
    """
    bh = tl.program_id(1).to(tl.int64)  # this program's query slab; int64: bh · stride_bh can pass 2³¹
    q_base = bh * stride_bh
    kv_base = (bh // group) * stride_bh  # the K/V head this query head reads
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,) this program's queries
    cols = tl.arange(0, BLOCK_D)  # head-dim lanes
    q_mask = (rows[:, None] < seq_len) & (cols[None, :] < head_dim)
    q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e  # rows of Q, and of O
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    acc_dtype = tl.float64 if q.dtype == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    m = tl.full([BLOCK_M], -float("inf"), dtype=acc_dtype)
    ell = tl.zeros([BLOCK_M], dtype=acc_dtype)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=acc_dtype)
    diagonal = (start_m // BLOCK_N) * BLOCK_N  # the first key block the diagonal crosses
    end = tl.minimum(start_m + BLOCK_M, seq_len)  # past the block's last query: keys no row of it sees
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        if start_n >= diagonal:  # only the tiles the diagonal crosses hold keys some row must not see
            s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        ell = ell * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O_ptr + q_offs, acc / ell[:, None], mask=q_mask)
    tl.store(L_ptr + bh * seq_len + rows, m + tl.log(ell), mask=rows < seq_len)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which key blocks does a query block visit?</summary>
#
# The program's queries are `start_m` … `start_m + BLOCK_M − 1`, and only those below $T$ exist. Which is the last
# key that *any* of them sees? Every key block that starts after it is a skipped tile (§1), so the walk can end
# there: as a bound on the loop, it is the smaller of two numbers. Which key blocks before it could the mask hide
# entirely — any? The keys and values come from the K/V slab the prologue's `kv_base` points at, not from the
# query slab. And the lanes of the last key block past $T$: the loads need a mask against $T$ so that they stay
# inside the slab; does the score of such a key need one of its own, or does the causal comparison already hide it
# from every query that exists?
# If the check says `dense-walk`, your values are right and your kernel loaded tiles the mask hides entirely: where
# did its walk end? If it says `wrong-values` and names a tile it skipped, the walk ended too soon. If it says
# `out-of-bounds` or `race`, a load or a store reached rows that are not this program's: which mask let it through?
#
# </details>
#
# <details><summary>Hint 2 — the diagonal tile</summary>
#
# Query `rows[r]` sees key `keys[c]` when which comparison of the two holds? The mask must act on the scores
# *before* the row max and the exponentials: what does a hidden key add to $m$, to $\ell$ and to the accumulator if
# its score is left as it is and its weight is zeroed only afterwards? A check that says `wrong-values` at the
# diagonal has seen that; one that says `non-finite` found a row that sees no key at all — which row has only one
# key to see, and does your comparison let it see that one? Which tiles need the comparison? A tile whose keys all
# come at or before the block's first query has nothing hidden. With `BLOCK_M` = 32 and `BLOCK_N` = 16, the query
# block that starts at 32 meets the diagonal in key blocks 2 and 3 (§1's right-hand picture): which key block holds
# query `start_m`, and where does that key block start?
#
# </details>
#
# <details><summary>Hint 3 — T = 21 by hand</summary>
#
# $T = 21$, blocks of 16: two programs per head. Program 0 holds queries 0–15. Which key blocks does it visit, of
# which kind, and what does query 3 see in its tile? Program 1 holds queries 16–31, of which 16–20 exist. Which
# key blocks does it visit? In key block 1 (keys 16–31), which keys does query 16 see, and query 20? Key 25 loads as
# the zero vector: what score does query 20 give it before the mask, and after? Query 25 does not exist: its lanes
# compute something — does anything of it reach memory? Then the one row that sees the fewest keys: query 0 sees
# key 0 only. After the masked tile, what are its $m$ and $\ell$, and is anything infinite or NaN? In which dtype
# are $m$, $\ell$ and the accumulator kept, for float64 inputs too? A check that finds your float64 result right only
# to float32 precision has met a sum kept in float32. The key identity
# for the mask: the first tile the diagonal crosses starts where the key block holding the block's first query
# starts, and every tile of the walk from there on is crossed by it; the tiles before it are full.
#
# </details>
# %% test id=test_causal_fwd_kernel points=2
"""causal_fwd_kernel: o against causal scaled_dot_product_attention
(enable_gqa) and L against a masked logsumexp; T 21–45 with blocks (16,16),
(32,16), (16,32), G in {1, 2, 4}, batch 1 and 2, float32 and float64, NaN-
padded slabs and one with the token axis of stride 1; no key tile wholly
above a block's diagonal loaded; a float64 gradcheck through the kernel."""
course.selfcheck.causal_fwd_kernel(causal_fwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.causal_fwd_kernel(causal_fwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The walk ends at the block's last query.** No query of the block sees a key after $\min(s_m +
# \text{BLOCK\_M},\ T) - 1$, with $s_m$ = `start_m`, so the key blocks run from 0 up to, not including, that
# bound — a runtime number, `tl.minimum` of the two, which a Triton loop takes like any other. Every key block
# before the one holding query $s_m$ is full; from that one on, the diagonal crosses each tile the walk visits:
#
# $$\boxed{\;s_n = 0,\ \text{BLOCK\_N},\ \dots\ < \min(s_m + \text{BLOCK\_M},\ T), \qquad
# S_{ij} \leftarrow -\infty \ \text{ where } j > i, \ \text{ on the tiles with } s_n \ge
# \left\lfloor s_m / \text{BLOCK\_N} \right\rfloor \cdot \text{BLOCK\_N}\;}$$
#
# The mask is a `tl.where` on `keys[None, :] <= rows[:, None]` that sets the other scores to `-float("inf")`
# before the row max, so a hidden key counts in neither $m$ nor $\ell$ nor the accumulator; the update after it is
# notebook 05's. Keys past $T$ need no comparison of their own: every query that exists comes before them, so the causal
# comparison hides them already. Every row sees at least its own key, so
# $m$ is finite after the first tile and nothing is NaN. The K and V tiles come from `kv_base`, slab
# `bh // group`.
#
# </details>
#
# **Your kernel's walk, as the sanitizer saw it.** The cell below runs your kernel once on $T = 72$ (blocks of 16)
# under `course.sanitize()` and reads from its records which tiles of $K$ each program loaded. Each tile it loaded
# is marked; a mark on a skipped tile is a tile read for nothing, a diagonal or full tile without one was missed.
# %%
try:
    gen = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(1, 1, T_PIC, 16, generator=gen, dtype=F64).to(DEVICE) for _ in range(3))  # (B, H, T, d)
    with course.sanitize() as report:
        o, _ = causal_forward(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    print(f"o against causal scaled_dot_product_attention: relative error {course.relative_error(o, ref):.0e}")
    print(report)
    if course.INTERPRETED:  # on a GPU nothing is recorded
        read = tiles_read(report.launches[-1], "K_ptr", T_PIC, 16, BLOCK_N)
        kinds = tile_kinds(causal, BLOCK_M, BLOCK_N)
        print(f"tiles read: {len(read)} of {len(kinds)}; read though skipped: "
              f"{sum(kinds[t] == 'skipped' for t in read)}; needed but not read: "
              f"{sum(kind != 'skipped' and t not in read for t, kind in kinds.items())}")
        fig, ax = plt.subplots(figsize=(5.2, 5.6))
        draw_tiles(ax, causal, BLOCK_M, BLOCK_N, "the tiles of K your causal_fwd_kernel loaded (read)",
                   {t: "read" for t in read})
        kinds_legend(fig)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        plt.show()
except Exception as exc:
    finish_first(exc, "Part A")

# %% [markdown]
# ## 2 · What the skip saves
#
# Now count. The cell below launches your kernel on one head for $T$ = 256 to 4,096 with tiles of 128 × 128, as a
# GPU kernel would use, and counts from the sanitizer's records the tiles of $K$ it loaded, against the $n^2$ tiles
# of the dense walk (every program over every key block). The head dim is 1: the walk does not depend on $d$, and a
# $K$ of $4{,}096$ numbers is small enough for the sanitizer to keep every load. The whole cell takes two or three
# seconds in the interpreter, most of it at $T = 4{,}096$ (528 tiles); each doubling of $T$ quadruples it.
# %%
COUNT_BLOCK = 128  # queries and keys per tile in the counting launches
COUNT_T = (256, 512, 1024, 2048, 4096)


def tiles_visited(T):
    """How many tiles of K your causal_fwd_kernel loads for one head of T tokens, from the sanitizer's records."""
    gen = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(1, 1, T, 1, generator=gen).to(DEVICE) for _ in range(3))  # head dim 1 (see above)
    with course.sanitize() as report:
        causal_forward(q, k, v, COUNT_BLOCK, COUNT_BLOCK)
    return len(tiles_read(report.launches[-1], "K_ptr", T, 1, COUNT_BLOCK))


visited = {}  # T -> tiles of K loaded
if not course.INTERPRETED:
    print("The count reads the sanitizer's records, which only the interpreter keeps: run this cell on a CPU.")
else:
    try:
        visited = {T: tiles_visited(T) for T in COUNT_T}
    except Exception as exc:
        finish_first(exc, "Part A")

# %%
if visited:
    print(f"{'T':>6} {'n':>4} {'visited':>8} {'dense':>6} {'share':>6} {'(n+1)/2n':>9}")
    for T, count in visited.items():
        n = cdiv(T, COUNT_BLOCK)
        print(f"{T:6,} {n:4} {count:8,} {n * n:6,} {count / n ** 2:6.3f} {(n + 1) / (2 * n):9.3f}")
    ts = np.array(COUNT_T)
    n = ts / COUNT_BLOCK
    share = [visited[T] / cdiv(T, COUNT_BLOCK) ** 2 for T in COUNT_T]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.loglog(ts, n ** 2, "k--", label="dense walk: n²")
    left.loglog(ts, n * (n + 1) / 2, color="C1", label="n(n + 1) / 2")
    left.loglog(ts, [visited[T] for T in COUNT_T], "o", color="C0", label="your kernel (measured)")
    left.set(xlabel="T", ylabel="tiles of K loaded, one head", title="tiles visited, 128 × 128 tiles")
    right.semilogx(ts, (n + 1) / (2 * n), color="C1", label="tiles: (n + 1) / 2n")
    right.semilogx(ts, share, "o", color="C0", label="your kernel (measured)")
    right.semilogx(ts, (ts + 1) / (2 * ts), ":", color="0.4", label="visible scores: (T + 1) / 2T")
    right.axhline(0.5, color="0.7", lw=0.8)
    right.set(xlabel="T", ylabel="share of the dense walk's tiles (and FLOPs)", ylim=(0.45, 0.8),
              title="what the skip leaves: the curve goes to one half")
    for ax in (left, right):
        ax.set_xticks(ts, [f"{T:,}" for T in COUNT_T], fontsize=8, minor=False)
        ax.set_xticks([], minor=True)
        ax.title.set_fontsize(10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
    T_LONG, D_REAL = COUNT_T[-1], 128  # the longest count, and a Llama-3 head's d
    dense = 4 * T_LONG * T_LONG * D_REAL  # QKᵀ and PV: 2·T·T·d FLOPs each
    kept = 4 * COUNT_BLOCK * COUNT_BLOCK * D_REAL * visited[T_LONG]  # the same two products, per tile visited
    print(f"one head's forward at T = {T_LONG:,}, d = {D_REAL}: dense walk {dense / 1e9:.1f} GFLOP, "
          f"your kernel {kept / 1e9:.1f} GFLOP ({1 - kept / dense:.1%} saved)")

# %% [markdown]
# The measured points sit on $n(n+1)/2$ exactly: the kernel visits what the mask leaves something in, no more. At
# $T = 256$ the two tiles of each side leave 3 of 4 tiles (75%), because the diagonal tiles — half of them hidden
# — are a large share of a small grid; at $T = 4{,}096$, 32 tiles a side, it visits 528 of 1,024 (51.6%), and one
# head's forward at $d = 128$ drops from 8.6 to 4.4 GFLOP. The skip is the whole saving: the element mask on the $n$
# diagonal tiles saves nothing, it only decides which of their scores count. Computing the masked tiles and
# throwing them away — the dense walk — gives the same $O$ at twice the work, and on a GPU at twice the time: a
# causal FlashAttention is nearly twice as fast as a non-causal one at long $T$. The backward (next) saves the same
# half, and it is the larger pass: seven tile products per tile, in its two kernels, against the
# forward's two.
# %% [markdown]
# ## 3 · The backward's two walks
#
# The backward runs notebook 05's two kernels: one program per block of keys finishes $\bar K_j$ and $\bar V_j$,
# walking the blocks of queries (Part C); one program per block of queries finishes $\bar Q_i$, walking the blocks
# of keys (Part B); neither writes what the other writes. The mask enters the backward through $P$ alone. Every term
# of notebook 05's sums carries $P_{ij}$ as a factor — $\bar V_j$ through $P_{ij}^\top \bar O_i$, $\bar Q_i$ and
# $\bar K_j$ through $\bar S_{ij} = P_{ij} \odot (\bar O_i V_j^\top - D_i)$ — so a tile the mask hides entirely adds
# nothing to any of the three: the backward skips the forward's tiles. But the two kernels meet the diagonal from
# opposite sides.
#
# Two things do not change. $D_i = \operatorname{rowsum}(\bar O_i \odot O_i)$ is still right: $O$ already holds
# only the keys each row sees. And $L_i$ is the log of row $i$'s sum over the keys it sees, so $e^{S_{ij} - L_i}$ is
# the right probability where $j \le i$ — and a number that is not 0 where $j > i$. The backward must mask $P$ on
# the diagonal tiles, as the forward masked $S$.
#
# Answer before you look: the $\bar Q$ program of query block $i$ walks along a row of tiles — where must its walk
# stop? The $\bar K, \bar V$ program of key block $j$ walks down a column — which query is the first to see its
# first key, and where must its walk start?
# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 5.4))
i, j = 3, 1  # the query block of a Q̄ program, the key block of a K̄, V̄ program
n = cdiv(T_PIC, BLOCK_M)
draw_tiles(axes[0], causal, BLOCK_M, BLOCK_N, f"Q̄ of query block {i}: a walk along row {i}, key blocks 0 … {i}",
           {(i, jj): f"step {jj}" for jj in range(i + 1)})
draw_tiles(axes[1], causal, BLOCK_M, BLOCK_N,
           f"K̄, V̄ of key block {j}: a walk down column {j}, query blocks {j} … {n - 1}",
           {(ii, j): f"step {ii - j}" for ii in range(j, n)})
kinds_legend(fig)
fig.tight_layout(rect=(0, 0.05, 1, 1))
plt.show()

# %% [markdown]
# The $\bar Q$ walk is the forward's: key blocks 0 up to the one the diagonal crosses, where it stops. The
# $\bar K, \bar V$ walk is its mirror: it *starts* at the diagonal — the query block that holds the column's first
# key — and runs to the last query block, since every later query sees every key of the column. Each kernel visits
# the same $n(n+1)/2$ tiles as the forward, each meets one diagonal tile per program (with square blocks), and in
# each the diagonal tile is the last step of the $\bar Q$ walk and the first of the $\bar K, \bar V$ walk.
# %% [markdown]
# ## Part B — causal_bwd_dq_kernel (2 points)
#
# Write the body of `causal_bwd_dq_kernel`: $\bar Q_i = c \sum_j \bar S_{ij} K_j$ for one block of queries of one
# query head, with $P$ rebuilt from $L$ and $D$ given. `causal_backward` launches it as
#
# ```python
# causal_bwd_dq_kernel[(cdiv(T, block_m), B * H)](
#     qs, ks, vs, dos, Ls, D, dq, *qs.stride(), scale, T, d, group,
#     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
# ```
#
# - The prologue loads the block's $Q_i$, $\bar O_i$, $L_i$ and $D_i$ (zeros past $T$) and points at its K/V
#   slab, `bh // group`, as in Part A.
# - Walk the key blocks this block's queries see (§3), and no other: the check counts the tiles of $K$ you load.
# - Rebuild each tile of $P$ from $L$, 0 wherever the mask hides a key; then notebook 05's $\bar S$ and the
#   product into $\bar Q_i$, summed in `acc_dtype`, each `tl.dot` fed operands of one dtype.
# - Store this block's rows of $\bar Q$ once, after the walk, and nothing else. Where does $c$ go?
# %% solution id=causal_bwd_dq_kernel
@triton.jit
def causal_bwd_dq_kernel(
    Q_ptr,  # (B·H, T, d) queries
    K_ptr,  # (B·H_kv, T, d) keys
    V_ptr,  # (B·H_kv, T, d) values
    DO_ptr,  # (B·H, T, d) upstream gradient Ō
    L_ptr,  # (B·H, T) saved L, contiguous
    Delta_ptr,  # (B·H, T) D = rowsum(Ō ⊙ O), contiguous
    DQ_ptr,  # (B·H, T, d) result Q̄
    stride_bh,  # strides shared by every slab tensor
    stride_t,
    stride_e,
    sm_scale,  # c
    seq_len,  # T
    head_dim,  # d
    group,  # G
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal Q̄ for one block of BLOCK_M queries of one query head. Grid (cdiv(T, BLOCK_M), B·H), the layout
    of causal_fwd_kernel. Writes Q̄ for this program's rows, and nothing else."""
    bh = tl.program_id(1).to(tl.int64)
    q_base = bh * stride_bh
    kv_base = (bh // group) * stride_bh
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < seq_len
    q_mask = (rows[:, None] < seq_len) & (cols[None, :] < head_dim)
    q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e  # rows of Q, Ō and Q̄
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    do = tl.load(DO_ptr + q_offs, mask=q_mask, other=0.0)
    L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
    D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
    acc_dtype = tl.float64 if q.dtype == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=acc_dtype)
    for start_n in range(0, tl.minimum(start_m + BLOCK_M, seq_len), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None])
        p = tl.where(seen, tl.exp(s - L[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - D[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ_ptr + q_offs, dq * sm_scale, mask=q_mask)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — where does the key walk stop?</summary>
#
# The same question as Part A's hint 1: which is the last key any query of this block sees? Is the bound of the
# $\bar Q$ walk the forward's, or another — which tiles does $P$ make zero? Then the lanes that
# are not data: a row past $T$ loads $Q$, $\bar O$, $L$ and $D$ as 0 — what is $e^{S - L}$ for it, and does that
# row's $\bar S$ reach memory? A key past $T$ loads as the zero vector: which queries that exist would see it?
# If the check says `dense-walk`, your values are right and your walk went past the diagonal; if it names a tile
# you skipped, the walk stopped too soon. `out-of-bounds` or `race`: a load or the store reached rows that are not
# this program's, or past the slab — which mask let them through? `non-finite`: which lanes gave $e^{S - L}$ an
# $L$ that is not theirs?
#
# </details>
#
# <details><summary>Hint 2 — P under the mask, and the dtypes of the products</summary>
#
# Where $j > i$, what is $e^{S_{ij} - L_i}$: zero, or the weight key $j$ would have had without the mask? So which
# value must your tile of $P$ hold there — and does $\bar S_{ij} = P_{ij} \odot (\dots)$ then vanish there on its
# own? Which `tl` function puts that value on exactly the hidden lanes, and which lanes are they on a diagonal tile?
# A check that says `wrong-values` at the diagonal found an unmasked $P$. Then the products: $\bar O_i V_j^\top$
# multiplies two loaded tiles; $\bar S_{ij} K_j$ multiplies a tile you computed (in `acc_dtype`) by a loaded one.
# Which of the two must change dtype for `tl.dot`, and what does a half-precision run lose if the sum does instead?
# And the sum itself is kept in `acc_dtype`: a float64 result right only to float32 precision had it in float32.
#
# </details>
#
# <details><summary>Hint 3 — one step of the walk by hand</summary>
#
# $T = 21$, blocks of 16. Program 1 holds queries 16–31 (16–20 exist). How many key blocks does it walk? In its
# last step, key block 1, which keys does query 17 see, and what does your tile of $P$ hold in its row at keys 18
# and 25? Write query 17's $\bar Q$ as a sum over keys: $\bar Q_{17} = c \sum_{j \le 17} \bar S_{17, j} K_j$ —
# which terms come from step 0, which from step 1, and which lanes of step 1 add exactly zero? The factor $c$ is the
# same for every term: inside the loop, or once at the store?
#
# </details>
# %% test id=test_causal_bwd_dq_kernel points=2
"""causal_bwd_dq_kernel: dq against the autograd of causal
scaled_dot_product_attention, L and D given, the same sizes and layouts; the
key walk stops at the block's diagonal; a float64 gradcheck through the
kernel."""
course.selfcheck.causal_bwd_dq_kernel(causal_bwd_dq_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.causal_bwd_dq_kernel(causal_bwd_dq_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# The forward's walk, with notebook 05's $\bar Q$ loop inside:
#
# $$\boxed{\;\bar Q_i = c \sum_{s_n < \min(s_m + \text{BLOCK\_M},\ T)} \bar S_{ij} K_j, \qquad
# \bar S_{ij} = P_{ij} \odot (\bar O_i V_j^\top - D_i), \qquad
# P_{ij} = \begin{cases} e^{S_{ij} - L_i} & j \le i,\ i < T \\ 0 & \text{otherwise} \end{cases}\;}$$
#
# In the kernel: the loop over key blocks ends at `tl.minimum(start_m + BLOCK_M, seq_len)`; the tile of $P$ is a
# `tl.where` whose condition is the row being below $T$ and the key at or before the row, `tl.exp(s - L[:, None])`
# where it holds and 0 elsewhere — on every tile, which costs one comparison per element and leaves nothing to
# remember. $\bar S$ is cast to $K$'s dtype for its product, the running sum stays in `acc_dtype`, and $c$
# multiplies the sum once, at the store.
#
# </details>
# %% [markdown]
# ## 4 · Grouped-query attention
#
# Multi-head attention gives each of its $H$ query heads its own key and value head. When a model generates text,
# the keys and values of every earlier token are kept — the *KV cache* — and every new token reads all of them
# back: at long contexts and large batches the cache, not the weights, fills the GPU's memory and sets the speed
# of decoding. Grouped-query attention (GQA; Ainslie et al., 2023) keeps $H$ query heads but only
# $H_{kv} = H / G$ key/value heads: query heads $gG, \dots, gG + G - 1$ share K/V head $g$. $G = 1$ is multi-head
# attention (MHA), $G = H$ multi-query attention. Llama 3, Mistral and Qwen 2 use $G$ = 4 to 8.
#
# Per token and per layer the cache holds a key and a value of $d$ numbers for each K/V head: $2 \cdot H_{kv}
# \cdot d$ numbers. The cell below puts bytes on it for a 32-head, $d = 128$ model in bfloat16 — Llama-3-8B and
# Mistral-7B have exactly that shape, with $H_{kv} = 8$; Llama-2-7B has the same shape with $H_{kv} = 32$ (MHA).
# %%
H_MODEL, D_MODEL, LAYERS = 32, 128, 32  # Llama-3-8B and Mistral-7B: 32 query heads of d = 128, 32 layers
BF16_BYTES = 2
WEIGHTS_GIB = 8.03e9 * BF16_BYTES / 2**30  # Llama-3-8B's 8.03 billion parameters in bfloat16


def kv_cache_bytes(group, tokens=1, layers=1):
    """Bytes of bfloat16 KV cache for `tokens` tokens over `layers` layers, with G = group query heads per K/V head."""
    h_kv = H_MODEL // group
    return 2 * h_kv * D_MODEL * BF16_BYTES * tokens * layers  # a key and a value of d numbers per K/V head


GROUPS = {1: "G = 1 (MHA: Llama-2-7B)", 4: "G = 4 (Llama-3-8B, Mistral-7B)", 8: "G = 8 (H_kv = 4)"}
for group, name in GROUPS.items():
    print(f"{name:32}: {kv_cache_bytes(group) / 1024:4.0f} KiB per token and layer; one 8,192-token sequence over "
          f"{LAYERS} layers: {kv_cache_bytes(group, 8192, LAYERS) / 2**30:.2f} GiB")
print(f"Llama-3-8B's weights in bfloat16: {WEIGHTS_GIB:.1f} GiB")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.bar(range(len(GROUPS)), [kv_cache_bytes(g) / 1024 for g in GROUPS], color=["C7", "C0", "C2"])
left.set_xticks(range(len(GROUPS)), [name.replace(" (", "\n(") for name in GROUPS.values()], fontsize=8)
left.set(ylabel="KiB per token and layer", title=f"KV cache, H = {H_MODEL}, d = {D_MODEL}, bfloat16")
contexts = np.array([1024, 2048, 4096, 8192, 16384, 32768])
for (group, name), colour in zip(GROUPS.items(), ["C7", "C0", "C2"]):
    right.plot(contexts, [kv_cache_bytes(group, 8 * t, LAYERS) / 2**30 for t in contexts], "o-", color=colour,
               label=name)
right.axhline(WEIGHTS_GIB, color="k", ls="--", lw=0.8, label="the model's weights")
right.set(xscale="log", xlabel="context length (tokens)", ylabel="GiB",
          title=f"KV cache of a batch of 8 sequences, {LAYERS} layers")
for ax in (left, right):
    ax.title.set_fontsize(10)
right.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# With multi-head attention a batch of 8 sequences of 8,192 tokens needs 32 GiB of cache, twice the weights; GQA
# with $G = 4$ cuts it to 8 GiB. That is why every recent model uses it. In training there is no cache, and the
# forward changes by one line — query slab `bh` reads K/V slab `bh // group`, so the $G$ programs of a group read
# the same tiles of $K$ and $V$ (from the L2 cache, on a GPU).
#
# **The backward is where GQA costs.** K/V head $g$ was used by $G$ query heads, so its gradient is a sum over them,
# the reduction of a broadcast (notebook 01): with $\bar K^{(h)}$ and $\bar V^{(h)}$ notebook 05's $\bar K$ and
# $\bar V$ for query head $h$ against K/V head $g$,
#
# $$\bar K_g = \sum_{h = gG}^{gG + G - 1} \bar K^{(h)}, \qquad \bar V_g = \sum_{h = gG}^{gG + G - 1} \bar V^{(h)}.$$
#
# Part C's launch has one program per (key block, *query* head), so the $G$ programs of a key block and a group each
# hold a share of the same rows of $\bar K_g$ and $\bar V_g$: a sum across programs again, as $\bar W$'s was in
# notebook 09.
# %% [markdown]
# ## Part C — causal_bwd_dkdv_kernel (3 points)
#
# Write the body of `causal_bwd_dkdv_kernel`: $\bar K$ and $\bar V$ for one block of keys, from one query head,
# into its group's K/V head. `causal_backward` launches it as
#
# ```python
# causal_bwd_dkdv_kernel[(cdiv(T, block_n), B * H)](
#     qs, ks, vs, dos, Ls, D, dk, dv, *qs.stride(), scale, T, d, group,
#     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
# ```
#
# with `dk` and `dv` shaped as the K/V slabs, **zeroed**, in the sums' dtype (float32; float64 for float64 inputs).
#
# - `program_id(0)` is the key block, `program_id(1)` the *query* slab `bh`; the prologue loads the block's $K_j$
#   and $V_j$ from K/V slab `bh // group` and points at the rows of $\bar K$ and $\bar V$ it contributes to.
# - Walk the query blocks that see this block's keys (§3), and no other; rebuild $P$ from $L$ (0 where the mask
#   hides a key), and add notebook 05's shares of this query head into $\bar K_j$ and $\bar V_j$, in `acc_dtype`.
# - The $G$ programs of a group hold shares of the same rows of `DK` and `DV`. How they get there is yours to
#   choose, and the sanitizer watches: two programs storing to one element with plain stores is a `race`, and
#   rows holding one head's share alone are a `batch-reduction`.
# - Nothing outside this block's rows of `DK` and `DV` is written; lanes past $T$ count nowhere.
# %% solution id=causal_bwd_dkdv_kernel
@triton.jit
def causal_bwd_dkdv_kernel(
    Q_ptr,  # (B·H, T, d) queries
    K_ptr,  # (B·H_kv, T, d) keys
    V_ptr,  # (B·H_kv, T, d) values
    DO_ptr,  # (B·H, T, d) upstream gradient Ō
    L_ptr,  # (B·H, T) saved L, contiguous
    Delta_ptr,  # (B·H, T) D, contiguous
    DK_ptr,  # (B·H_kv, T, d) result K̄, zeroed, float32 (float64 for float64 inputs)
    DV_ptr,  # (B·H_kv, T, d) result V̄, zeroed, float32 (float64 for float64 inputs)
    stride_bh,  # strides shared by every slab tensor
    stride_t,
    stride_e,
    sm_scale,  # c
    seq_len,  # T
    head_dim,  # d
    group,  # G
    BLOCK_M: tl.constexpr,  # queries per step of the loop
    BLOCK_N: tl.constexpr,  # keys per program
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal K̄ and V̄ of one block of BLOCK_N keys, from one query head, into its group's K/V head.

    Grid (cdiv(T, BLOCK_N), B·H): the G programs of query slabs bh with one bh // group all hold shares of the
    same rows of K̄ and V̄. Writes K̄ and V̄ rows of this program's keys, and nothing else.
    """
    bh = tl.program_id(1).to(tl.int64)
    q_base = bh * stride_bh
    kv_base = (bh // group) * stride_bh
    start_n = tl.program_id(0) * BLOCK_N
    keys = start_n + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
    kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e  # rows of K, V, K̄ and V̄
    k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
    v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
    acc_dtype = tl.float64 if k.dtype == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
    for start_m in range((start_n // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):  # the first query that sees key start_n
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < seq_len
        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
        q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e
        q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
        do = tl.load(DO_ptr + q_offs, mask=q_mask, other=0.0)
        L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
        D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None])
        p = tl.where(seen, tl.exp(s - L[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        ds = p * (tl.dot(do, tl.trans(v)) - D[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    tl.atomic_add(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # the group's G programs add into one K/V head
    tl.atomic_add(DV_ptr + kv_offs, dv, mask=kv_mask)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — where does the query walk start?</summary>
#
# The program's keys are `start_n` … `start_n + BLOCK_N − 1`. Which is the first query that sees key `start_n`?
# Which query block holds it, and where does that block start — is it `start_n` itself when `BLOCK_M` differs from
# `BLOCK_N`? Every query block before it is a skipped tile of this column; every one after it sees all the column's
# keys, so the walk runs to $T$. Then the lanes that are not data: a query past $T$ loads $Q$, $\bar O$, $L$ and $D$
# as 0 — what would your $P$ give it, and what must it? A key past $T$ collects something in its row of
# $\bar K_j$: what keeps that row out of memory? And the walk's first tile is a diagonal one: which of its
# elements must your $P$ hold as 0 (Part B's question, seen down a column)?
# If the check says `dense-walk`, your walk started above the diagonal; if it names a tile you skipped, it started
# too late.
#
# </details>
#
# <details><summary>Hint 2 — G programs, one row of K̄</summary>
#
# Program $(j, bh)$ holds query head $bh$'s share of rows `start_n` … of $\bar K$ and $\bar V$ of K/V slab
# `bh // group`; so do the $G - 1$ programs $(j, bh')$ with the same `bh' // group`. If each stores its share with
# a plain store, which one lands — and what does the sanitizer call two plain stores to one address? If each
# stored only where it alone writes, which heads' shares would be missing (`batch-reduction`)? Two ways out, as
# questions. Can an addition into memory be made indivisible, so that $G$ programs' additions all land, in
# whatever order they run — which `tl` operation does that, and why did the launcher zero `dk` and `dv` and make
# them float32? Or: could one program of the group compute all $G$ shares itself, looping over the group's query
# heads, while the other $G - 1$ programs do nothing — how does a program know it is that one, and which query
# slabs does its loop read? What does each way cost: programs that run, a fixed order of the additions, memory?
#
# </details>
#
# <details><summary>Hint 3 — the scale, and one lane past T, by hand</summary>
#
# $c$ sits in $S$ and once more in $\bar K_j = c \sum_i \bar S_{ij}^\top Q_i$; every term added into $\bar K_j$
# carries it, and $\bar V_j$ has none: apply it inside the loop, or once before $\bar K_j$ leaves the program?
# $T = 21$, blocks of 16: the program of key block 1 holds keys 16–31, of which 16–20 exist. At which query block
# does its walk start, and how many steps does it take? In that step, what does your tile of $P$ hold in the row of
# query 18 at key 17, at key 19, and in the column of key 25? What does that column add to row 9 of $\bar V_j$,
# and what keeps that row out of `DV` — with a store, and with an atomic addition? Last, the dtypes: `dk` and `dv`
# are sums over many query blocks, kept in `acc_dtype` — float64 for float64 inputs, as the buffers are. A float64
# result right only to float32 precision had a sum in float32.
#
# </details>
# %% test id=test_causal_bwd_dkdv_kernel points=3
"""causal_bwd_dkdv_kernel: dk and dv summed over each group of G query heads
against the autograd of causal scaled_dot_product_attention with enable_gqa,
the same sizes and layouts; no two programs store to one element without an
atomic; the query walk starts at the block holding the block's first key; a
float64 gradcheck through the kernel."""
course.selfcheck.causal_bwd_dkdv_kernel(causal_bwd_dkdv_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.causal_bwd_dkdv_kernel(causal_bwd_dkdv_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **The walk starts at the diagonal.** The first query that sees key $s_n$ = `start_n` is query $s_n$ itself; the
# query block that holds it starts at $\lfloor s_n / \text{BLOCK\_M} \rfloor \cdot \text{BLOCK\_M}$, and every block
# from there to $T$ sees some of the column:
#
# $$\boxed{\;\bar V_j \mathrel{+}= \sum_{s_m \ge \lfloor s_n / \text{BLOCK\_M} \rfloor \cdot \text{BLOCK\_M}}
# P_{ij}^\top \bar O_i, \qquad \bar K_j \mathrel{+}= c \sum_{s_m \ge \lfloor s_n / \text{BLOCK\_M} \rfloor \cdot
# \text{BLOCK\_M}} \bar S_{ij}^\top Q_i, \qquad \text{added, not stored, into K/V head } \lfloor bh / G \rfloor\;}$$
#
# with $P$ rebuilt as in Part B, 0 outside the mask and on rows past $T$. The loop's range starts at the block that
# holds `start_n` and ends at `seq_len`; `dk` and `dv` are summed in `acc_dtype`; $c$ multiplies `dk` once at the
# end. The group's sum: the reference adds each program's share into the zeroed float32 buffers with
# `tl.atomic_add`, under the store's mask, so the $G$ additions to an element all land, in whatever order the
# programs run. The other correct design — the group's first query head (`bh % group == 0`) loops over the $G$
# query slabs of its group and stores the total, while the other programs return at once — is just as right; §5
# compares them, and a third.
#
# </details>
#
# ## 5 · The group sum: what each design costs
#
# Every correct design gives the same $\bar K$ and $\bar V$ up to rounding. What they cost differs, and the
# numbers below are for a training step of Llama-3-8B's attention: 4 sequences of 8,192 tokens, $H = 32$,
# $H_{kv} = 8$, $d = 128$, tiles of 128 keys, $\bar K$ and $\bar V$ of one layer.
# %%
SEQS, T_TRAIN, H_KV, KEY_BLOCK = 4, 8192, 8, 128  # a Llama-3-8B training step's attention, one layer
G_TRAIN = H_MODEL // H_KV
key_blocks = cdiv(T_TRAIN, KEY_BLOCK)
kv_elements = SEQS * H_KV * T_TRAIN * D_MODEL  # elements of K̄ (and of V̄)
DESIGNS = {  # design: (programs that work, additions per element of K̄ in an order the GPU picks, extra bytes)
    "atomics into float32": (key_blocks * SEQS * H_MODEL, G_TRAIN, 2 * kv_elements * 4),
    "first head loops over the group": (key_blocks * SEQS * H_KV, 0, 0),
    "a K̄, V̄ per query head, summed after": (key_blocks * SEQS * H_MODEL, 0, 2 * kv_elements * (G_TRAIN - 1) * 2),
}
print(f"{'design':38} {'programs':>8} {'/ 132 SMs':>9} {'unordered adds':>14} {'extra memory':>12}")
for design, (programs, unordered, extra) in DESIGNS.items():
    print(f"{design:38} {programs:8,} {programs / 132:9.1f} {unordered:14} {extra / 2**20:8.0f} MiB")

# %% [markdown]
# - **Atomics** keep every program busy — $4 \cdot 32 \cdot 64 = 8{,}192$ programs, 62 waves on an H100's 132 SMs —
#   and each program's walk is one head long. The price: $\bar K$ and $\bar V$ must live in float32 buffers, zeroed
#   before and converted after (here 256 MiB for one layer, beside the bfloat16 ones), and each element receives
#   $G = 4$ additions in whatever order the programs finish. Float addition is not associative, so the last bits
#   change from run to run (notebook 09, Part C): the backward is not deterministic.
# - **One program per group** makes $G$ times fewer programs do the work, each walking $G$ heads in a fixed
#   order: deterministic, no float32 buffer needed (the sum lives in registers and is stored once, in $K$'s dtype),
#   no atomic traffic. The price is parallelism: 2,048 programs, 15.5 waves here — plenty — but a fine-tuning step
#   of one 2,048-token sequence has $16 \cdot 8 = 128$ key-block programs for 132 SMs, and each runs 4 times as
#   long: the GPU waits on the slowest.
# - **A $\bar K$, $\bar V$ per query head**, written in bfloat16 into buffers of $H$ heads instead of $H_{kv}$ and
#   summed over each group by a second pass: every program busy and deterministic, at $G - 1$ extra heads of
#   $\bar K$ and $\bar V$ (384 MiB here) and one more pass over them. FlashAttention-2's CUDA backward does this
#   for grouped-query attention — and meets its $\bar Q$ with float32 atomics.
#
# Libraries keep more than one of these, because none wins everywhere: the shape, the GPU and whether the run must be
# reproducible decide.
#
# **What the sanitizer sees.** A plain store of each program's share is the bug Part C's check calls a `race`. The
# small kernel below shows it without any attention: program $h$ holds a share of row $\lfloor h / G \rfloor$ of
# `OUT` (every lane the number $h + 1$), and puts it there with a plain store or with an atomic addition. With
# $H = 8$ and $G = 4$ the right rows are $1 + 2 + 3 + 4 = 10$ and $5 + 6 + 7 + 8 = 26$.
# %%
@triton.jit
def share_of_a_group(
    OUT_ptr,  # (H // group, n) float32, zeroed: one row per group
    n,  # the row's length
    group,  # programs per row
    ATOMIC: tl.constexpr,  # add the share atomically, or store it plainly
    BLOCK: tl.constexpr,  # a power of two ≥ n
):
    """Program h puts its share, h + 1 in every lane, into row h // group of OUT."""
    h = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    row = OUT_ptr + (h // group) * n + lanes  # the group's row: every program of the group aims here
    share = tl.zeros([BLOCK], dtype=tl.float32) + (h + 1)
    if ATOMIC:
        tl.atomic_add(row, share, mask=lanes < n)
    else:
        tl.store(row, share, mask=lanes < n)


for atomic in (False, True):
    results = []
    for seed in range(3):  # three program orders: on a GPU, the order the SMs happen to finish in
        out = torch.zeros(2, 12, device=DEVICE)  # (H // G, n)
        with course.shuffled_programs(seed), course.sanitize() as report:
            share_of_a_group[(8,)](out, 12, 4, ATOMIC=atomic, BLOCK=16)
        results.append(out[:, 0].tolist())
    print(f"{'atomic addition' if atomic else 'plain store'}: rows in three program orders {results}")
    print(report)
    if course.INTERPRETED:
        report.plot("OUT_ptr")
        plt.show()

# %% [markdown]
# The plain store leaves in each row the share of whichever program of the group ran last — a different one in
# each order — and the sanitizer names the race and the programs, with the race outlined in red in the picture,
# whatever the values: on a CPU the programs run one at a time, so only the record of who touched what can show a
# race that a GPU would turn into a wrong answer. The atomic additions are striped by all four programs of a row,
# without red, and give 10 and 26 in every order.
#
# **Your backward's two walks, as the sanitizer saw them.** The cell below runs your Part B and Part C kernels on
# $T = 72$ with $G = 2$ (two query heads, one K/V head) and reads from the records which tiles each program loaded:
# tiles of $K$ for the $\bar Q$ kernel, tiles of $Q$ for the $\bar K, \bar V$ kernel.
# %%
try:
    gen = torch.Generator().manual_seed(12)
    d_pic = 8  # a K̄ of 72 × 8 elements: small enough to draw element by element
    q, do = (torch.randn(1, 2, T_PIC, d_pic, generator=gen, dtype=F64).to(DEVICE) for _ in range(2))  # (B, H, T, d)
    k, v = (torch.randn(1, 1, T_PIC, d_pic, generator=gen, dtype=F64).to(DEVICE) for _ in range(2))  # (B, H_kv, T, d)
    o, L = causal_forward(q, k, v)
    with course.sanitize() as report:
        grads = causal_backward(q, k, v, o, L, do)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True), leaves, do)
    print("q̄, k̄, v̄ against SDPA's autograd, relative errors:",
          ", ".join(f"{course.relative_error(a, b):.0e}" for a, b in zip(grads, ref)))
    print(report)
    if course.INTERPRETED:
        dq_launch, dkdv_launch = report.launches
        dkdv_read = tiles_read(dkdv_launch, "Q_ptr", T_PIC, d_pic, BLOCK_M)  # (key block, query block) pairs
        walks = {"Q̄ (Part B): tiles of K read": tiles_read(dq_launch, "K_ptr", T_PIC, d_pic, BLOCK_N),
                 "K̄, V̄ (Part C): tiles of Q read": {(i, j) for j, i in dkdv_read}}
        fig, axes = plt.subplots(1, 2, figsize=(10, 5.4))
        for ax, (title, read) in zip(axes, walks.items()):
            draw_tiles(ax, causal, BLOCK_M, BLOCK_N, title, {t: "read" for t in read})
        kinds_legend(fig)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        plt.show()
        report.plot("DK_ptr", launch=1)
        plt.show()
except Exception as exc:
    finish_first(exc, "Parts A, B and C")

# %% [markdown]
# The last picture is `DK`, the float32 buffer of $\bar K$, in the $\bar K, \bar V$ launch: each element written by
# the two programs of its key block — one per query head of the group — striped without red if they added
# atomically, one colour if one of them wrote the group's total.
# %% [markdown]
# ## 6 · Packed sequences
#
# A training batch is a fixed number of token slots, and documents come in every length. Two ways to fill the
# slots: **padding** — one document per row, each row filled up to the longest document of the batch with tokens
# that are computed and thrown away — or **packing** — documents laid end to end in one long row, no slot wasted.
# Packing needs one change to attention: a plain causal mask over the packed row would let each document see the
# end of the one before it. Each query must see only its own document's keys, and only the earlier ones: the mask
# is block-diagonal, a causal triangle per document.
#
# FlashAttention's varlen API (`flash_attn_varlen_func`) describes a packed batch by **`cu_seqlens`**, the
# cumulative sequence lengths: `n_docs + 1` int32 offsets, starting at 0, ending at the total, so that
# document $b$ holds tokens `cu[b]` … `cu[b + 1] − 1` of the packed tensors $(\text{total}, H, d)$ — no batch axis
# at all — and `max_seqlen`, the longest document, sizes the grid. Below: documents of 5, 35, 1 and 29 tokens, so
# `cu_seqlens = [0, 5, 40, 41, 70]` and `max_seqlen = 35`. On the left, the tiles of one causal kernel run over the
# packed row; on the right, the tiles of Part D's kernel, which gives each document its own grid of tiles, starting
# at its first token.
# %%
CU_PIC = [0, 5, 40, 41, 70]  # documents of 5, 35, 1 and 29 tokens
DOC_COLOURS = ["C3", "C0", "C2", "C4"]


def packed_mask(cu):
    """(total, total) boolean: True where query i sees key j — same document, j ≤ i."""
    total = cu[-1]
    doc = np.repeat(np.arange(len(cu) - 1), np.diff(cu))  # (total,): each token's document
    return (doc[:, None] == doc[None, :]) & np.tril(np.ones((total, total), dtype=bool))


def draw_documents(ax, cu, block_m, block_n, title):
    """Each document's own tiles, from its first token, kind-coloured and outlined in the document's colour, up to
    the document's end; dashed, how far its last tiles reach past that end, into the next document."""
    visible = packed_mask(cu)
    total = cu[-1]
    ax.imshow(np.where(visible, 0.55, 0.0), cmap="Greys", vmin=0, vmax=1, extent=(0, total, total, 0),
              interpolation="nearest")
    for b, (first, end) in enumerate(zip(cu[:-1], cu[1:])):
        colour = DOC_COLOURS[b % len(DOC_COLOURS)]
        for (i, j), kind in tile_kinds(np.tril(np.ones((end - first, end - first), dtype=bool)), block_m,
                                       block_n).items():
            if kind == "skipped":
                continue  # never visited
            x, y = first + j * block_n, first + i * block_m
            ax.add_patch(Rectangle((x, y), min(x + block_n, end) - x, min(y + block_m, end) - y,
                                   facecolor=KIND_COLOUR[kind], alpha=0.55, edgecolor=colour, lw=1.4))
            if x + block_n > end or y + block_m > end:  # the tile's lanes past the document's end
                ax.add_patch(Rectangle((x, y), min(x + block_n, total) - x, min(y + block_m, total) - y,
                                       fill=False, edgecolor=colour, lw=1.0, ls="--"))
    ax.set(xlim=(0, total), ylim=(total, 0), xlabel="key token", ylabel="query token")
    ax.set_title(title, fontsize=9)


fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5.6))
visible = packed_mask(CU_PIC)
counts = list(tile_kinds(visible, BLOCK_M, BLOCK_N).values())
draw_tiles(left, visible, BLOCK_M, BLOCK_N, "one causal kernel over the packed row: "
           + ", ".join(f"{counts.count(kind)} {kind}" for kind in KIND_COLOUR))
for edge in CU_PIC[1:-1]:
    for line in (left.axhline, left.axvline):
        line(edge, color="k", lw=0.8, ls=":")
draw_documents(right, CU_PIC, BLOCK_M, BLOCK_N, "Part D's kernel: each document's own tiles\n(dashed: how far "
               "they reach past the document's end)")
kinds_legend(fig)
fig.tight_layout(rect=(0, 0.05, 1, 1))
plt.show()
print(f"grid: (cdiv(max_seqlen, BLOCK_M), H, n_docs) = ({cdiv(35, BLOCK_M)}, H, {len(CU_PIC) - 1}); programs per "
      f"head that hold a query: {sum(cdiv(e - f, BLOCK_M) for f, e in zip(CU_PIC[:-1], CU_PIC[1:]))} of "
      f"{cdiv(35, BLOCK_M) * (len(CU_PIC) - 1)}")

# %% [markdown]
# **Over the packed row** (left; dotted lines are the document boundaries) the block-diagonal mask makes tiles of
# all three kinds in new places: tiles that straddle a boundary are diagonal tiles even far below the diagonal — a
# query near the start of document 3 sees only a few of the tile's keys — and whole tiles between documents are
# skipped though they lie below the diagonal. A causal kernel with a document mask gets the answer right and still
# visits every tile below the diagonal.
#
# **Part D's kernel** (right) never sees another document's tile: program $(i, h, b)$ walks document $b$'s own
# tiles, at offsets from `cu[b]`. Its tiles are aligned to the document, not to the packed row, so the last tile
# of a document reaches past its end — into the next document's tokens (dashed). Those lanes are real tokens, not
# padding. A row mask against the total instead of the document's end stores this program's numbers into the next
# document's first rows of $O$ — which that document's program stores too; a key mask against the total loads the
# next document's keys for nothing (the causal comparison keeps their weight at 0); and a walk in packed tokens from
# token 0 lets each query see every earlier document: a finite, plausible, wrong answer. The grid is sized for the
# longest document, 3 blocks of 16 for 35 tokens, so the programs of shorter documents past their end have nothing
# to do: of the 12 programs per head, 7 hold a query.
#
# **What packing saves.** The cell below draws the lengths of 64 documents from a heavy-tailed distribution
# (log-normal, median 600 tokens, clipped to 16 … 8,192) and counts the work of a batch made of them: tokens
# through the model, and causal attention scores — padded to the longest document, or packed.
# %%
DOCS, MEDIAN, CONTEXT = 64, 600, 8192
lengths = np.clip(np.random.default_rng(10).lognormal(np.log(MEDIAN), 1.0, DOCS).astype(int), 16, CONTEXT)
work = {  # (tokens through every layer, causal attention scores)
    "padded to the longest": (DOCS * lengths.max(), DOCS * lengths.max() * (lengths.max() + 1) / 2),
    "packed (varlen)": (lengths.sum(), (lengths * (lengths + 1) / 2).sum()),
}
(pad_tokens, pad_scores), (pack_tokens, pack_scores) = work.values()
print(f"{DOCS} documents, {lengths.min()} to {lengths.max():,} tokens (median {int(np.median(lengths))}); "
      f"padding computes {pad_tokens / pack_tokens:.1f}× the tokens and {pad_scores / pack_scores:.1f}× the "
      f"attention scores of packing")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.hist(lengths, bins=np.geomspace(16, CONTEXT, 25), color="C0")
left.set(xscale="log", xlabel="document length (tokens)", ylabel="documents", title="the lengths drawn")
at = np.arange(2)
for shift, (name, (tokens, scores)), colour in zip((-0.2, 0.2), work.items(), ("C7", "C0")):
    ratios = [tokens / pack_tokens, scores / pack_scores]
    right.bar(at + shift, ratios, width=0.4, color=colour, label=name)
    for x, ratio in zip(at + shift, ratios):
        right.text(x, ratio, f"{ratio:.1f}×", ha="center", va="bottom", fontsize=8)
right.set_xticks(at, ["tokens computed", "attention scores computed"])
right.set(ylabel="× packing's work", yscale="log", title="the same batch, padded or packed")
for ax in (left, right):
    ax.title.set_fontsize(10)
right.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Padding pays for the longest document in every row: the tail of the length distribution sets the cost of the
# whole batch — here more than 4 times the tokens and more than 10 times the attention scores, so three tokens in
# four are padding. Packing computes each document's tokens once, and with a varlen kernel each document's
# attention costs its own $\ell^2/2$, whatever sits beside it. Packing without the
# document mask would cost the packed row's $\text{total}^2/2$ — and let documents read each other.
# %% [markdown]
# ## Part D — varlen_fwd_kernel (2 points)
#
# Write the body of `varlen_fwd_kernel`: Part A's causal forward inside one document of a packed batch.
# `varlen_forward` launches it as
#
# ```python
# varlen_fwd_kernel[(cdiv(max_seqlen, block_m), H, n_docs)](
#     qs, ks, vs, o, L, cu_seqlens, *qs.stride(), 1 / math.sqrt(d), total, d, group,
#     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
# ```
#
# with the packed tensors turned into $(H, \text{total}, d)$ slabs, one per head, sharing one set of strides.
#
# - `program_id(2)` is the document $b$, `program_id(1)` the query head $h$ (its K/V head `h // group`),
#   `program_id(0)` the block of `BLOCK_M` queries *inside the document*. The document's first token and its length
#   come from `cu_seqlens`; a program whose block starts at or past the document's end returns at once.
# - Query token $i$ of document $b$ sees key token $j$ when `cu[b]` $\le j \le i$: causal inside the document, and
#   nothing of any other. Walk only the document's key blocks this block's queries see.
# - No load or store may reach another document's tokens as data: rows and keys past the document's end are the
#   next document's, and count nowhere.
# - Store $O$ for this program's rows and $L$ at `L_ptr + h·total + token`; sums in `acc_dtype`.
# %% solution id=varlen_fwd_kernel
@triton.jit
def varlen_fwd_kernel(
    Q_ptr,  # (H, total, d) packed queries
    K_ptr,  # (H_kv, total, d) packed keys
    V_ptr,  # (H_kv, total, d) packed values
    O_ptr,  # (H, total, d) output O
    L_ptr,  # (H, total) output L, contiguous
    CU_ptr,  # (n_docs + 1,) int32: document b holds tokens cu[b] … cu[b + 1] − 1
    stride_h,  # elements from one head to the next (Q, K, V and O alike)
    stride_t,  # elements from one token to the next
    stride_e,  # elements from one head-dim entry to the next
    sm_scale,  # c
    total,  # tokens in the packed row: cu[n_docs]
    head_dim,  # d
    group,  # G
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal attention inside one document, for one block of its queries and one query head.

    Grid (cdiv(max_seqlen, BLOCK_M), H, n_docs). Query token i of document b sees key token j when
    cu[b] ≤ j ≤ i. Writes O and L (at L_ptr + h·total + token) for this program's rows, and nothing else.
    """
    h = tl.program_id(1).to(tl.int64)
    doc = tl.program_id(2)
    cols = tl.arange(0, BLOCK_D)
    ### BEGIN SOLUTION
    first = tl.load(CU_ptr + doc).to(tl.int64)  # the document's first token
    n = (tl.load(CU_ptr + doc + 1) - first).to(tl.int32)  # its length
    start_m = tl.program_id(0) * BLOCK_M
    if start_m >= n:  # a document shorter than the longest has fewer blocks: this one has nothing to do
        return
    q_base = h * stride_h + first * stride_t
    kv_base = (h // group) * stride_h + first * stride_t
    rows = start_m + tl.arange(0, BLOCK_M)  # positions inside the document
    q_mask = (rows[:, None] < n) & (cols[None, :] < head_dim)
    q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    acc_dtype = tl.float64 if q.dtype == tl.float64 else tl.float32
    m = tl.full([BLOCK_M], -float("inf"), dtype=acc_dtype)
    ell = tl.zeros([BLOCK_M], dtype=acc_dtype)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=acc_dtype)
    for start_n in range(0, tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e
        kv_mask = (keys[:, None] < n) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        ell = ell * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O_ptr + q_offs, acc / ell[:, None], mask=q_mask)
    tl.store(L_ptr + h * total + first + rows, m + tl.log(ell), mask=rows < n)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — the document's geometry</summary>
#
# `cu_seqlens` holds `n_docs + 1` offsets. Which two of them give document $b$'s first token and its length — and
# how many loads is that? The grid has `cdiv(max_seqlen, BLOCK_M)` blocks per document whatever its length: with
# `cu = [0, 5, 40]` and blocks of 16 that is 3, and document 0 has 5 tokens. Which of its programs hold a query,
# and what must the others do? Why is it safe for them to do it before any load or store? Then the addresses: token
# $t$ of document $b$ is packed token `cu[b] + t`. Positions inside the document can then be counted from 0, as in
# Part A, if the base offsets of $Q$, $O$ and $K$, $V$ move to the document's first token — which of them use the
# query head and which the K/V head? (The first token is an index into tensors of `total · d` numbers per head:
# which integer type keeps `first · stride_t` from overflowing on a long packed batch?) Last, the walk: which keys
# can this block's queries see at all — only their own document's, up to which position? A walk that also visits
# the keys of other documents, or past the block's last query, and masks them all away is right and wasted: the
# check calls it `dense-walk`. `out-of-bounds` or `race`: a load or a store reached tokens that are not this
# program's — a block past the document's end that did not return, or rows past the end (hint 2).
#
# </details>
#
# <details><summary>Hint 2 — the masks: the document's end, and causal inside it</summary>
#
# The packed row does not end at the document's end: the next document starts there. The rows: a block that runs
# past the end holds the next document's first tokens. Against which length must the rows' load mask and the two
# stores be — `total`, or the document's own length? A store masked against `total` writes this program's numbers
# into the next document's first rows of $O$ and $L$, rows that the next document's own program stores too: what
# does the sanitizer call that? The keys: inside the document the rule is Part A's. With positions counted from the
# document's start, which comparison says that a query sees a key — and can a key past the document's end ever pass
# it for a row that exists? Then what does a key mask against the document's length buy? (The check reads from the
# sanitizer's records whether anything was loaded from another document.) And the other direction: a walk in
# packed tokens from token 0, with a comparison of packed tokens, lets a query see every earlier document — the
# check says `wrong-values` and names the boundary; a comparison of a packed token with a position lets some rows
# see no key at all (`non-finite`).
#
# </details>
#
# <details><summary>Hint 3 — cu = [0, 5, 40] by hand</summary>
#
# Blocks of 16; three programs per document and head. Document 0: tokens 0–4. Program 0 holds positions 0–15, of
# which 0–4 exist; its one key block has lanes for tokens 0–15. Which of them are document 1's, and which score does
# the causal comparison already give them in the rows 0–4? Its rows 5–15 are document 1's tokens 5–15: what keeps
# them out of $O$? Programs 1 and 2 of document 0: what do they do? Document 1: tokens 5–39, 35 positions. Its
# program 2 holds positions 32–47, of which 32–34 exist (tokens 37–39). How many key blocks does it walk, and in
# the last one, which lanes are data? Which positions does position 34 (token 39) see? Then add a third document
# after token 40: which of its tokens would program 2 of document 1 read, and write, with masks against `total`?
# The sums ($m$, $\ell$, the accumulator) are Part A's, in `acc_dtype`: float64 for float64 inputs.
#
# </details>
# %% test id=test_varlen_fwd_kernel points=2
"""varlen_fwd_kernel: o and L against causal attention run document by
document, documents of 1 to 50 tokens with boundaries inside tiles, G in {1,
2, 4}, float32 and float64, NaN-padded slabs; no key tile read wholly in
another document or above the diagonal."""
course.selfcheck.varlen_fwd_kernel(varlen_fwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.varlen_fwd_kernel(varlen_fwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# **Part A inside one document, at offsets from its first token.** Two loads give the geometry: the first token
# $f$ = `cu[b]` (as int64) and the length $n$ = `cu[b + 1] − cu[b]`; a program whose block starts at or past $n$
# returns before it touches anything. The bases of $Q$, $O$ (head $h$) and of $K$, $V$ (head `h // group`) move
# to token $f$, and from there every position is counted inside the document, masked against $n$ — never against
# `total`:
#
# $$\boxed{\;O_i = \sum_{0 \le j \le i} P_{ij} V_j \ \text{ over positions } i, j < n \text{ of document } b,
# \qquad s_n = 0,\ \text{BLOCK\_N},\ \dots\ < \min(s_m + \text{BLOCK\_M},\ n)\;}$$
#
# The score mask is Part A's comparison of positions, `keys[None, :] <= rows[:, None]`; the loads of $K$ and $V$
# are masked on `keys < n` and those of $Q$ and both stores on `rows < n`, so the next document's tokens are
# neither read nor written; $L$ goes to `L_ptr + h * total + first +
# rows` under `rows < n`. Documents of one token, and documents shorter than a block, take the same path.
#
# </details>
#
# **Your kernel on the packed batch, as the sanitizer saw it.** The cell below runs your kernel on §6's documents
# with two query heads and one K/V head, compares each document with causal attention run on it alone, and draws,
# for every query token, the key tokens its program loaded.
# %%
try:
    cu = torch.tensor(CU_PIC, dtype=torch.int32, device=DEVICE)
    total, max_len = CU_PIC[-1], max(np.diff(CU_PIC))
    gen = torch.Generator().manual_seed(14)
    q = torch.randn(total, 2, 16, generator=gen, dtype=F64).to(DEVICE)  # (total, H, d)
    k, v = (torch.randn(total, 1, 16, generator=gen, dtype=F64).to(DEVICE) for _ in range(2))  # (total, H_kv, d)
    with course.sanitize() as report:
        o, L = varlen_forward(q, k, v, cu, int(max_len))
    worst = 0.0
    for first, end in zip(CU_PIC[:-1], CU_PIC[1:]):
        alone = F.scaled_dot_product_attention(*(t[first:end].transpose(0, 1) for t in (q, k, v)), is_causal=True,
                                               enable_gqa=True).transpose(0, 1)  # (n, H, d): the document alone
        worst = max(worst, course.relative_error(o[first:end], alone))
    print(f"o against each document attended alone: largest relative error {worst:.0e}")
    print(report)
    if course.INTERPRETED:
        launch = report.launches[-1]
        program, element = launch.touched["K_ptr"]["load"]
        ids = np.array(launch.programs, dtype=np.int64)[program]  # (loads, 3): block, head, document
        read = np.zeros((total, total), dtype=bool)  # query token × key token its program loaded
        elsewhere = set()  # (document, key token) for keys loaded from another document than the program's
        for (block, _, doc), key in zip(ids.tolist(), (element // 16).tolist()):
            first, end = CU_PIC[doc], CU_PIC[doc + 1]
            read[first + block * BLOCK_M:min(first + (block + 1) * BLOCK_M, end), key] = True
            if not first <= key < end:
                elsewhere.add((doc, key))
        visible = packed_mask(CU_PIC)
        print(f"keys loaded from another document: {len(elsewhere)}; visible keys never loaded: "
              f"{int((visible & ~read).sum())}")
        fig, ax = plt.subplots(figsize=(5.4, 5.4))
        ax.imshow(np.where(visible, 0.6, 0.0) + np.where(read, 0.4, 0.0), cmap="Blues", vmin=0, vmax=1,
                  extent=(0, total, total, 0), interpolation="nearest")
        for edge in CU_PIC[1:-1]:
            ax.axhline(edge, color="k", lw=0.8, ls=":")
            ax.axvline(edge, color="k", lw=0.8, ls=":")
        ax.set(xlabel="key token", ylabel="query token",
               title="each query's keys: dark, visible and loaded by its program;\n"
                     "mid, visible and never loaded; pale, loaded and masked")
        ax.title.set_fontsize(9)
        fig.tight_layout()
        plt.show()
except Exception as exc:
    finish_first(exc, "Part D")

# %% [markdown]
# ## 7 · Attention as it is trained, end to end
#
# Your four kernels together: `CausalAttention` (Parts A–C) against PyTorch's `scaled_dot_product_attention` with
# `is_causal=True` and `enable_gqa=True`, forward and backward, on $B = 2$, $H = 4$ query heads sharing one K/V head
# ($G = 4$), $T = 75$ — a multiple of no block — and $d = 24$; then `varlen_forward` (Part D) on a packed batch,
# against each document run alone, once through SDPA and once through your own `causal_forward`. On a GPU each
# kernel is used once it passes its part's check, which runs it on padded buffers first (a kernel that writes past
# its tensors can corrupt the notebook's memory). On the CPU the cell runs them under `course.sanitize()`, which
# keeps every access inside the tensors' memory and says where one was not.
# %%
PARTS = {"A": "causal_fwd_kernel", "B": "causal_bwd_dq_kernel", "C": "causal_bwd_dkdv_kernel",
         "D": "varlen_fwd_kernel"}


def passes_check(name):
    """Whether the kernel called `name` passes its part's visible check; the check's printout is swallowed."""
    check, kernel = getattr(course.selfcheck, name), globals()[name]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(kernel)
    except AssertionError:  # a failed check, a stub's "not implemented" included
        return False
    return True


# On the CPU the sanitizer below stands in for the checks (run again, they would take seconds).
READY = {part: course.INTERPRETED or passes_check(name) for part, name in PARTS.items()}
missing = [f"Part {part} ({PARTS[part]})" for part, ok in READY.items() if not ok]
if missing:
    print("not passing yet: " + ", ".join(missing))
dtype = F64 if course.INTERPRETED else torch.float32  # float64 dots are exact in the interpreter; TF32 on a GPU
gen = torch.Generator().manual_seed(15)

with course.sanitize() as summary_report:
    try:
        if READY["A"] and READY["B"] and READY["C"]:
            q, do = (torch.randn(2, 4, 75, 24, generator=gen).to(DEVICE, dtype) for _ in range(2))  # (B, H, T, d)
            k, v = (torch.randn(2, 1, 75, 24, generator=gen).to(DEVICE, dtype) for _ in range(2))  # (B, H_kv, T, d)
            mine = [t.clone().requires_grad_(True) for t in (q, k, v)]
            theirs = [t.clone().requires_grad_(True) for t in (q, k, v)]
            o_mine = CausalAttention.apply(*mine)
            o_ref = F.scaled_dot_product_attention(*theirs, is_causal=True, enable_gqa=True)
            grads = torch.autograd.grad(o_mine, mine, do) + torch.autograd.grad(o_ref, theirs, do)
            pairs = zip(("o", "q̄", "k̄", "v̄"), (o_mine, *grads[:3]), (o_ref, *grads[3:]))
            print("CausalAttention against SDPA (is_causal, enable_gqa), relative errors: "
                  + ", ".join(f"{name} {course.relative_error(a, b):.0e}" for name, a, b in pairs))
    except Exception as exc:
        finish_first(exc, "Parts A, B and C")
    try:
        if READY["A"] and READY["D"]:
            cu_list = [0, 37, 38, 70, 99]  # documents of 37, 1, 32 and 29 tokens
            cu = torch.tensor(cu_list, dtype=torch.int32, device=DEVICE)
            q = torch.randn(cu_list[-1], 4, 24, generator=gen).to(DEVICE, dtype)  # (total, H, d)
            k, v = (torch.randn(cu_list[-1], 1, 24, generator=gen).to(DEVICE, dtype) for _ in range(2))  # H_kv = 1
            o, _ = varlen_forward(q, k, v, cu, max(np.diff(cu_list)).item())
            errors = {"SDPA": 0.0, "your causal_forward": 0.0}
            for first, end in zip(cu_list[:-1], cu_list[1:]):
                doc = [t[first:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # one document: (1, heads, n, d)
                alone = {"SDPA": F.scaled_dot_product_attention(*doc, is_causal=True, enable_gqa=True),
                         "your causal_forward": causal_forward(*doc)[0]}
                for name, ref in alone.items():
                    errors[name] = max(errors[name], course.relative_error(o[first:end], ref[0].transpose(0, 1)))
            print("varlen_forward against each document alone, largest relative errors: "
                  + ", ".join(f"{name} {err:.0e}" for name, err in errors.items()))
    except Exception as exc:
        finish_first(exc, "Parts A and D")
if not summary_report.clean:
    print(summary_report)

# %% [markdown]
# ## What to take away
#
# - **Causal attention is a walk over tiles.** A query block visits the key blocks up to its last query and no
#   further; only the tiles the diagonal crosses need the element mask, applied to the scores before the max. The
#   skip — not the mask — halves the FLOPs: $n(n+1)/2$ of $n^2$ tiles, 50.8% at $T = 8{,}192$ with 128 × 128 tiles.
# - **The backward skips the same tiles from both sides.** $P = 0$ outside the mask removes whole tiles from every
#   sum: the $\bar Q$ walk over key blocks stops at the diagonal, the $\bar K, \bar V$ walk over query blocks starts
#   at it, and $P$ rebuilt from $L$ must be masked on the diagonal tiles, because $e^{S - L}$ is not 0 there by
#   itself.
# - **GQA moves a reduction into the backward.** Sharing one K/V head among $G$ query heads cuts the KV cache $G$
#   times (4 KiB instead of 16 KiB per token and layer for Llama-3-8B); in the backward the $G$ heads' shares of
#   $\bar K$ and $\bar V$ meet across programs — atomics into float32 (every program busy, not deterministic), one
#   program per group (deterministic, $G$ times fewer programs) or per-head buffers summed after (memory). Plain
#   stores race.
# - **Packing is a mask and an offset.** `cu_seqlens` gives each document's first token and length; a per-document
#   grid of tiles never visits another document, every mask is against the document's end — the next document
#   starts there — and padding's waste, set by the longest document of the batch, disappears.
#
# Next, notebook 11: the MLP around attention — GELU and SwiGLU's backward, what to save and what to recompute, and
# RoPE, whose backward is the rotation by $-\theta$.

"""A linear layer y = x w + b: the forward GEMM and both backward GEMMs in Triton, behind autograd.

For x (..., K) flattened to (M, K), w (K, N) and b (N,):
    forward:   y = x w + b                      (M, N)
    backward:  x̄ = ȳ wᵀ                         (M, K), a GEMM reducing over N
               w̄ = xᵀ ȳ                         (K, N), a GEMM reducing over the M rows
               b̄ = Σ_m ȳ                        (N,)
One tiled GEMM kernel does the forward and x̄: x̄ = ȳ wᵀ is y = x w with ȳ for x and wᵀ for w, and wᵀ is
w read with its two strides swapped (no copy). Each program owns one BLOCK_M × BLOCK_N tile of the output
and walks the reduced axis BLOCK_K at a time; programs are ordered in groups of GROUP_M tile rows so that
neighbours share the tiles of B they read (L2 reuse, as in Triton's matmul tutorial).

w̄ reduces over M, the longest axis (tokens), while its output (K × N) may hold few tiles. Two strategies:
- ``dw_strategy="splitk"`` (default, deterministic): the rows are cut into SPLIT slices; program (i, j, s)
  writes the float32 (float64 for float64) partial of tile (i, j) over slice s into PW (SPLIT, K, N), and
  the programs with i = 0 also write slice s's column sums of ȳ into PB (SPLIT, N): b̄ fused into the same
  read of ȳ, with one writer per element. A second pass sums the SPLIT partials of every element in one
  fixed order and rounds once to w's dtype: the same bits on every run.
- ``dw_strategy="atomic"``: the same tiles added with ``tl.atomic_add`` into a zeroed float32 (K, N)
  buffer, rounded once at the end. No partial buffer, but the order of the adds depends on which program
  finishes first, so the low bits of w̄ may change from run to run on a GPU. b̄ then by its own
  reduction of ȳ (per-slice column sums, then the same fixed-order pass).

Under ``torch.autocast`` the op casts x, w and b to the autocast dtype, as ``torch.nn.functional.linear``
does, and the gradients flow back to the original dtypes through those casts.

Limitations: float16/float32/float64 everywhere, bfloat16 on a GPU; every sum is kept in float32 (float64
for float64). float32 GEMMs follow ``torch.get_float32_matmul_precision()``: "highest" (PyTorch's default)
multiplies in full float32, "high" and "medium" allow TF32 on the tensor cores. K and N must be at least 1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, autocast_to_lower, check_floating, interpreted, launch_target, target_name

DW_STRATEGIES = ("splitk", "atomic")

# ----------------------------------------------------------------------------- configurations

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) by target and dtype class: of the GEMM kernel (output
# tile BLOCK_M × BLOCK_N, reduction step BLOCK_K), then of the w̄ kernels (output tile BLOCK_K × BLOCK_N, a
# step of BLOCK_M rows; they also hold a transposed x tile, and the split-K kernel a row of column sums, so
# some need smaller steps). Each compiles without a spill in 16 and 32 bits and within the target's shared
# memory (`python -m kernels.compile_check --op linear --full`); float64 is for checks, not speed.
_GPU_CONFIGS = {
    # sm_75: Triton has no tensor-core tl.dot there (its dots are FMAs in float32, the 16-bit inputs upcast) and no
    # software pipelining: float32's tiles in one stage; the 16-bit GEMM on 8 warps (on 4 it spills 384 B).
    ("sm_75", "16-bit"): ((64, 64, 32, 8, 1), (32, 64, 64, 8, 1)),
    ("sm_75", "fp32"): ((64, 64, 32, 4, 1), (32, 64, 64, 8, 1)),
    ("sm_75", "fp64"): ((32, 32, 16, 4, 1), (32, 32, 16, 4, 1)),
    ("sm_80", "16-bit"): ((128, 128, 32, 4, 3), (128, 128, 32, 4, 3)),
    ("sm_80", "fp32"): ((64, 64, 32, 4, 3), (32, 64, 64, 8, 3)),
    ("sm_80", "fp64"): ((32, 32, 16, 4, 2), (32, 32, 16, 4, 2)),
    # sm_86 and sm_89 (99 KB of shared memory per block): sm_80's tiles take at most 48 KB.
    ("sm_86", "16-bit"): ((128, 128, 32, 4, 3), (128, 128, 32, 4, 3)),
    ("sm_86", "fp32"): ((64, 64, 32, 4, 3), (32, 64, 64, 8, 3)),
    ("sm_86", "fp64"): ((32, 32, 16, 4, 2), (32, 32, 16, 4, 2)),
    ("sm_89", "16-bit"): ((128, 128, 32, 4, 3), (128, 128, 32, 4, 3)),
    ("sm_89", "fp32"): ((64, 64, 32, 4, 3), (32, 64, 64, 8, 3)),
    ("sm_89", "fp64"): ((32, 32, 16, 4, 2), (32, 32, 16, 4, 2)),
    ("sm_90", "16-bit"): ((128, 128, 64, 8, 3), (128, 128, 64, 8, 3)),
    ("sm_90", "fp32"): ((64, 64, 32, 4, 3), (64, 64, 32, 4, 3)),
    ("sm_90", "fp64"): ((32, 32, 16, 4, 2), (32, 32, 16, 4, 2)),
    ("gfx942", "16-bit"): ((128, 128, 32, 8, 2), (64, 128, 64, 8, 2)),
    ("gfx942", "fp32"): ((64, 64, 32, 4, 2), (64, 64, 32, 4, 2)),
    ("gfx942", "fp64"): ((32, 32, 16, 4, 1), (32, 32, 16, 4, 1)),
}
# The interpreter runs a tile as one numpy array: one small tile for every dtype (tl.dot needs sides ≥ 16).
_INTERPRETER_CONFIG = (32, 32, 32, 1, 1)
GROUP_M = 8
SUM_BLOCK = 1024  # elements per program of the fixed-order pass over partials


def _config(dtype: torch.dtype, dw: bool = False) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the GEMM kernel, or of the w̄ kernels when ``dw``."""
    if interpreted():
        return _INTERPRETER_CONFIG
    kind = {torch.float32: "fp32", torch.float64: "fp64"}.get(dtype, "16-bit")
    return _GPU_CONFIGS[(target_name(), kind)][dw]


def _input_precision(dtype: torch.dtype) -> str:
    """How tl.dot multiplies: TF32 for float32 only where PyTorch's matmuls may use it, else exact."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return "ieee"


def splits(m: int, tiles: int, block_m: int) -> tuple[int, int]:
    """(SPLIT, rows per split) of w̄'s reduction over m rows when its output has ``tiles`` tiles.

    More slices mean more programs: tiles × SPLIT should fill the GPU (2 programs per SM) when w̄ alone
    has too few tiles (a narrow layer over many tokens). But every slice writes a float32 partial of
    all of w̄ that the second pass reads again, so a slice must read far more than it writes: at least
    MIN_ROWS_PER_SPLIT rows, whose x and ȳ tiles (rows × (BLOCK_K + BLOCK_N) elements) are then four
    times the BLOCK_K × BLOCK_N partial it writes. At transformer shapes (K = N = 4096) w̄ has
    over a thousand tiles and SPLIT is 1. The interpreter wants few programs; 8 exercise the split.
    """
    if interpreted():
        programs, min_rows = 8, block_m
    else:
        programs, min_rows = 2 * launch_target().multiprocessor_count, MIN_ROWS_PER_SPLIT
    split = max(1, min(triton.cdiv(programs, tiles), triton.cdiv(m, min_rows)))
    rows = triton.cdiv(triton.cdiv(m, split), block_m) * block_m  # whole BLOCK_M steps per slice
    return triton.cdiv(m, rows), rows


MIN_ROWS_PER_SPLIT = 256

# ----------------------------------------------------------------------------- kernels


@triton.jit
def _matmul_kernel(
    A_ptr,  # (M, K): x for y, ȳ for x̄
    B_ptr,  # (K, N): w for y, wᵀ (w with its strides swapped) for x̄
    C_ptr,  # (M, N) result, written
    BIAS_ptr,  # (N,) added to every row when HAS_BIAS
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """C = A B (+ bias): one BLOCK_M × BLOCK_N tile of C per program, the K axis walked BLOCK_K at a time."""
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    # Groups of GROUP tile rows, column by column: consecutive programs share B's tiles while they are in L2.
    first_m = (pid // (GROUP * tiles_n)) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % group_rows
    pid_n = (pid % (GROUP * tiles_n)) // group_rows
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # int64 row and column offsets: a (8192 × 4096) operand's last element lies past 2³¹ in bytes, not in
    # elements, but a taller one would not.
    a_ptrs = A_ptr + rm.to(tl.int64)[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = B_ptr + rk[:, None] * stride_bk + rn.to(tl.int64)[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision=PRECISION).to(ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if HAS_BIAS:
        acc += tl.load(BIAS_ptr + rn, mask=rn < N, other=0.0).to(ACC)[None, :]
    c_ptrs = C_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn.to(tl.int64)[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _xt_dy_tile(X_ptr, DY_ptr, ks, ns, M, N, K, rows_per_split, stride_xm, stride_xk, stride_dym, stride_dyn,
                WITH_COLSUM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                ACC: tl.constexpr, PRECISION: tl.constexpr):
    """(xᵀȳ over this program's slice of rows for the tile (ks, ns), Σ ȳ over those rows when WITH_COLSUM)."""
    start = tl.program_id(2).to(tl.int64) * rows_per_split
    end = tl.minimum(start + rows_per_split, M)
    acc = tl.zeros([BLOCK_K, BLOCK_N], dtype=ACC)
    colsum = tl.zeros([BLOCK_N], dtype=ACC)
    for m0 in range(0, rows_per_split, BLOCK_M):
        ms = start + m0 + tl.arange(0, BLOCK_M)
        xt = tl.load(X_ptr + ms[None, :] * stride_xm + ks[:, None] * stride_xk,
                     mask=(ms[None, :] < end) & (ks[:, None] < K), other=0.0)  # (BLOCK_K, BLOCK_M): xᵀ
        dy = tl.load(DY_ptr + ms[:, None] * stride_dym + ns[None, :] * stride_dyn,
                     mask=(ms[:, None] < end) & (ns[None, :] < N), other=0.0)  # (BLOCK_M, BLOCK_N)
        acc += tl.dot(xt, dy, input_precision=PRECISION).to(ACC)
        if WITH_COLSUM:
            colsum += tl.sum(dy.to(ACC), axis=0)
    return acc, colsum


@triton.jit
def _dw_splitk_kernel(
    X_ptr,  # (M, K)
    DY_ptr,  # (M, N)
    PW_ptr,  # (SPLIT, K, N) contiguous partials of w̄, written
    PB_ptr,  # (SPLIT, N) contiguous partials of b̄, written when HAS_BIAS
    M, N, K,
    rows_per_split,
    stride_xm, stride_xk,
    stride_dym, stride_dyn,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Grid (tiles of K, tiles of N, SPLIT): program (i, j, s) writes tile (i, j) of partial s; with HAS_BIAS
    the programs i = 0 also write slice s's column sums of ȳ, one program per element of PB."""
    ks = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2).to(tl.int64)
    acc, colsum = _xt_dy_tile(X_ptr, DY_ptr, ks, ns, M, N, K, rows_per_split, stride_xm, stride_xk, stride_dym,
                              stride_dyn, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, ACC, PRECISION)
    # (SPLIT · K · N) passes 2³¹ at SPLIT = 128 and K = N = 4096: the split's offset is int64.
    tl.store(PW_ptr + split * K * N + ks.to(tl.int64)[:, None] * N + ns[None, :], acc.to(PW_ptr.dtype.element_ty),
             mask=(ks[:, None] < K) & (ns[None, :] < N))
    if HAS_BIAS:
        if tl.program_id(0) == 0:  # one writer per element of PB: the other tile rows hold the same sums
            tl.store(PB_ptr + split * N + ns, colsum.to(PB_ptr.dtype.element_ty), mask=ns < N)


@triton.jit
def _dw_atomic_kernel(
    X_ptr,  # (M, K)
    DY_ptr,  # (M, N)
    DW_ptr,  # (K, N) contiguous float32 (float64) w̄, zero before the launch
    M, N, K,
    rows_per_split,
    stride_xm, stride_xk,
    stride_dym, stride_dyn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ACC: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Grid (tiles of K, tiles of N, SPLIT): program (i, j, s) adds slice s's xᵀȳ into tile (i, j) of w̄."""
    ks = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc, _ = _xt_dy_tile(X_ptr, DY_ptr, ks, ns, M, N, K, rows_per_split, stride_xm, stride_xk, stride_dym,
                         stride_dyn, False, BLOCK_M, BLOCK_N, BLOCK_K, ACC, PRECISION)
    # Atomic: the SPLIT programs of one tile add into the same elements, in whichever order they finish.
    tl.atomic_add(DW_ptr + ks.to(tl.int64)[:, None] * N + ns[None, :], acc.to(DW_ptr.dtype.element_ty),
                  mask=(ks[:, None] < K) & (ns[None, :] < N))


@triton.jit
def _sum_rows_kernel(
    IN_ptr,  # (R, L) rows to add
    OUT_ptr,  # (CHUNKS, L) contiguous: row c is the sum of IN's rows [c·rows_per_chunk, (c+1)·rows_per_chunk)
    R, L,
    rows_per_chunk,
    stride_r, stride_l,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """Grid (cdiv(L, BLOCK), CHUNKS): the rows of one chunk added in order, one BLOCK of columns per program.

    With one chunk this is the fixed-order second pass over partials; with several, per-slice column sums.
    """
    cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    chunk = tl.program_id(1).to(tl.int64)
    start = chunk * rows_per_chunk
    end = tl.minimum(start + rows_per_chunk, R)
    total = tl.zeros([BLOCK], dtype=ACC)
    for r in range(start, end):
        total += tl.load(IN_ptr + r * stride_r + cols * stride_l, mask=cols < L, other=0.0).to(ACC)
    tl.store(OUT_ptr + chunk * L + cols, total.to(OUT_ptr.dtype.element_ty), mask=cols < L)


# ----------------------------------------------------------------------------- host


def _check_inputs(x, w, bias, dw_strategy: str) -> None:
    for name, t in (("x", x), ("w", w)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if w.ndim != 2:
        raise ValueError(f"w must be 2-D (in_features K, out_features N), as y = x @ w; got shape {tuple(w.shape)}")
    if x.ndim == 0 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"x's last dimension must equal w's first (K = {w.shape[0]}, w is {tuple(w.shape)}); "
                         f"got x of shape {tuple(x.shape)}")
    if 0 in w.shape:
        raise ValueError(f"w has shape {tuple(w.shape)}; a linear layer needs at least one input and one output feature")
    if dw_strategy not in DW_STRATEGIES:
        raise ValueError(f"dw_strategy must be one of {', '.join(map(repr, DW_STRATEGIES))}; got {dw_strategy!r}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (w.shape[1],):
            got = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise ValueError(f"bias must have shape ({w.shape[1]},), w's out_features N; got {got}")
    for name, t in (("w", w), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}; put x, w and bias on one device")
    check_floating("x", x)
    for name, t in (("w", w), ("bias", bias)):
        if t is not None and t.dtype != x.dtype:
            raise TypeError(f"{name} has dtype {str(t.dtype).removeprefix('torch.')} but x has "
                            f"{str(x.dtype).removeprefix('torch.')}; give x, w and bias one dtype")


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a (M, K) @ b (K, N) (+ bias) by the GEMM kernel, for any strides of a and b; the result in a's dtype."""
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)
    if m == 0:
        return c
    bm, bn, bk, warps, stages = _config(a.dtype)
    _matmul_kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](
        a, b, c, bias if bias is not None else c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP=GROUP_M, ACC=acc_dtype(a.dtype),
        PRECISION=_input_precision(a.dtype), num_warps=warps, num_stages=stages)
    return c


def sum_rows(t: torch.Tensor, out_dtype: torch.dtype, chunks: int = 1) -> torch.Tensor:
    """(chunks, L): the sums of ``chunks`` consecutive slices of t's rows (R, L), each added in a fixed order."""
    r, l = t.shape  # noqa: E741
    rows_per_chunk = triton.cdiv(r, chunks) if r else 0
    out = torch.empty(chunks, l, dtype=out_dtype, device=t.device)
    _sum_rows_kernel[(triton.cdiv(l, SUM_BLOCK), chunks)](
        t, out, r, l, rows_per_chunk, t.stride(0), t.stride(1), BLOCK=SUM_BLOCK, ACC=acc_dtype(t.dtype))
    return out


def linear_forward(x2: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y = x2 w (+ bias) for x2 (M, K)."""
    return matmul(x2, w, bias)


def grad_input(dy2: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x̄ = ȳ wᵀ (M, K): the forward's kernel, w read transposed through its strides."""
    return matmul(dy2, w.t())


def grad_weight(dy2: torch.Tensor, x2: torch.Tensor, w: torch.Tensor, has_bias: bool, dw_strategy: str = "splitk"):
    """(w̄ = xᵀȳ in w's dtype, b̄ = Σ_m ȳ or None) for ȳ (M, N), x (M, K); w̄ reduced by ``dw_strategy``."""
    (m, k), n = x2.shape, w.shape[1]
    acc_t = acc_torch_dtype(x2.dtype)
    bm, bn, bk, warps, stages = _config(x2.dtype, dw=True)
    split, rows = splits(m, triton.cdiv(k, bk) * triton.cdiv(n, bn), bm)
    grid = (triton.cdiv(k, bk), triton.cdiv(n, bn), split)
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, ACC=acc_dtype(x2.dtype), PRECISION=_input_precision(x2.dtype),
                  num_warps=warps, num_stages=stages)
    args = (m, n, k, rows, x2.stride(0), x2.stride(1), dy2.stride(0), dy2.stride(1))
    db = None
    if dw_strategy == "splitk":
        pw = torch.empty(split, k, n, dtype=acc_t, device=x2.device)
        pb = torch.empty(split, n, dtype=acc_t, device=x2.device)
        _dw_splitk_kernel[grid](x2, dy2, pw, pb, *args, HAS_BIAS=has_bias, **common)
        dw = sum_rows(pw.view(split, k * n), w.dtype).view(k, n)  # the fixed-order second pass
        if has_bias:
            db = sum_rows(pb, w.dtype).view(n)
    else:
        acc = torch.zeros(k, n, dtype=acc_t, device=x2.device)
        _dw_atomic_kernel[grid](x2, dy2, acc, *args, **common)
        dw = acc.to(w.dtype)
        if has_bias:  # b̄ by its own reduction: per-slice column sums of ȳ, then the fixed-order pass
            db = sum_rows(sum_rows(dy2, acc_t, chunks=split), w.dtype).view(n)
    return dw, db


def linear_backward(dy2: torch.Tensor, x2: torch.Tensor, w: torch.Tensor, has_bias: bool, dw_strategy: str = "splitk"):
    """(x̄, w̄, b̄ or None) for ȳ (M, N), x (M, K), w (K, N); w̄ by ``dw_strategy``."""
    return (grad_input(dy2, w), *grad_weight(dy2, x2, w, has_bias, dw_strategy))


class LinearFunction(torch.autograd.Function):
    """Saves x and w; the backward's three products come from the two GEMM kernels and a fixed-order sum."""

    @staticmethod
    def forward(ctx, x, w, bias, dw_strategy):
        k, n = w.shape
        x2 = x.reshape(-1, k)
        y = linear_forward(x2, w, bias)
        ctx.save_for_backward(x, w)
        ctx.has_bias, ctx.dw_strategy = bias is not None, dw_strategy
        return y.view(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        k, n = w.shape
        if x.numel() == 0:  # no rows: nothing to launch, and every gradient is zero
            db = torch.zeros(n, dtype=w.dtype, device=w.device) if ctx.has_bias else None
            return torch.zeros_like(x), torch.zeros_like(w), db, None
        dy2, x2 = dy.reshape(-1, n).to(x.dtype), x.reshape(-1, k)
        # Only the products autograd asks for: a first layer's input, or a frozen weight, needs no GEMM.
        dx = grad_input(dy2, w).view(x.shape) if ctx.needs_input_grad[0] else None
        dw, db = None, None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            dw, db = grad_weight(dy2, x2, w, ctx.has_bias, ctx.dw_strategy)
        return dx, dw, db, None


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
           dw_strategy: str = "splitk") -> torch.Tensor:
    """y = x @ w (+ bias) for x (..., K), w (K, N), bias (N,); differentiable in all three.

    Matches ``torch.nn.functional.linear(x, w.t(), bias)``. ``dw_strategy`` picks how w̄ is reduced over
    the rows: "splitk" (partials and a fixed-order sum: bitwise reproducible) or "atomic".
    """
    if isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor):
        x, w, bias = autocast_to_lower(x, w, bias)
    _check_inputs(x, w, bias, dw_strategy)
    return LinearFunction.apply(x, w, bias, dw_strategy)

"""Bandwidth benchmark of the reference kernels against torch eager and torch.compile.

    python -m kernels.bench softmax [--dtypes float32 bfloat16] [--rows 4096] [--cols 256 1024 ...]
    python -m kernels.bench cross_entropy | layer_norm | rms_norm
    python -m kernels.bench swiglu [--cols 14336]   # rows = tokens, cols = the MLP's width F
    python -m kernels.bench rope [--cols 4096]      # rows = positions T (B 1), cols = H·D with D 128; half-split
    python -m kernels.bench cross_entropy_options   # weights, label smoothing, z-loss and softcap all on
    python -m kernels.bench attention [--cols 1024 4096] [--head-dims 64 128]
    python -m kernels.bench attention --llama3-8b   # causal GQA, 32 query / 8 K/V heads, D 128
    python -m kernels.bench attention --memory      # CPU: extra peak memory vs T, save-P vs recompute
    python -m kernels.bench fused_linear_cross_entropy [--rows T] [--cols V] [--dim d]   # GPU: ms, TFLOP/s, GB/s, peak memory
    python -m kernels.bench fused_linear_cross_entropy --memory   # CPU: extra peak memory, fused vs unfused vs compile
    python -m kernels.bench linear [--rows M] [--cols N] [--dim K]   # GPU: TFLOP/s of y, x̄ and w̄ vs torch.matmul

For each row-wise op and row length N it reports GB/s of the forward and of forward+backward for the
Triton kernel, torch eager and torch.compile, measured in the same run; the ratio of
the kernel to each; and the fraction of this device's copy bandwidth (a plain
``dst.copy_(src)`` of the same bytes, measured first). Bytes are the minimum each pass
must move (softmax forward: read N, write N per row; backward: read 2N, write N), so
GB/s compares like with like. It also reports the extra peak device memory of one
forward+backward (what the op saves plus its scratch), e.g. fused cross-entropy keeps no
probabilities while torch's keeps log-softmax. Attention reports TFLOP/s against
scaled_dot_product_attention instead (it is compute-bound once P stays on chip). Without CUDA it says so and exits 0: interpreter timings
say nothing about a GPU.

The LM head's loss (``fused_linear_cross_entropy``: mean CE of h Wᵀ for h (T, d), W (V, d)) is
compute-bound too: on a GPU it reports milliseconds and TFLOP/s of forward+backward (6·T·V·d
FLOPs: the logits, h̄ and W̄) and the extra peak memory, against the unfused
``F.cross_entropy(h @ W.T, t)`` in eager and under torch.compile. ``--memory`` measures the
extra peak memory on the CPU instead (see :func:`lm_head_memory_on_cpu`), and exits 1 unless
the fused op needs at least 10× less than the unfused one.

``linear`` (y = x w for x (M, K), w (K, N); default M = 8192 tokens, K = N = 4096) times each GEMM
on its own — y, x̄ = ȳ wᵀ, and w̄ = xᵀ ȳ by both strategies — against torch.matmul of the same
operands (for x̄ and w̄ the transposed views autograd would use), and reports TFLOP/s (2·M·K·N each).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Op:
    """How to benchmark one op: inputs, the three implementations, and bytes per pass."""

    make_inputs: Callable[[int, int, torch.dtype], tuple]
    triton_fn: Callable
    torch_fn: Callable
    fwd_bytes: Callable[[int, int, int], int]  # (rows, cols, element size) -> bytes
    fwd_bwd_bytes: Callable[[int, int, int], int]
    default_cols: tuple[int, ...]


def _softmax_op() -> Op:
    from .softmax import softmax

    return Op(
        make_inputs=lambda m, n, dt: (torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True),),
        triton_fn=softmax,
        torch_fn=lambda x: torch.softmax(x, dim=-1),
        fwd_bytes=lambda m, n, e: 2 * m * n * e,  # read x, write y
        fwd_bwd_bytes=lambda m, n, e: 5 * m * n * e,  # + read y and ȳ, write x̄
        default_cols=(256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    )


def _cross_entropy_op() -> Op:
    from .cross_entropy import cross_entropy

    def inputs(m, n, dt):
        logits = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
        return logits, torch.randint(0, n, (m,), device="cuda")

    return Op(
        make_inputs=inputs,
        triton_fn=cross_entropy,
        torch_fn=torch.nn.functional.cross_entropy,
        fwd_bytes=lambda m, n, e: m * n * e,  # read logits (scalars per row are noise)
        fwd_bwd_bytes=lambda m, n, e: 3 * m * n * e,  # + read logits, write dlogits
        default_cols=(256, 1024, 4096, 8192, 16384, 32768),
    )


# What a trainer turns on (kernels.cross_entropy's options): PaLM's z-loss, Gemma-2's softcap, smoothing, class weights.
_CE_OPTIONS = {"label_smoothing": 0.1, "lse_square_scale": 1e-4, "softcap": 30.0}


def _cross_entropy_options_torch(x, t, w):
    """The same loss as PyTorch ops: soft-capped logits, F.cross_entropy with weights and smoothing, plus s·lse²."""
    c = _CE_OPTIONS["softcap"]
    z = c * torch.tanh(x / c)
    ce = torch.nn.functional.cross_entropy(z, t, weight=w, label_smoothing=_CE_OPTIONS["label_smoothing"])
    return ce + _CE_OPTIONS["lse_square_scale"] * torch.logsumexp(z.float(), -1).pow(2).mean()


def _cross_entropy_options_op() -> Op:
    """cross_entropy with every option on: the heaviest constexpr variant of its kernels, against PyTorch's composite."""
    from .cross_entropy import cross_entropy

    def inputs(m, n, dt):
        logits = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
        return logits, torch.randint(0, n, (m,), device="cuda"), torch.rand(n, device="cuda", dtype=dt) + 0.5

    return Op(
        make_inputs=inputs,
        triton_fn=lambda x, t, w: cross_entropy(x, t, weight=w, **_CE_OPTIONS),
        torch_fn=_cross_entropy_options_torch,
        fwd_bytes=lambda m, n, e: m * n * e,  # as cross_entropy: the weights (n) are read per row but stay in cache
        fwd_bwd_bytes=lambda m, n, e: 3 * m * n * e,
        default_cols=(4096, 32768),
    )


def _norm_op(which: str) -> Op:
    from .layer_norm import layer_norm
    from .rms_norm import rms_norm

    def inputs(m, n, dt):
        x = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
        w = torch.randn(n, device="cuda", dtype=dt, requires_grad=True)
        return (x, w, torch.randn(n, device="cuda", dtype=dt, requires_grad=True)) if which == "layer_norm" else (x, w)

    if which == "layer_norm":
        triton_fn = layer_norm
        torch_fn = lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)  # noqa: E731
    else:
        triton_fn = rms_norm
        torch_fn = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    return Op(
        make_inputs=inputs,
        triton_fn=triton_fn,
        torch_fn=torch_fn,
        fwd_bytes=lambda m, n, e: 2 * m * n * e,  # read x, write y (parameters are noise)
        fwd_bwd_bytes=lambda m, n, e: 5 * m * n * e,  # + read x and ȳ, write x̄
        default_cols=(512, 1024, 2048, 4096, 8192, 16384),
    )


def _swiglu_op() -> Op:
    from .swiglu import swiglu

    def inputs(m, n, dt):
        return tuple(torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True) for _ in range(2))

    return Op(
        make_inputs=inputs,
        triton_fn=swiglu,
        torch_fn=lambda a, b: torch.nn.functional.silu(a) * b,
        fwd_bytes=lambda m, n, e: 3 * m * n * e,  # read a, b; write h
        fwd_bwd_bytes=lambda m, n, e: 8 * m * n * e,  # + read a, b, h̄; write ā, b̄
        default_cols=(4096, 11008, 14336),  # Llama-2-7B's and Llama-3-8B's MLP widths
    )


ROPE_HEAD_DIM = 128


def _rope_torch(x, cos, sin):
    """Half-split RoPE as PyTorch ops, the angles cast to x's dtype first as Hugging Face's Llama does."""
    c, s = cos.to(x.dtype)[:, None, :], sin.to(x.dtype)[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _rope_op() -> Op:
    """rows = positions T of one sequence, cols = H·D at D = 128; cos and sin (T, 64) in float32."""
    from .rope import rope

    def inputs(m, n, dt):
        x = torch.randn(1, m, n // ROPE_HEAD_DIM, ROPE_HEAD_DIM, device="cuda", dtype=dt, requires_grad=True)
        theta = torch.randn(m, ROPE_HEAD_DIM // 2, device="cuda")
        return x, theta.cos(), theta.sin()

    table = lambda m: m * ROPE_HEAD_DIM * 4  # noqa: E731 - cos and sin, (T, D/2) float32 each
    return Op(
        make_inputs=inputs,
        triton_fn=rope,
        torch_fn=_rope_torch,
        fwd_bytes=lambda m, n, e: 2 * m * n * e + table(m),  # read x, cos, sin; write y
        fwd_bwd_bytes=lambda m, n, e: 4 * m * n * e + 2 * table(m),  # + read ȳ, cos, sin; write x̄
        default_cols=(1024, 4096),  # 8 and 32 heads of 128
    )


OPS: dict[str, Callable[[], Op]] = {
    "softmax": _softmax_op,
    "cross_entropy": _cross_entropy_op,
    "cross_entropy_options": _cross_entropy_options_op,
    "layer_norm": lambda: _norm_op("layer_norm"),
    "rms_norm": lambda: _norm_op("rms_norm"),
    "swiglu": _swiglu_op,
    "rope": _rope_op,
}


def _ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100))


def copy_bandwidth(nbytes: int) -> float:
    """GB/s of a device-to-device copy of ``nbytes``: the ceiling for a bandwidth-bound kernel."""
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _ms(lambda: dst.copy_(src)) / 1e6


def _fwd_bwd(fn: Callable, inputs: tuple) -> Callable[[], None]:
    out = fn(*inputs)
    grad = torch.randn_like(out)

    def step():
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.grad is not None:
                t.grad = None
        fn(*inputs).backward(grad)

    return step


def run(name: str, dtypes: list[str], rows: int, cols: list[int] | None) -> list[dict]:
    op = OPS[name]()
    compiled = torch.compile(op.torch_fn)
    results = []
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        elem = torch.tensor([], dtype=dtype).element_size()
        for n in cols or op.default_cols:
            inputs = op.make_inputs(rows, n, dtype)
            peak = copy_bandwidth(op.fwd_bwd_bytes(rows, n, elem))
            row = {"op": name, "dtype": dtype_name, "rows": rows, "cols": n, "copy_GBps": peak}
            for label, fn in (("triton", op.triton_fn), ("eager", op.torch_fn), ("compile", compiled)):
                fwd_ms = _ms(lambda fn=fn: fn(*inputs))
                both_ms = _ms(_fwd_bwd(fn, inputs))
                row[f"{label}_fwd_GBps"] = op.fwd_bytes(rows, n, elem) / fwd_ms / 1e6
                row[f"{label}_fwdbwd_GBps"] = op.fwd_bwd_bytes(rows, n, elem) / both_ms / 1e6
                row[f"{label}_peak_MiB"] = _extra_peak_mib(_fwd_bwd(fn, inputs))
            results.append(row)
            print(_format(row), flush=True)
    return results


def _extra_peak_mib(step: Callable[[], None]) -> float:
    """Device memory a forward+backward needs beyond what is already allocated (saved tensors, scratch)."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def _format(r: dict) -> str:
    t, e, c = r["triton_fwdbwd_GBps"], r["eager_fwdbwd_GBps"], r["compile_fwdbwd_GBps"]
    return (
        f"{r['op']:<14} {r['dtype']:<9} {r['rows']}x{r['cols']:<6} "
        f"fwd {r['triton_fwd_GBps']:7.0f} GB/s (eager {r['eager_fwd_GBps']:6.0f}, compile {r['compile_fwd_GBps']:6.0f}) | "
        f"fwd+bwd {t:7.0f} GB/s = {t / e:4.2f}x eager, {t / c:4.2f}x compile, {t / r['copy_GBps']:4.0%} of copy ({r['copy_GBps']:.0f}) | "
        f"extra peak {r['triton_peak_MiB']:.0f} MiB vs eager {r['eager_peak_MiB']:.0f} MiB"
    )


def run_attention(seq_lens: list[int], head_dims: list[int], batch_heads: tuple[int, int] = (4, 16),
                  kv_heads: int | None = None, causal_only: bool = False) -> list[dict]:
    """TFLOP/s of kernels.attention vs scaled_dot_product_attention, bfloat16, causal and not (or causal only);
    with kv_heads < H, grouped-query attention (SDPA's enable_gqa).

    FLOPs: forward 4·B·H·T²·D (two matmuls), halved when causal; backward 2.5× forward.
    """
    from .attention import attention

    b, h = batch_heads
    h_kv = kv_heads or h
    results = []
    for causal in (True,) if causal_only else (False, True):
        for d in head_dims:
            for t in seq_lens:
                q = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k, v = (torch.randn(b, h_kv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
                flops = 4 * b * h * t * t * d * (0.5 if causal else 1.0)
                row = {"op": "attention", "causal": causal, "T": t, "D": d, "H": h, "H_kv": h_kv}
                for label, fn in (
                    ("triton", lambda: attention(q, k, v, causal=causal)),
                    ("sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                                      enable_gqa=h_kv != h)),
                ):
                    out = fn()
                    grad = torch.randn_like(out)
                    fwd_ms = _ms(fn)
                    bwd_ms = _ms(lambda out=out, grad=grad: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True))
                    row[f"{label}_fwd_TFLOPs"] = flops / fwd_ms / 1e9
                    row[f"{label}_bwd_TFLOPs"] = 2.5 * flops / bwd_ms / 1e9
                results.append(row)
                print(
                    f"attention causal={causal!s:<5} H={h}/{h_kv} D={d:<3} T={t:<6} "
                    f"fwd {row['triton_fwd_TFLOPs']:6.1f} TFLOP/s ({row['triton_fwd_TFLOPs'] / row['sdpa_fwd_TFLOPs']:4.2f}x sdpa) | "
                    f"bwd {row['triton_bwd_TFLOPs']:6.1f} TFLOP/s ({row['triton_bwd_TFLOPs'] / row['sdpa_bwd_TFLOPs']:4.2f}x sdpa)",
                    flush=True,
                )
    return results


def attention_memory_on_cpu(seq_lens: list[int]) -> None:
    """Print extra peak memory of forward+backward against T: save-P grows as T², recompute as T.

    Counted as live tensor bytes (kernels.memory_scaling); ``make bench`` writes the same
    measurement with its plot to bench/.
    """
    from .memory_scaling import loglog_slope, measure

    mib = 2**20
    print(f"{'T':>6} {'save-P MiB':>11} {'recompute MiB':>14} {'ratio':>7}")
    rows = measure(seq_lens, tile=256, progress=lambda r: print(
        f"{r['T']:>6} {r['saved_p'] / mib:>11.2f} {r['recompute'] / mib:>14.3f} {r['saved_p'] / r['recompute']:>7.1f}", flush=True))
    ts = [r["T"] for r in rows]
    if len(rows) > 1:
        print(f"log-log slope: save-P {loglog_slope(ts, [r['saved_p'] for r in rows]):.2f}, "
              f"recompute {loglog_slope(ts, [r['recompute'] for r in rows]):.2f}")


def _unfused_lm_head_loss(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """What the fused op replaces: the T×V logits, then cross-entropy; autograd keeps what it needs of them."""
    return torch.nn.functional.cross_entropy(h @ W.T, target)


def _lm_head_inputs(tokens: int, vocab: int, dim: int, dtype: torch.dtype, device: str, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)
    h = torch.randn(tokens, dim, generator=g, device=device, dtype=dtype)
    W = torch.randn(vocab, dim, generator=g, device=device, dtype=dtype) / dim**0.5
    return h, W, torch.randint(0, vocab, (tokens,), generator=g, device=device)


def _lm_head_pass(fn: Callable, h, W, target):
    """One forward and backward of fn(h, W, target) on fresh leaves: (loss, dh, dW)."""
    leaves = [t.detach().requires_grad_(True) for t in (h, W)]
    loss = fn(*leaves, target)
    return (loss.detach(), *torch.autograd.grad(loss, leaves))


def cpu_peak_bytes(step: Callable[[], object]) -> tuple[int, object]:
    """(extra peak bytes, what ``step`` returned): the highest total of CPU allocations made while ``step`` ran.

    Read from torch.profiler's memory events (``profile_memory=True``): every allocation and free
    of torch's CPU allocator, in order, whoever made it — aten ops, autograd, and the buffers
    torch.compile's generated code allocates directly (a TorchDispatchMode does not see those).
    What ``step`` returns stays alive to the end and is counted, as the gradients are on a GPU.
    Not counted: memory outside torch's allocator (NumPy arrays of Triton's interpreter, Python objects).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak, result


def _why_torch_compile_fails() -> str | None:
    """None when torch.compile builds and runs a tiny graph on this CPU, else the reason."""
    try:
        compiled = torch.compile(lambda x: (x * 2).sum())
        compiled(torch.ones(4))
        return None
    except Exception as exc:  # a missing C++ compiler, an unsupported Python: said, never faked
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:200]


def lm_head_memory_on_cpu(tokens: int = 4096, vocab: int = 32768, dim: int = 256, min_ratio: float = 10.0) -> dict:
    """Extra peak memory of one forward+backward of the LM head's loss, fused vs unfused, float32 on the CPU.

    The fused op runs its Triton kernel in the interpreter (``import kernels`` turned it on:
    no CUDA here), its matmuls in torch; the unfused expression in eager and under torch.compile
    (compiled, then measured on a second call, so that compiling is not counted). Each is
    measured once by :func:`cpu_peak_bytes` (a deterministic program's peak does not vary).
    Prints a table; the returned dict holds bytes, seconds and the ratios.
    """
    import time

    from .fused_linear_cross_entropy import default_chunk, fused_linear_cross_entropy

    h, W, target = _lm_head_inputs(tokens, vocab, dim, torch.float32, "cpu")
    mib = 2**20
    chunk = default_chunk(tokens, vocab, dim)
    print(f"LM head loss, forward+backward, float32 on the CPU: T={tokens} V={vocab} d={dim}; "
          f"T×V logits = {tokens * vocab * 4 / mib:.0f} MiB; fused chunk = {chunk} tokens "
          f"({chunk * vocab * 4 / mib:.1f} MiB of logits)", flush=True)
    candidates = [("fused (kernels)", fused_linear_cross_entropy), ("unfused eager", _unfused_lm_head_loss)]
    why_not = _why_torch_compile_fails()
    if why_not is None:
        compiled = torch.compile(_unfused_lm_head_loss)
        start = time.perf_counter()
        _lm_head_pass(compiled, h, W, target)  # compile (and run) once, outside the measurement
        print(f"torch.compile: compiled and ran once in {time.perf_counter() - start:.0f} s", flush=True)
        candidates.append(("unfused torch.compile", compiled))
    else:
        print(f"torch.compile does not work on this CPU, so its column is skipped: {why_not}", flush=True)
    results, reference = {}, None
    for label, fn in candidates:
        start = time.perf_counter()
        peak, grads = cpu_peak_bytes(lambda fn=fn: _lm_head_pass(fn, h, W, target))
        results[label] = {"peak_bytes": peak, "seconds": time.perf_counter() - start}
        if label == "unfused eager":
            reference = grads
        results[label]["grads"] = grads
    fused = results["fused (kernels)"]
    print(f"{'implementation':<24} {'extra peak MiB':>15} {'÷ fused':>8} {'max rel err':>12} {'seconds':>8}")
    for label, r in results.items():
        err = max(_relative_error(a, b) for a, b in zip(r.pop("grads"), reference))
        r["max_rel_err"] = err
        print(f"{label:<24} {r['peak_bytes'] / mib:>15.1f} {r['peak_bytes'] / fused['peak_bytes']:>7.1f}x "
              f"{err:>12.1e} {r['seconds']:>8.1f}")
    ratio = results["unfused eager"]["peak_bytes"] / fused["peak_bytes"]
    verdict = "ok" if ratio >= min_ratio else "FAIL"
    print(f"{verdict}: the fused op needs {ratio:.1f}x less extra memory than unfused eager (required: ≥ {min_ratio:g}x)")
    return {"tokens": tokens, "vocab": vocab, "dim": dim, "chunk": chunk, "results": results, "ratio": ratio,
            "ok": ratio >= min_ratio, "compile_skipped": why_not}


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300)).item()


def run_lm_head(tokens: int, vocab: int, dim: int, dtypes: list[str]) -> list[dict]:
    """On a GPU: ms, TFLOP/s and GB/s of forward+backward and extra peak memory, fused vs unfused eager and torch.compile.

    GB/s counts only the traffic no implementation avoids (h and W read, h̄ and W̄ written, the targets): the
    logits an unfused loss writes and reads again are its own cost, so a higher figure is a faster pass.
    """
    from .fused_linear_cross_entropy import fused_linear_cross_entropy

    compiled = torch.compile(_unfused_lm_head_loss)
    flops = 6 * tokens * vocab * dim  # logits, h̄ and W̄: three matmuls of T·V·d multiply-adds
    results = []
    for dtype_name in dtypes:
        h, W, target = _lm_head_inputs(tokens, vocab, dim, DTYPES[dtype_name], "cuda")
        nbytes = 2 * (h.numel() + W.numel()) * h.element_size() + target.numel() * target.element_size()
        row = {"op": "fused_linear_cross_entropy", "dtype": dtype_name, "T": tokens, "V": vocab, "d": dim}
        for label, fn in (("fused", fused_linear_cross_entropy), ("eager", _unfused_lm_head_loss), ("compile", compiled)):
            step = lambda fn=fn: _lm_head_pass(fn, h, W, target)  # noqa: E731
            step()  # compile, autotune, warm the allocator
            row[f"{label}_ms"] = _ms(step)
            row[f"{label}_TFLOPs"] = flops / row[f"{label}_ms"] / 1e9
            row[f"{label}_GBps"] = nbytes / row[f"{label}_ms"] / 1e6
            row[f"{label}_peak_MiB"] = _extra_peak_mib(step)
        results.append(row)
        print(f"fused_linear_cross_entropy {dtype_name:<9} T={tokens} V={vocab} d={dim} fwd+bwd "
              f"{row['fused_ms']:.2f} ms = {row['fused_TFLOPs']:.0f} TFLOP/s, {row['fused_GBps']:.0f} GB/s "
              f"({row['eager_ms'] / row['fused_ms']:.2f}x eager, {row['compile_ms'] / row['fused_ms']:.2f}x compile) | "
              f"extra peak {row['fused_peak_MiB']:.0f} MiB vs eager {row['eager_peak_MiB']:.0f} MiB, "
              f"compile {row['compile_peak_MiB']:.0f} MiB", flush=True)
    return results


def run_linear(m: int, k: int, n: int, dtypes: list[str]) -> list[dict]:
    """On a GPU: TFLOP/s of kernels.linear's three GEMMs (w̄ by split-K and by atomics) against torch.matmul."""
    import importlib

    op = importlib.import_module(f"{__package__}.linear")  # the module; kernels exports the function
    flops = 2 * m * k * n
    results = []
    for dtype_name in dtypes:
        dt = DTYPES[dtype_name]
        x, dy = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(m, n, device="cuda", dtype=dt)
        w = torch.randn(k, n, device="cuda", dtype=dt) / k**0.5
        gemms = {
            "y": (lambda: op.matmul(x, w), lambda: torch.matmul(x, w)),
            "dx": (lambda: op.grad_input(dy, w), lambda: torch.matmul(dy, w.t())),
            "dw_splitk": (lambda: op.grad_weight(dy, x, w, False, "splitk"), lambda: torch.matmul(x.t(), dy)),
            "dw_atomic": (lambda: op.grad_weight(dy, x, w, False, "atomic"), lambda: torch.matmul(x.t(), dy)),
        }
        row = {"op": "linear", "dtype": dtype_name, "M": m, "K": k, "N": n}
        for name, (ours, theirs) in gemms.items():
            row[f"{name}_TFLOPs"] = flops / _ms(ours) / 1e9
            row[f"{name}_torch_TFLOPs"] = flops / _ms(theirs) / 1e9
        results.append(row)
        print(f"linear {dtype_name:<9} M={m} K={k} N={n} | " + " | ".join(
            f"{name} {row[f'{name}_TFLOPs']:6.1f} TFLOP/s ({row[f'{name}_TFLOPs'] / row[f'{name}_torch_TFLOPs']:4.2f}x matmul)"
            for name in gemms), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", choices=sorted(OPS) + ["attention", "fused_linear_cross_entropy", "linear"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(DTYPES))
    parser.add_argument("--rows", type=int, help="rows (default 4096), or T (tokens) for fused_linear_cross_entropy "
                        "(default 4096 on the CPU, 8192 on a GPU), or M for linear (default 8192)")
    parser.add_argument("--cols", type=int, nargs="+", help="row lengths, T for attention, or the vocabulary V for "
                        "fused_linear_cross_entropy (default: a sweep per op; V = 32768 on the CPU, 128256 on a GPU), "
                        "or N, w's out_features, for linear (default 4096)")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128], help="attention only")
    parser.add_argument("--llama3-8b", action="store_true", help="attention only: Llama-3-8B's causal grouped-query "
                        "attention, B 1 · 32 query heads · 8 K/V heads · D 128, at T 2048–16384 (or --cols)")
    parser.add_argument("--dim", type=int, help="fused_linear_cross_entropy: d, h's width (default 256 on the CPU, "
                        "4096 on a GPU); for linear, K, x's features (default 4096)")
    parser.add_argument("--memory", action="store_true",
                        help="on the CPU: extra peak memory of forward+backward — attention vs T, save-P vs recompute; "
                             "fused_linear_cross_entropy vs unfused eager and torch.compile")
    args = parser.parse_args(argv)
    lm_head = args.op == "fused_linear_cross_entropy"
    if lm_head and args.memory:
        # `import kernels` switched the interpreter on where there is no CUDA, so the kernel runs here on the CPU.
        if torch.cuda.is_available():
            print("kernels.bench fused_linear_cross_entropy --memory measures on the CPU, in Triton's interpreter; "
                  "on this CUDA machine run it with CUDA_VISIBLE_DEVICES= (without --memory it measures the GPU)")
            return 2
        result = lm_head_memory_on_cpu(args.rows or 4096, (args.cols or [32768])[0], args.dim or 256)
        return 0 if result["ok"] else 1
    if not torch.cuda.is_available():
        print(f"kernels.bench {args.op}: no CUDA device here, so no speed to measure "
              "(interpreter timings say nothing about a GPU). Run it on a GPU machine.")
        if args.op == "attention" and args.memory:
            # `import kernels` switched the interpreter on (no CUDA), so the kernels run here on the CPU.
            attention_memory_on_cpu(args.cols or [256, 512, 1024, 2048, 4096])
        return 0
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    if args.op == "attention" and args.llama3_8b:
        run_attention(args.cols or [2048, 4096, 8192, 16384], [128], (1, 32), kv_heads=8, causal_only=True)
    elif args.op == "attention":
        run_attention(args.cols or [1024, 2048, 4096, 8192, 16384], args.head_dims)
    elif args.op == "linear":
        run_linear(args.rows or 8192, args.dim or 4096, (args.cols or [4096])[0], args.dtypes)
    elif lm_head:
        run_lm_head(args.rows or 8192, (args.cols or [128256])[0], args.dim or 4096, args.dtypes)
    else:
        run(args.op, args.dtypes, args.rows or 4096, args.cols)
    return 0


if __name__ == "__main__":
    sys.exit(main())

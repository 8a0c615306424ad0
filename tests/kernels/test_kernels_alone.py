"""``import kernels`` on its own, on a machine without a GPU: every exported op, forward and backward, on CPU tensors.

A kernel engineer imports ``kernels`` without ``course``; kernels applies the device rule itself
(``kernels/_device.py``) and runs its kernels in Triton's interpreter. The other kernel tests import
``course`` first, so this one runs in a fresh ``python -c`` process with TRITON_INTERPRET unset and
CUDA hidden (a laptop), which imports this module for its cases (torch only, until ``report``
imports kernels) and prints one JSON line per op and dtype.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
# float16 on the interpreter has a file of its own: tests/kernels/test_half_precision_backward.py
DTYPES = {"float32": torch.float32, "float64": torch.float64}
TOL = {torch.float32: 2e-5, torch.float64: 1e-10}


def _inputs(dtype, seed, *shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=dtype) for shape in shapes]


def _forward_and_backward(fn, inputs, dy):
    """fn(*inputs) and the gradient of ⟨fn(*inputs), dy⟩ with respect to each input."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*leaves)
    return [y, *torch.autograd.grad(y, leaves, dy)]


def _against(kernel, reference, inputs, dy, names):
    """(name, got, expected) for the output and each input's gradient, kernel against the PyTorch reference."""
    got = _forward_and_backward(kernel, inputs, dy)
    expected = _forward_and_backward(reference, inputs, dy)
    return list(zip(names, got, expected))


def softmax_case(kernels, dtype):
    (x, dy) = _inputs(dtype, 0, (7, 33), (7, 33))  # prime batch, a row that is not a power of two
    return _against(kernels.softmax, lambda x: torch.softmax(x, -1), [x], dy, ["y", "dx"])


def cross_entropy_case(kernels, dtype):
    (logits,) = _inputs(dtype, 1, (7, 33))
    target = torch.tensor([3, 0, 32, -100, 5, 5, 17])  # the last class, an ignored row, a repeated class
    rows = []
    for reduction in ("mean", "none"):
        (dy,) = _inputs(dtype, 2, () if reduction == "mean" else (7,))
        rows += [(f"{reduction}: {name}", got, want) for name, got, want in _against(
            lambda x, r=reduction: kernels.cross_entropy(x, target, reduction=r),
            lambda x, r=reduction: F.cross_entropy(x, target, reduction=r, ignore_index=-100),
            [logits], dy, ["loss", "dlogits"])]
    return rows


def fused_linear_cross_entropy_case(kernels, dtype):
    h, W = _inputs(dtype, 8, (11, 6), (13, 6))  # T, V, d none a power of two
    target = torch.tensor([12, 0, -100, 5, 5, 3, 7, 1, -100, 9, 2])  # the last class, ignored rows, a repeat
    (dy,) = _inputs(dtype, 9, ())
    return _against(lambda h, W: kernels.fused_linear_cross_entropy(h, W, target, chunk=4),  # 4 does not divide 11
                    lambda h, W: F.cross_entropy(h @ W.T, target, ignore_index=-100), [h, W], dy, ["loss", "dh", "dW"])


def layer_norm_case(kernels, dtype):
    x, w, b, dy = _inputs(dtype, 3, (5, 37), (37,), (37,), (5, 37))
    return _against(kernels.layer_norm, lambda x, w, b: F.layer_norm(x, (37,), w, b, eps=1e-5), [x, w, b], dy,
                    ["y", "dx", "dw", "db"])


def rms_norm_case(kernels, dtype):
    x, w, dy = _inputs(dtype, 4, (5, 37), (37,), (5, 37))
    return _against(kernels.rms_norm, lambda x, w: F.rms_norm(x, (37,), w, eps=1e-6), [x, w], dy, ["y", "dx", "dw"])


def attention_case(kernels, dtype):
    q, k, v, dy = _inputs(dtype, 5, *[(2, 3, 17, 8)] * 4)  # (batch, heads, T, head dim); T past a block edge
    rows = []
    for causal in (False, True):
        rows += [(f"causal={causal}: {name}", got, want) for name, got, want in _against(
            lambda q, k, v, c=causal: kernels.attention(q, k, v, causal=c),
            lambda q, k, v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
            [q, k, v], dy, ["o", "dq", "dk", "dv"])]
    return rows


def attention_varlen_case(kernels, dtype):
    """Three documents packed end to end (lengths 5, 17, 9), grouped-query heads (4 query heads per K/V head)."""
    q, k, v, dy = _inputs(dtype, 11, (31, 4, 8), (31, 1, 8), (31, 1, 8), (31, 4, 8))
    cu = torch.tensor([0, 5, 22, 31], dtype=torch.int32)

    def per_document(q, k, v):
        docs = [F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1) for t in (q, k, v)), is_causal=True,
                                               enable_gqa=True).transpose(0, 1) for a, b in zip(cu[:-1], cu[1:])]
        return torch.cat(docs)

    return _against(lambda q, k, v: kernels.attention_varlen(q, k, v, cu, causal=True), per_document, [q, k, v], dy,
                    ["o", "dq", "dk", "dv"])


def linear_case(kernels, dtype):
    x, w, b, dy = _inputs(dtype, 10, (2, 37, 20), (20, 19), (19,), (2, 37, 19))  # 3-D x; no side a power of two
    rows = []
    for strategy in ("splitk", "atomic"):
        rows += [(f"{strategy}: {name}", got, want) for name, got, want in _against(
            lambda x, w, b, s=strategy: kernels.linear(x, w, b, dw_strategy=s),
            lambda x, w, b: F.linear(x, w.t(), b), [x, w, b], dy, ["y", "dx", "dw", "db"])]
    return rows


def embedding_case(kernels, dtype):
    weight, dy = _inputs(dtype, 6, (11, 6), (3, 4, 6))
    ids = torch.tensor([[1, 4, 4, 10], [0, 1, 1, 1], [7, 3, 2, 4]])  # repeated tokens: their gradients add
    return _against(lambda w: kernels.embedding(w, ids), lambda w: F.embedding(ids, w), [weight], dy, ["y", "dweight"])


def scatter_add_case(kernels, dtype):
    """scatter_add is a backward (embedding's), with no autograd of its own: the forward is all there is."""
    (src,) = _inputs(dtype, 7, (9, 6))
    index = torch.tensor([4, 0, 4, 2, 4, 0, 1, 3, 2])  # repeats: atomic adds
    expected = torch.zeros(5, 6, dtype=dtype).index_add_(0, index, src)
    return [("out", kernels.scatter_add(src, index, 5), expected)]


def swiglu_case(kernels, dtype):
    a, b, dy = _inputs(dtype, 12, (2, 3, 37), (2, 3, 37), (2, 3, 37))  # 3-D, F a prime
    return _against(kernels.swiglu, lambda a, b: F.silu(a) * b, [a, b], dy, ["h", "da", "db"])


def rope_case(kernels, dtype):
    """(B, T, H, D) with odd T and H, both layouts, against the rotation in PyTorch ops."""
    x, dy, theta = _inputs(dtype, 13, (2, 7, 3, 10), (2, 7, 3, 10), (7, 5))
    c, s = theta.cos(), theta.sin()

    def rotated(x, interleaved):
        x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else x.chunk(2, dim=-1)
        y1, y2 = x1 * c[:, None] - x2 * s[:, None], x2 * c[:, None] + x1 * s[:, None]
        return torch.stack((y1, y2), dim=-1).flatten(-2) if interleaved else torch.cat((y1, y2), dim=-1)

    rows = []
    for interleaved in (False, True):
        rows += [(f"interleaved={interleaved}: {name}", got, want) for name, got, want in _against(
            lambda x, i=interleaved: kernels.rope(x, c, s, interleaved=i), lambda x, i=interleaved: rotated(x, i),
            [x], dy, ["y", "dx"])]
    return rows


CASES = {"attention": attention_case, "attention_varlen": attention_varlen_case, "cross_entropy": cross_entropy_case,
         "embedding": embedding_case,
         "fused_linear_cross_entropy": fused_linear_cross_entropy_case, "layer_norm": layer_norm_case,
         "linear": linear_case, "rms_norm": rms_norm_case, "rope": rope_case, "scatter_add": scatter_add_case,
         "softmax": softmax_case, "swiglu": swiglu_case}


def _mismatch(got, expected, tol) -> str | None:
    """Where got and expected first differ beyond tol (index, expected, got), or None."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"{tuple(got.shape)} {got.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
    bad = ~torch.isclose(got.detach(), expected.detach(), rtol=tol, atol=tol)
    if not bad.any():
        return None
    where = tuple(int(i) for i in bad.nonzero()[0])
    return f"first mismatch at {list(where)}: expected {expected[where].item():.10g}, got {got[where].item():.10g}"


def report() -> None:
    """In the fresh process: import kernels alone, run every case, print one JSON line per op and dtype."""
    import kernels

    print(json.dumps({"all": kernels.__all__, "choice": vars(kernels.DEVICE_CHOICE),
                      "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"), "course": "course" in sys.modules}))
    for op in kernels.__all__:
        for dtype_name, dtype in DTYPES.items():
            line = {"op": op, "dtype": dtype_name, "checked": [], "errors": []}
            try:
                for name, got, expected in CASES[op](kernels, dtype):
                    line["checked"].append(name)
                    if got.device.type != "cpu":
                        line["errors"].append(f"{name}: on {got.device}, not the CPU")
                    elif (why := _mismatch(got, expected, TOL[dtype])) is not None:
                        line["errors"].append(f"{name}: {why}")
            except Exception as e:  # reported to the test, which names the op
                line["errors"].append(f"raised {type(e).__name__}: {e}")
            print(json.dumps(line), flush=True)
    print(json.dumps({"course_after": "course" in sys.modules}))


@pytest.fixture(scope="module")
def alone():
    """What the fresh process printed: its header, {(op, dtype): line}, and whether course was imported by the end."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a laptop: no GPU, even on a machine that has one
    code = "from tests.kernels.test_kernels_alone import report; report()"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    header, *ops, footer = lines
    return header, {(line["op"], line["dtype"]): line for line in ops}, footer


def test_import_kernels_alone_turns_the_interpreter_on(alone):
    header, _, footer = alone
    assert header["choice"] == {"interpreted": True, "why": "no CUDA GPU found", "chosen_here": True}, header
    assert header["TRITON_INTERPRET"] == "1", header
    assert header["course"] is False and footer["course_after"] is False, "kernels imported the students' package"


def test_every_exported_op_has_a_case(alone):
    header, _, _ = alone
    assert sorted(header["all"]) == sorted(CASES), f"kernels.__all__ is {header['all']}; cases here: {sorted(CASES)}"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("op", sorted(CASES))
def test_op_forward_and_backward_on_the_cpu(alone, op, dtype):
    _, lines, _ = alone
    line = lines[(op, dtype)]
    assert line["errors"] == [], f"kernels.{op} in {dtype}: " + "; ".join(line["errors"])
    minimum = 1 if op == "scatter_add" else 2  # an output, and at least one gradient where the op has a backward
    assert len(line["checked"]) >= minimum, line


@pytest.mark.parametrize("setting, cuda, expected, env_after", [
    (None, False, (True, "no CUDA GPU found", True), "1"),  # a laptop: the rule turns the interpreter on
    ("", False, (True, "no CUDA GPU found", True), "1"),  # empty reads as unset, as Triton reads it
    (None, True, (False, "a CUDA GPU was found", False), None),  # a GPU: nothing changes
    ("1", True, (True, "TRITON_INTERPRET=1 was set", False), "1"),  # forced interpreter on a GPU machine
    ("true", False, (True, "TRITON_INTERPRET=true was set", False), "true"),  # any value Triton reads as true
    ("0", False, (False, "TRITON_INTERPRET=0 was set", False), "0"),  # the compile check: compiled, no GPU
])
def test_the_device_rule(monkeypatch, setting, cuda, expected, env_after):
    # A copy of kernels/_device.py of this test's own: importing kernels here would fix this process's decision.
    spec = importlib.util.spec_from_file_location("device_rule_under_test", ROOT / "kernels" / "_device.py")
    rule = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, rule)  # dataclasses reads its module's namespace from here
    spec.loader.exec_module(rule)
    if setting is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", setting)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    choice = rule.device_choice()
    assert (choice.interpreted, choice.why, choice.chosen_here) == expected
    assert os.environ.get("TRITON_INTERPRET") == env_after


def test_compiled_kernels_refuse_cpu_tensors_saying_what_to_do():
    """Under TRITON_INTERPRET=0 the kernels are compiled ones; a CPU tensor gets a message, not Triton's driver error."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    code = "import torch, kernels; kernels.softmax(torch.randn(3, 5))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last == (
        "RuntimeError: x is on the CPU, but the kernels were compiled for a GPU (TRITON_INTERPRET=0 was set when kernels "
        "was imported): move x to CUDA, or set TRITON_INTERPRET=1 before importing kernels to run them on the CPU in "
        "Triton's interpreter"), done.stderr[-3000:]

"""Visible checks for 06_topk_routing: scatters, the zero-FLOP backwards, the MoE gate, a scatter-add kernel.

Every check runs a student's function on small fixed float64 inputs and compares it with
torch's own autograd (or ``index_add_``). On success it prints one line; on failure it
raises a :class:`~course.diagnose.GradingFailure` whose first line names the bug.

How a store-instead-of-add is caught. The scatters (``topk_backward``,
``embedding_backward``, ``maxpool1d_backward``, ``scatter_add_kernel``) run first on inputs
where every destination receives one contribution at most — there a store is as good as an
add — and then on inputs with repeated indices, the last slot among them. A result that was
right without repeats and is wrong with them only where several contributions land is
``non-atomic-scatter``; when it equals what a store keeps (the last writer, as on a CPU, or
the first), the message says so. Triton's interpreter runs one program at a time, so a
read-add-store between programs cannot race there: the kernel check also asks that the
kernel call ``tl.atomic_add``.

Every check also runs a case whose tensors are transposed (non-contiguous) views of the same
kind of values; a result right for contiguous inputs and wrong only there depends on memory
layout, and is named so. Diagnoses name the bug and say why, never the fixed code; ``HINTS``
maps each diagnosis class to the notebook's hint that covers it.

The hidden checks (``autograder.check.routing``) reuse these runners on random inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..diagnose import (
    Alternative, Case, GradingFailure, call_student, diagnose, graded, run_cases,
)
from ..triton_check import device, is_kernel, quiet, unwrapped

F32, F64 = torch.float32, torch.float64
TOL = {F32: 1e-5, F64: 1e-10}  # relative error allowed per dtype: every op here is exact up to summation order
SENTINEL = -12345.0  # fills output padding and guard rows: no gradient here takes this value
TRANSPOSED = "a transposed (non-contiguous) view"

# Which hint of the notebook covers each diagnosis class ("*": any other class). course.diagnose.graded
# adds the pointer to a failure; the hidden checks use the same map.
HINTS = {
    "topk_backward": {"non-atomic-scatter": 2, "shape": 1, "wrong-values": 1, "batch-reduction": 1, "*": 1},
    "embedding_backward": {"non-atomic-scatter": 2, "batch-reduction": 2, "shape": 1, "*": 1},
    "relu_backward": {"*": 1},
    "maxpool1d_backward": {"non-atomic-scatter": 2, "batch-reduction": 1, "*": 1},
    "dropout_backward": {"*": 1},
    "moe_gate_backward": {"shape": 1, "wrong-values": 2, "sign": 2, "*": 1},
    "scatter_add_kernel": {"non-atomic-scatter": 2, "wrong-values": 1, "*": 1},
}


def transposed_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as ``t``, with its last two axes laid out swapped in memory: a non-contiguous view."""
    return t.mT.contiguous().mT


def _strided(args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.ndim >= 2 and not a.is_contiguous() for a in args)


def _layout_failure(name: str, where: str) -> GradingFailure:
    return GradingFailure(
        "wrong-values",
        f"{name} is right for contiguous inputs and wrong for {TRANSPOSED} of the same values: the code depends on "
        "how its inputs are laid out in memory, not only on their values.", where)


def _generator(salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(606 + salt)


def run_student(name: str, fn: Callable, *args, forbid_autograd_use: bool = True, **kwargs):
    """``call_student`` with warnings silenced."""
    with quiet():
        return call_student(name, fn, *args, forbid_autograd_use=forbid_autograd_use, **kwargs)


# ---------------------------------------------------------------------------
# Scatters: the runner that tells a store from an add


@dataclass
class ScatterCase(Case):
    """A case for a scatter; ``repeats`` says whether some destination receives several contributions."""

    repeats: bool = False


@dataclass(frozen=True)
class Collisions:
    """Where several contributions land, and what a store would have kept there."""

    collided: torch.Tensor  # bool, shaped like the result: entries that receive two or more contributions
    last: torch.Tensor  # the result when each entry keeps the last contribution (a store, run in order)
    first: torch.Tensor  # the result when each entry keeps the first one


def store_alternatives(name: str, collisions: Collisions, how: str) -> list[Alternative]:
    """The two results of a store where an add is needed, named ``non-atomic-scatter``."""
    overwrite = (
        f"{name} keeps one contribution where several land on the same slot: {how} overwrites what is there, "
        "but every output that read the slot in the forward owes it its gradient."
    )
    return [
        Alternative("non-atomic-scatter", overwrite + " (Here the last writer won, as with a store run in order.)", collisions.last),
        Alternative("non-atomic-scatter", overwrite + " (Here the first writer won.)", collisions.first),
    ]


def scatter_failure(
    name: str, got, expected: torch.Tensor, case: ScatterCase, collisions: Collisions | None, *, how: str,
    passed_without_repeats: bool, passed_batch1: bool, alternatives: Sequence[Alternative] = (), of: str = "",
    tol: float = TOL[F64], passed_contiguous: bool = False,
) -> GradingFailure | None:
    """``diagnose``, plus the two classes a scatter adds: ``non-atomic-scatter`` and ``batch-reduction``."""
    alts = list(alternatives)
    if case.repeats and collisions is not None:
        alts = store_alternatives(name, collisions, how) + alts
    failure = diagnose(name, got, expected, tol=tol, alternatives=alts, batch=case.batch, case=case.label, of=of)
    if failure is not None and passed_contiguous and _strided(case.args) and failure.cls != "shape":
        return _layout_failure(name, failure.where)
    if failure is None or failure.cls != "wrong-values":
        return failure
    if case.repeats and passed_without_repeats and collisions is not None:
        g = got.detach().to("cpu", F64)
        e = expected.detach().to("cpu", F64)
        scale = max(e.abs().max().item(), 1e-300)
        bad = (g - e).abs() > 1e-6 * scale
        if bool(bad.any()) and not bool((bad & ~collisions.collided).any()):
            return GradingFailure(
                "non-atomic-scatter",
                f"{name} is right wherever one contribution lands and wrong only where several land on the same "
                f"slot ({int(collisions.collided.sum())} such entries here): {how} does not collect them all, and "
                "every output that read the slot in the forward owes it its gradient.",
                failure.where,
            )
    if passed_batch1 and case.batch > 1 and not case.repeats:
        return GradingFailure(
            "batch-reduction",
            f"{name} is right at batch 1 and wrong at batch {case.batch}: every row of the batch must contribute, "
            "not only the first one.",
            failure.where,
        )
    return failure


def run_scatter_cases(
    name: str, fn: Callable, cases: Sequence[ScatterCase], reference: Callable, collisions: Callable, *, output: str,
    how: str, of: str = "", alternatives: Callable[[ScatterCase], list[Alternative]] | None = None,
    tol: float = TOL[F64],
) -> None:
    """Run ``fn`` (called ``name``) on every case, those without repeats first, and compare its result
    (called ``output``) with ``reference``; raise the first failure.

    ``collisions(*args)`` returns the :class:`Collisions` of a case with repeats.
    """
    passed_without_repeats = passed_batch1 = passed_contiguous = False
    for case in cases:
        args = _clone(case.args)
        expected = reference(*_clone(case.args))
        try:
            got = run_student(name, fn, *args)
        except GradingFailure as failure:
            if failure.cls != "error":
                raise
            # Say which inputs: a transposed view breaks code that assumes a memory layout (a .view, say).
            where = "\n".join(w for w in (failure.where, f"inputs: {case.label}") if w)
            raise GradingFailure(failure.cls, failure.sentence, where) from None
        coll = collisions(*_clone(case.args)) if case.repeats else None
        alts = alternatives(case) if alternatives else []
        failure = scatter_failure(
            output, got, expected, case, coll, how=how, passed_without_repeats=passed_without_repeats,
            passed_batch1=passed_batch1, alternatives=alts, of=of, tol=tol, passed_contiguous=passed_contiguous,
        )
        if failure is not None:
            raise failure
        passed_without_repeats |= not case.repeats
        passed_batch1 |= case.batch == 1
        passed_contiguous |= case.batch > 1 and not _strided(case.args)


def _clone(args: tuple) -> tuple:
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


def _shape(t) -> str:
    return str(tuple(t.shape))


# ---------------------------------------------------------------------------
# topk_backward


def gather_reference(dy: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """x̄ of y = x.gather(-1, indices) for x of last size n, by autograd (top-k's forward is such a gather)."""
    x = torch.zeros(*indices.shape[:-1], n, dtype=dy.dtype, requires_grad=True)
    (dx,) = torch.autograd.grad(x.gather(-1, indices), x, dy)
    return dx


def gather_collisions(dy: torch.Tensor, indices: torch.Tensor, n: int) -> Collisions:
    """Slots of x̄ hit by more than one index, and what storing ȳ slot by slot would keep there."""
    hits = F.one_hot(indices, n).sum(dim=-2)  # (..., n): how many outputs read each slot
    last = torch.zeros(*indices.shape[:-1], n, dtype=dy.dtype)
    first = last.clone()
    k = indices.shape[-1]
    for m in range(k):  # in order: the last store to a slot wins
        last.scatter_(-1, indices[..., m:m + 1], dy[..., m:m + 1])
    for m in reversed(range(k)):  # in reverse: the first one wins
        first.scatter_(-1, indices[..., m:m + 1], dy[..., m:m + 1])
    return Collisions(hits >= 2, last, first)


def topk_alternatives(case: ScatterCase) -> list[Alternative]:
    dy, indices, n = case.args
    if dy.shape[-1] > n:
        return []
    front = torch.zeros(*dy.shape[:-1], n, dtype=dy.dtype)
    front[..., : dy.shape[-1]] = dy
    return [Alternative(
        "wrong-values",
        "dx holds ȳ in its first k slots, not in the slots the values were read from.",
        front,
    )]


def topk_case(label: str, dy: torch.Tensor, indices: torch.Tensor, n: int, repeats: bool,
              transposed: bool = False) -> ScatterCase:
    batch = dy.shape[0] if dy.ndim > 1 else 1
    what = "repeated indices" if repeats else "distinct indices (a top-k)"
    if transposed:
        dy, indices, what = transposed_view(dy), transposed_view(indices), f"{what}, dy and indices {TRANSPOSED}"
    return ScatterCase(
        f"dy {_shape(dy)}, indices {_shape(indices)}, n = {n}; {label}, {what}", (dy, indices, n), batch=batch,
        repeats=repeats,
    )


def check_topk_backward(fn, cases: Sequence[ScatterCase], reference=gather_reference, collisions=gather_collisions,
                        alternatives=topk_alternatives) -> None:
    run_scatter_cases(
        "topk_backward", fn, cases, reference, collisions, output="dx", of="x",
        how="a store (an indexed assignment, scatter_ or index_put_)", alternatives=alternatives,
    )


@graded
def topk_backward(fn) -> None:
    """Visible check: top-k of rows of 8, 10 and 9 at batch 1, 7 and 3-D, then gathers with repeated indices."""
    gen = _generator(1)
    x = torch.tensor([[0.3, -1.2, 2.1, 0.8, -0.4, 1.7, 0.1, 1.1]], dtype=F64)  # (1, 8): the picture's row
    dy = torch.tensor([[1.0, -0.5, 2.0]], dtype=F64)  # ȳ for the top 3
    x7 = torch.randn(7, 10, generator=gen, dtype=F64)
    x7[0, -1] = 5.0  # the last slot is selected in row 0
    x3 = torch.randn(2, 3, 9, generator=gen, dtype=F64)
    rep7 = torch.randint(0, 5, (7, 8), generator=gen)
    rep7[:, 0] = 4  # the last slot, in every row
    rep3 = torch.randint(0, 4, (2, 3, 6), generator=gen)
    rep3[..., -1] = 3
    cases = [
        topk_case("batch 1", dy, x.topk(3).indices, 8, False),  # the N = 8, k = 3 example of the notebook
        topk_case("batch 7", torch.randn(7, 4, generator=gen, dtype=F64), x7.topk(4).indices, 10, False),
        topk_case("3-D", torch.randn(2, 3, 2, generator=gen, dtype=F64), x3.topk(2).indices, 9, False),
        topk_case("batch 7", torch.randn(7, 3, generator=gen, dtype=F64), x7.topk(3).indices, 10, False, transposed=True),
        topk_case("batch 1", torch.randn(1, 5, generator=gen, dtype=F64), torch.tensor([[5, 0, 5, 2, 5]]), 6, True),
        topk_case("batch 7", torch.randn(7, 8, generator=gen, dtype=F64), rep7, 5, True),  # k > n: repeats certain
        topk_case("3-D", torch.randn(2, 3, 6, generator=gen, dtype=F64), rep3, 4, True),
    ]
    check_topk_backward(fn, cases)
    print("✓ topk_backward passes the visible checks (top-k at batch 1, 7, 3-D and transposed; repeated indices)")


# ---------------------------------------------------------------------------
# embedding_backward


def embedding_reference(dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int) -> torch.Tensor:
    """W̄ of y = W[ids], by autograd through F.embedding."""
    W = torch.zeros(num_embeddings, dy.shape[-1], dtype=dy.dtype, requires_grad=True)
    (dW,) = torch.autograd.grad(F.embedding(ids, W), W, dy)
    return dW


def embedding_collisions(dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int) -> Collisions:
    """Rows of W̄ read more than once, and what storing ȳ row by row keeps there."""
    flat_ids, rows = ids.reshape(-1), dy.reshape(-1, dy.shape[-1])
    uses = torch.bincount(flat_ids, minlength=num_embeddings)  # (num_embeddings,)
    last = torch.zeros(num_embeddings, dy.shape[-1], dtype=dy.dtype)
    first = last.clone()
    for r in range(flat_ids.numel()):
        last[flat_ids[r]] = rows[r]
    for r in reversed(range(flat_ids.numel())):
        first[flat_ids[r]] = rows[r]
    collided = (uses >= 2)[:, None].expand(num_embeddings, dy.shape[-1])
    return Collisions(collided, last, first)


def embedding_case(label: str, dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int,
                   transposed: bool = False) -> ScatterCase:
    """``transposed``: ids (B, T) and dy (B, T, D) laid out with B and T swapped in memory (non-contiguous views)."""
    repeats = bool((torch.bincount(ids.reshape(-1)) >= 2).any())
    batch = ids.shape[0] if ids.ndim > 1 else 1
    what = "repeated ids" if repeats else "distinct ids"
    if transposed:
        ids, dy = transposed_view(ids), dy.transpose(0, 1).contiguous().transpose(0, 1)
        what += f", ids and dy {TRANSPOSED}"
    return ScatterCase(
        f"dy {_shape(dy)}, ids {_shape(ids)}, num_embeddings = {num_embeddings}; {label}, {what}",
        (dy, ids, num_embeddings), batch=batch, repeats=repeats,
    )


def check_embedding_backward(fn, cases, reference=embedding_reference, collisions=embedding_collisions,
                             alternatives=None) -> None:
    run_scatter_cases(
        "embedding_backward", fn, cases, reference, collisions, output="dW", of="the embedding table W",
        how="a store (dW[ids] = ȳ, index_put_ or index_copy_)", alternatives=alternatives,
    )


@graded
def embedding_backward(fn) -> None:
    """Visible check: distinct ids at batch 1 and 7, then repeated ids (batch 1, 7, 1-D and 3-D ids)."""
    gen = _generator(2)
    D = 4
    rep7 = torch.randint(0, 6, (7, 4), generator=gen)
    rep7[3, 1] = rep7[5, 2] = 5  # the last row of the table, used twice
    cases = [
        embedding_case("batch 1", torch.randn(1, 5, D, generator=gen, dtype=F64), torch.tensor([[10, 3, 0, 7, 4]]), 11),
        embedding_case("batch 7", torch.randn(7, 3, D, generator=gen, dtype=F64),
                       torch.randperm(23, generator=gen)[:21].reshape(7, 3), 23),
        embedding_case("batch 7", torch.randn(7, 2, D, generator=gen, dtype=F64),
                       torch.randperm(17, generator=gen)[:14].reshape(7, 2), 17, transposed=True),
        embedding_case("batch 1", torch.randn(1, 6, D, generator=gen, dtype=F64), torch.tensor([[10, 3, 10, 0, 3, 10]]), 11),
        embedding_case("batch 7", torch.randn(7, 4, D, generator=gen, dtype=F64), rep7, 6),
        embedding_case("1-D ids", torch.randn(9, D, generator=gen, dtype=F64), torch.tensor([4, 1, 4, 0, 2, 1, 4, 3, 0]), 5),
        embedding_case("3-D ids", torch.randn(2, 3, 4, D, generator=gen, dtype=F64), torch.randint(0, 7, (2, 3, 4), generator=gen), 7),
    ]
    check_embedding_backward(fn, cases)
    print("✓ embedding_backward passes the visible checks (distinct ids at batch 1 and 7, transposed; repeated ids; "
          "1-D and 3-D ids)")


# ---------------------------------------------------------------------------
# relu_backward


def relu_reference(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (dx,) = torch.autograd.grad(torch.relu(x), x, dy)
    return dx


def relu_alternatives(case: Case) -> dict[str, list[Alternative]]:
    dy, x = case.args
    on = (x > 0).to(dy.dtype)
    return {"dx": [
        Alternative("wrong-values", "dx is relu(ȳ): ReLU's backward depends on where the input x was positive, not "
                    "on the sign of the gradient.", torch.relu(dy)),
        Alternative("wrong-values", "dx is ȳ ⊙ relu(x): that multiplies by the forward's output, not by the "
                    "derivative of max(x, 0).", dy * torch.relu(x)),
        Alternative("wrong-values", "dx is ȳ where x < 0: the mask is inverted.", dy * (1 - on)),
        Alternative("wrong-values", "dx is the 0/1 derivative alone, without the upstream gradient ȳ.", on),
        Alternative("wrong-values", "dx is ȳ everywhere: where x < 0, y = 0 whatever x does.", dy.clone()),
    ]}


def relu_case(label: str, dy: torch.Tensor, x: torch.Tensor, transposed: bool = False) -> Case:
    if transposed:
        dy, x, label = transposed_view(dy), transposed_view(x), f"{label}, dy and x {TRANSPOSED}"
    return Case(f"dy {_shape(dy)}, x {_shape(x)}; {label}", (dy, x), batch=x.shape[0])


def check_relu_backward(fn, cases, reference=relu_reference, alternatives=relu_alternatives) -> None:
    with quiet():
        run_cases("relu_backward", fn, cases, reference, outputs=("dx",), of=("x",), alternatives=alternatives,
                  tol=TOL[F64])


def _off_zero(gen: torch.Generator, *shape: int) -> torch.Tensor:
    x = torch.randn(shape, generator=gen, dtype=F64)
    return x + 0.1 * torch.sign(x)  # no input at the kink x = 0


@graded
def relu_backward(fn) -> None:
    """Visible check: batch 1, batch 7 and 3-D, no input at the kink x = 0."""
    gen = _generator(3)
    cases = [relu_case(label, torch.randn(shape, generator=gen, dtype=F64), _off_zero(gen, *shape))
             for label, shape in (("batch 1", (1, 6)), ("batch 7", (7, 5)), ("3-D", (2, 3, 4)))]
    cases.append(relu_case("batch 7", torch.randn(7, 6, generator=gen, dtype=F64), _off_zero(gen, 7, 6), transposed=True))
    check_relu_backward(fn, cases)
    print("✓ relu_backward passes the visible checks (batch 1, 7, 3-D and transposed)")


# ---------------------------------------------------------------------------
# maxpool1d_backward


def maxpool_positions(x: torch.Tensor, kernel_size: int, stride: int) -> torch.Tensor:
    """Where in x each window's max sits, (..., L_out), from torch's own max_pool1d."""
    L = x.shape[-1]
    _, where = F.max_pool1d(x.reshape(-1, 1, L), kernel_size, stride, return_indices=True)
    return where.reshape(*x.shape[:-1], -1)


def maxpool_reference(dy, x, kernel_size, stride):
    """x̄ of y = max_pool1d(x) over the last axis, by autograd."""
    L = x.shape[-1]
    x = x.clone().requires_grad_(True)
    y = F.max_pool1d(x.reshape(-1, 1, L), kernel_size, stride).reshape(dy.shape)
    (dx,) = torch.autograd.grad(y, x, dy)
    return dx


def maxpool_collisions(dy, x, kernel_size, stride) -> Collisions:
    """Positions that are the max of several windows, and what storing ȳ window by window keeps there."""
    c = gather_collisions(dy, maxpool_positions(x, kernel_size, stride), x.shape[-1])
    return Collisions(c.collided, c.last, c.first)


def maxpool_alternatives(case: ScatterCase) -> list[Alternative]:
    dy, x, kernel_size, stride = case.args
    L = x.shape[-1]
    pos = maxpool_positions(x, kernel_size, stride)
    starts = stride * torch.arange(pos.shape[-1])
    in_window = torch.zeros_like(x).scatter_add_(-1, pos - starts, dy)
    xa = torch.zeros_like(x, requires_grad=True)
    avg = F.avg_pool1d(xa.reshape(-1, 1, L), kernel_size, stride).reshape(dy.shape)
    (spread,) = torch.autograd.grad(avg, xa, dy)
    return [
        Alternative("wrong-values", "dx puts ȳ_j at the argmax's position *within* window j (0 … kernel_size − 1), "
                    "not at its position in x.", in_window),
        Alternative("wrong-values", "dx spreads ȳ_j evenly over window j: that is the backward of average pooling. "
                    "Max-pool's output y_j is one input, the window's max.", spread),
    ]


def maxpool_case(label: str, dy, x, kernel_size: int, stride: int, repeats: bool | None = None,
                 transposed: bool = False) -> ScatterCase:
    if transposed:
        dy, x, label = transposed_view(dy), transposed_view(x), f"{label}, dy and x {TRANSPOSED}"
    if repeats is None:
        pos = maxpool_positions(x, kernel_size, stride)
        repeats = bool((F.one_hot(pos, x.shape[-1]).sum(dim=-2) >= 2).any())
    windows = "overlapping windows, a position that is the max of several" if repeats else "windows that do not share a max"
    return ScatterCase(
        f"dy {_shape(dy)}, x {_shape(x)}, kernel_size = {kernel_size}, stride = {stride}; {label}, {windows}",
        (dy, x, kernel_size, stride), batch=x.shape[0] if x.ndim > 1 else 1, repeats=repeats,
    )


def check_maxpool1d_backward(fn, cases, reference=maxpool_reference, collisions=maxpool_collisions,
                             alternatives=maxpool_alternatives) -> None:
    run_scatter_cases(
        "maxpool1d_backward", fn, cases, reference, collisions, output="dx", of="x",
        how="a store (dx[..., argmax] = ȳ, scatter_)", alternatives=alternatives,
    )


@graded
def maxpool1d_backward(fn) -> None:
    """Visible check: windows side by side (stride = kernel_size), then overlapping windows that share a max."""
    gen = _generator(4)

    def distinct(*shape):  # a random permutation of spread-out values per row: no ties
        return torch.argsort(torch.rand(shape, generator=gen), dim=-1).to(F64) * 0.37 - 1.5

    x1 = torch.tensor([[0.1, 0.5, 2.0, 0.3, -1.0, 0.7, 0.2, 1.5]], dtype=F64)  # window maxima at 2, 2, 2, 5, 5, 7
    x7 = distinct(7, 11)
    x7[:, 3] = 9.0  # the max of windows 0 and 1 (kernel 4, stride 2)
    x7[:, 10] = 10.0  # the last position: the max of the last window
    x3 = distinct(2, 3, 9)
    x3[..., 4] = 9.0  # in windows 1 and 2 (kernel 3, stride 2)
    cases = [
        maxpool_case("batch 1", torch.randn(1, 3, generator=gen, dtype=F64), distinct(1, 9), 3, 3),
        maxpool_case("batch 7", torch.randn(7, 5, generator=gen, dtype=F64), distinct(7, 10), 2, 2),
        maxpool_case("batch 7", torch.randn(7, 3, generator=gen, dtype=F64), distinct(7, 9), 3, 3, transposed=True),
        maxpool_case("batch 1", torch.randn(1, 6, generator=gen, dtype=F64), x1, 3, 1),
        maxpool_case("batch 7", torch.randn(7, 4, generator=gen, dtype=F64), x7, 4, 2),
        maxpool_case("3-D", torch.randn(2, 3, 4, generator=gen, dtype=F64), x3, 3, 2),
    ]
    check_maxpool1d_backward(fn, cases)
    print("✓ maxpool1d_backward passes the visible checks (side-by-side and overlapping windows, batch 1, 7, 3-D "
          "and transposed)")


# ---------------------------------------------------------------------------
# dropout_backward


def dropout_reference(dy, mask, p):
    """x̄ of y = x ⊙ mask / (1 − p), by autograd."""
    x = torch.zeros_like(dy, requires_grad=True)
    (dx,) = torch.autograd.grad(x * mask / (1 - p), x, dy)
    return dx


def dropout_alternatives(case: Case) -> dict[str, list[Alternative]]:
    dy, mask, p = case.args
    kept = dy * mask
    return {"dx": [
        Alternative("scale", f"dx leaves out the forward's scale: the forward multiplied every kept entry by "
                    f"1/(1 − p) = {1 / (1 - p):.4g}, so that y has the mean of x.", kept),
        Alternative("scale", "dx multiplies by (1 − p) where the forward divided by it.", kept * (1 - p)),
        Alternative("scale", "dx divides by p, the probability of dropping an entry; the forward scaled by the "
                    "probability of keeping one.", kept / p),
        Alternative("wrong-values", "dx is not zero where the mask dropped x: a dropped entry had no influence on y.",
                    dy / (1 - p)),
        Alternative("wrong-values", "dx uses the inverted mask: True in mask marks the entries that were kept.",
                    dy * ~mask / (1 - p)),
    ]}


def dropout_case(label: str, dy: torch.Tensor, mask: torch.Tensor, p: float, transposed: bool = False) -> Case:
    if transposed:
        dy, mask, label = transposed_view(dy), transposed_view(mask), f"{label}, dy and mask {TRANSPOSED}"
    return Case(f"dy {_shape(dy)}, mask {_shape(mask)}, p = {p:g}; {label}", (dy, mask, p), batch=dy.shape[0])


def check_dropout_backward(fn, cases, reference=dropout_reference, alternatives=dropout_alternatives) -> None:
    with quiet():
        run_cases("dropout_backward", fn, cases, reference, outputs=("dx",), of=("x",), alternatives=alternatives,
                  tol=TOL[F64])


def keep_mask(gen: torch.Generator, p: float, *shape: int) -> torch.Tensor:
    """A bool mask, True with probability 1 − p, with at least one entry kept and one dropped."""
    mask = torch.rand(shape, generator=gen) >= p
    flat = mask.view(-1)
    flat[0], flat[-1] = True, False
    return mask


@graded
def dropout_backward(fn) -> None:
    """Visible check: p = 0.25, 0.6 and 0.5 at batch 1, batch 7 and 3-D."""
    gen = _generator(5)
    cases = [dropout_case(label, torch.randn(shape, generator=gen, dtype=F64), keep_mask(gen, p, *shape), p)
             for label, shape, p in (("batch 1", (1, 16), 0.25), ("batch 7", (7, 6), 0.6), ("3-D", (2, 3, 5), 0.5))]
    cases.append(dropout_case("batch 7", torch.randn(7, 8, generator=gen, dtype=F64), keep_mask(gen, 0.3, 7, 8), 0.3,
                              transposed=True))
    check_dropout_backward(fn, cases)
    print("✓ dropout_backward passes the visible checks (p = 0.25, 0.6, 0.5, 0.3; batch 1, 7, 3-D and transposed)")


# ---------------------------------------------------------------------------
# moe_gate_backward

MOE_OUTPUTS = ("dlogits", "dexpert_out")
MOE_OF = ("logits", "expert_out")


def moe_forward(logits, indices, expert_out):
    """y = Σ_m g_m · expert_out[..., m, :] with g = softmax(logits).gather(-1, indices): (..., D)."""
    gates = torch.softmax(logits, dim=-1).gather(-1, indices)  # (..., k)
    return torch.einsum("...m,...md->...d", gates, expert_out)


def moe_reference(dy, logits, indices, expert_out):
    """(logits̄, expert_out̄) by autograd through ``moe_forward``; the indices get no gradient."""
    logits = logits.clone().requires_grad_(True)
    expert_out = expert_out.clone().requires_grad_(True)
    return torch.autograd.grad(moe_forward(logits, indices, expert_out), (logits, expert_out), dy)


def moe_case(label: str, gen: torch.Generator, lead: tuple[int, ...], E: int, k: int, D: int,
             transposed: bool = False) -> Case:
    """``transposed``: every tensor a view with its last two axes swapped in memory (non-contiguous)."""
    logits = torch.randn(*lead, E, generator=gen, dtype=F64)
    indices = logits.topk(k, dim=-1).indices  # (..., k): chosen by the forward, constants from here on
    expert_out = torch.randn(*lead, k, D, generator=gen, dtype=F64)
    dy = torch.randn(*lead, D, generator=gen, dtype=F64)
    args = (dy, logits, indices, expert_out)
    if transposed:
        args = tuple(transposed_view(t) for t in args)
        label = f"{label}, every input {TRANSPOSED}"
    return Case(
        f"dy {(*lead, D)}, logits {(*lead, E)}, indices {(*lead, k)}, expert_out {(*lead, k, D)}; {label}, "
        f"top-{k} of {E} experts", args, batch=lead[0],
    )


def check_moe_gate_backward(fn, cases, reference=moe_reference, alternatives=None) -> None:
    with quiet():
        run_cases("moe_gate_backward", fn, cases, reference, outputs=MOE_OUTPUTS, of=MOE_OF,
                  alternatives=alternatives, tol=TOL[F64])


@graded
def moe_gate_backward(fn) -> None:
    """Visible check: top-2 of 6 at batch 1, top-3 of 5 at batch 7, top-1 (Switch), and 3-D tokens."""
    gen = _generator(6)
    cases = [
        moe_case("batch 1", gen, (1,), 6, 2, 4),
        moe_case("batch 7", gen, (7,), 5, 3, 3),
        moe_case("batch 7", gen, (7,), 4, 1, 2),  # k = 1: one expert per token, as in a Switch Transformer
        moe_case("3-D (batch, tokens)", gen, (2, 3), 8, 2, 5),
        moe_case("batch 7", gen, (7,), 6, 2, 3, transposed=True),
    ]
    check_moe_gate_backward(fn, cases)
    print("✓ moe_gate_backward passes the visible checks (top-1, 2 and 3 of 4 to 8 experts; batch 1, 7, 3-D and "
          "transposed)")


# ---------------------------------------------------------------------------
# scatter_add_kernel


@dataclass
class KernelCase:
    """One launch: src (rows, D) float64 values, the index (rows,), n output rows, the block, the dtype."""

    src: torch.Tensor
    index: torch.Tensor
    n: int
    block: int
    dtype: torch.dtype

    @property
    def repeats(self) -> bool:
        return bool((torch.bincount(self.index, minlength=self.n) >= 2).any())

    def label(self, src_stride: int, out_stride: int) -> str:
        rows, D = self.src.shape
        what = "repeated indices" if self.repeats else "distinct indices"
        return (f"src ({rows}, {D}) with rows {src_stride} apart, index ({rows},) into n = {self.n} output rows "
                f"{out_stride} apart, BLOCK_D = {self.block}, {str(self.dtype).removeprefix('torch.')}; {what}")


@dataclass
class Launch:
    got: torch.Tensor  # the (n, D) result, float64 on the CPU
    wrote_outside: bool  # stored into the padding after a row or into a row past n
    touched_inputs: bool


def launch_scatter_kernel(kernel, case: KernelCase) -> tuple[Launch, str]:
    """Launch ``kernel`` as the notebook's host function does, on rows inside padded, guarded buffers.

    src rows sit D + 2 apart with NaN after each row (memory past a row may hold anything) and guard
    rows of NaN after the last; the output rows sit D + 3 apart, zero in the first D columns, with
    the padding and guard rows holding a sentinel that a stray store would change.
    """
    import triton

    rows, D = case.src.shape
    dev = device()
    src_buf = torch.full((rows + 2, D + 2), math.nan, dtype=case.dtype, device=dev)
    src_buf[:rows, :D] = case.src.to(dev, case.dtype)
    out_buf = torch.full((case.n + rows + 1, D + 3), SENTINEL, dtype=case.dtype, device=dev)
    out_buf[: case.n, :D] = 0.0
    index = case.index.to(dev, torch.int64).contiguous()
    src_before, index_before, out_before = src_buf.clone(), index.clone(), out_buf.clone()
    src, out = src_buf[:rows, :D], out_buf[: case.n, :D]
    grid = (rows, triton.cdiv(D, case.block))

    def launch():
        kernel[grid](src, index, out, src.stride(0), out.stride(0), D, BLOCK_D=case.block)

    run_student("scatter_add_kernel", unwrapped(launch), forbid_autograd_use=False)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    outside = out_buf.clone()
    outside[: case.n, :D] = out_before[: case.n, :D]
    wrote_outside = not torch.equal(outside, out_before)
    touched = not (_same(src_buf, src_before) and torch.equal(index, index_before))
    label = case.label(src.stride(0), out.stride(0))
    return Launch(out.detach().to("cpu", F64), wrote_outside, touched), label


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def index_add_reference(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, src.shape[1], dtype=F64).index_add_(0, index, src.to(F64))


def rows_collisions(src: torch.Tensor, index: torch.Tensor, n: int) -> Collisions:
    """Output rows that several source rows add into, and what a store in program order keeps."""
    return embedding_collisions(src.to(F64), index, n)


def kernel_failure(kernel, case: KernelCase, reference=index_add_reference, collisions=rows_collisions, *,
                   passed_without_repeats: bool) -> GradingFailure | None:
    """Launch once and say what is wrong, if anything."""
    launch, label = launch_scatter_kernel(kernel, case)
    rows, D = case.src.shape
    if launch.touched_inputs:
        return GradingFailure("wrong-values", "scatter_add_kernel wrote into SRC_ptr or INDEX_ptr: they are inputs, "
                              "read-only.", f"inputs: {label}")
    if launch.wrote_outside:
        return GradingFailure(
            "wrong-values",
            f"scatter_add_kernel writes outside the {case.n} × {D} output: into the columns past n_cols of a row (a "
            f"row of {D} takes {math.ceil(D / case.block)} block(s) of BLOCK_D = {case.block}), or into rows that do "
            "not exist.", f"inputs: {label}")
    expected = reference(case.src, case.index, case.n)
    scase = ScatterCase(label, (), batch=rows, repeats=case.repeats)
    coll = collisions(case.src, case.index, case.n) if case.repeats else None
    return scatter_failure(
        "out", launch.got, expected, scase, coll, how="tl.store", passed_without_repeats=passed_without_repeats,
        passed_batch1=False, alternatives=kernel_alternatives(case, expected), tol=TOL[case.dtype],
    )


def kernel_alternatives(case: KernelCase, expected: torch.Tensor) -> list[Alternative]:
    """What a kernel adds that writes source row i to output row i, or ignores tl.program_id(1)."""
    rows, D = case.src.shape
    alts = []
    if rows <= case.n:
        own_row = torch.zeros_like(expected)
        own_row[:rows] = case.src.to(F64)
        alts.append(Alternative("wrong-values", "out holds source row i in output row i: each source row has its own "
                                "destination, index[i].", own_row))
    blocks = math.ceil(D / case.block)
    if blocks == 1:
        return alts
    block = case.block
    sentence = (f"out holds only the first BLOCK_D = {block} columns of each row{{}}: a row of n_cols = {D} takes "
                f"{blocks} programs along the grid's second axis, each with its own block of columns.")
    first = torch.zeros_like(expected)
    first[:, :block] = expected[:, :block]
    return alts + [
        Alternative("wrong-values", sentence.format(f", added {blocks} times (once per column block)"), blocks * first),
        Alternative("wrong-values", sentence.format(""), first),
    ]


def check_scatter_add_kernel(kernel, cases: Sequence[KernelCase], **kwargs) -> None:
    """Every case, those without repeats first; then the atomic itself, which a CPU cannot test by values."""
    if not is_kernel(kernel):
        if callable(kernel):
            raise GradingFailure("error", "scatter_add_kernel is not a Triton kernel: keep the @triton.jit line above its def.")
        raise GradingFailure("error", f"scatter_add_kernel is a {type(kernel).__name__}, not a kernel: run the cell that defines it.")
    passed_without_repeats = False
    for case in cases:
        failure = kernel_failure(kernel, case, passed_without_repeats=passed_without_repeats, **kwargs)
        if failure is not None:
            raise failure
        passed_without_repeats |= not case.repeats
    if "atomic_add" not in _names(kernel.fn):
        raise GradingFailure(
            "non-atomic-scatter",
            "scatter_add_kernel gives the right sums here only because Triton's interpreter runs one program at a "
            "time: it never calls tl.atomic_add. On a GPU, programs whose rows share a destination run at once, and "
            "a load, an add and a store from two of them interleave — one of the two additions is lost.")


def _names(fn) -> set[str]:
    """Every global and attribute name the function's code (and any code nested in it) refers to."""
    names, todo = set(), [getattr(fn, "__code__", None)]
    while todo:
        code = todo.pop()
        if code is None:
            continue
        names |= set(code.co_names)
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
    return names


def kernel_case(gen: torch.Generator, rows: int, n: int, D: int, block: int, dtype=F64, index=None) -> KernelCase:
    if index is None:
        index = torch.randint(0, n, (rows,), generator=gen)
    return KernelCase(torch.randn(rows, D, generator=gen, dtype=F64), torch.as_tensor(index), n, block, dtype)


@graded
def scatter_add_kernel(kernel) -> None:
    """Visible check: one row, distinct rows, repeated rows (the last slot among them), float64 and float32."""
    gen = _generator(7)
    distinct = torch.cat([torch.tensor([8]), torch.randperm(8, generator=gen)[:6]])  # 8: the last output row
    repeated = torch.randint(0, 5, (12,), generator=gen)
    repeated[[2, 9]] = 4
    cases = [
        kernel_case(gen, 1, 4, 5, 8, index=[3]),  # batch 1: one row, the last slot, a masked tail
        kernel_case(gen, 7, 9, 13, 8, index=distinct),  # distinct rows, two column blocks per row
        kernel_case(gen, 7, 4, 13, 8, index=[3, 0, 3, 1, 3, 0, 3]),  # repeats: row 3 (the last) four times
        kernel_case(gen, 12, 5, 6, 4, F32, index=repeated),  # float32
    ]
    check_scatter_add_kernel(kernel, cases)
    print("✓ scatter_add_kernel passes the visible checks (one row, distinct and repeated rows, float64 and float32, "
          "tl.atomic_add)")


__all__ = [
    "topk_backward", "embedding_backward", "relu_backward", "maxpool1d_backward", "dropout_backward",
    "moe_gate_backward", "scatter_add_kernel",
]

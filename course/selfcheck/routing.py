"""Visible checks for 06_topk_routing (docs/design.md, "A lesson is a spec"): scatters, the zero-FLOP backwards,
the MoE gate, a scatter-add kernel.

A store where an add is needed is right wherever one contribution lands, so every scatter runs first on
inputs without repeated indices, then on inputs with them (the last slot among them): a result wrong only
where several contributions land is ``non-atomic-scatter``, and the message says so when it equals what a
store keeps (the last writer, as on a CPU, or the first). Triton's interpreter runs one program at a time, so
a kernel's read-add-store between programs gives the right sums there: the sanitizer every student call runs
under (``course.sanitizer``) reads the kernel's accesses and names it ``race``, whatever its text mentions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..diagnose import (
    TRANSPOSED,
    Alternative,
    Case,
    GradingFailure,
    Passed,
    batch_refined,
    clone_args,
    layout_refined,
    randn,
    seeded,
    transposed_view,
    vjp,
)
from ..kernel_spec import F32, F64, SENTINEL, TOL, Guarded, KernelSpec, Launch, Wrong
from ..spec import Exercise, visible
from ..triton_check import device, launch


def _transposed(label: str, names: str, *tensors: torch.Tensor) -> tuple:
    """``label`` saying that ``names`` are transposed views, then those views of ``tensors``."""
    return (f"{label}, {names} {TRANSPOSED}", *map(transposed_view, tensors))


def _repeats(indices: torch.Tensor, n: int) -> bool:
    """Whether a slot below ``n`` appears twice along the last axis of ``indices`` (in some row)."""
    return bool((F.one_hot(indices, n).sum(dim=-2) >= 2).any())


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


def scatter_refined(failure: GradingFailure, out: str, case: ScatterCase, got, expected: torch.Tensor,
                    collisions: Collisions | None, how: str, passed: Passed) -> GradingFailure:
    """A scatter's failure read in the light of the cases before it: right without repeated indices and wrong
    only where several contributions land is ``non-atomic-scatter``; right at batch 1 and wrong above it (no
    repeats) is ``batch-reduction``; right for contiguous inputs and wrong for a transposed view is the layout."""
    layout = layout_refined(failure, out, case, passed)
    if layout or failure.cls != "wrong-values":
        return layout or failure
    if case.repeats:
        return passed.without_repeats and collided_only(failure, out, got, expected, collisions, how) or failure
    return batch_refined(failure, out, case.batch, passed.batch1, "every row of the batch must contribute, not only "
                         "the first one.", named=True)


@dataclass(frozen=True)
class Scatter:
    """A scatter's store where an add is needed: what it keeps where indices repeat (``collisions(*args)``), named
    before the exercise's own bugs (``more(case)``, a list), and how a failure is read in the light of the cases
    before it (:func:`scatter_refined`); ``how`` names the student's store."""

    out: str
    collisions: Callable
    how: str
    more: Callable | None = None

    def kept(self, case: ScatterCase) -> Collisions | None:
        return self.collisions(*clone_args(case.args)) if case.repeats else None

    def alternatives(self, case: ScatterCase) -> dict[str, list[Alternative]]:
        stores = store_alternatives(self.out, self.kept(case), self.how) if case.repeats else []
        return {self.out: stores + (self.more(case) if self.more else [])}

    def refine(self, failure: GradingFailure, out: str, case: ScatterCase, got, expected, passed: Passed) -> GradingFailure:
        return scatter_refined(failure, out, case, got[0], expected[0], self.kept(case), self.how, passed)


def collided_only(failure: GradingFailure, out: str, got, expected: torch.Tensor, collisions: Collisions,
                  how: str) -> GradingFailure | None:
    """``non-atomic-scatter`` when ``out`` is wrong only where several contributions land; else None."""
    g = got.detach().to("cpu", F64)
    e = expected.detach().to("cpu", F64)
    scale = max(e.abs().max().item(), 1e-300)
    bad = (g - e).abs() > 1e-6 * scale
    if not bool(bad.any()) or bool((bad & ~collisions.collided).any()):
        return None
    return GradingFailure(
        "non-atomic-scatter",
        f"{out} is right wherever one contribution lands and wrong only where several land on the same "
        f"slot ({int(collisions.collided.sum())} such entries here): {how} does not collect them all, and "
        "every output that read the slot in the forward owes it its gradient.",
        failure.where,
    )


def gather_collisions(dy: torch.Tensor, indices: torch.Tensor, n: int) -> Collisions:
    """Slots of x̄ (..., n) hit by more than one index, and what storing ȳ slot by slot would keep there."""
    hits = F.one_hot(indices, n).sum(dim=-2)  # (..., n): how many outputs read each slot
    last = torch.zeros(*indices.shape[:-1], n, dtype=dy.dtype)
    first = last.clone()
    k = indices.shape[-1]
    for m in range(k):  # in order: the last store to a slot wins
        last.scatter_(-1, indices[..., m:m + 1], dy[..., m:m + 1])
    for m in reversed(range(k)):  # in reverse: the first one wins
        first.scatter_(-1, indices[..., m:m + 1], dy[..., m:m + 1])
    return Collisions(hits >= 2, last, first)


def embedding_collisions(dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int) -> Collisions:
    """Rows of W̄ read more than once, and what storing ȳ row by row keeps there: in each of the D
    columns, the stores of a gather whose indices are the R ids."""
    D = dy.shape[-1]
    columns = dy.reshape(-1, D).T  # (D, R)
    c = gather_collisions(columns, ids.reshape(1, -1).expand(D, -1), num_embeddings)  # (D, num_embeddings)
    return Collisions(c.collided.T, c.last.T, c.first.T)


# ---------------------------------------------------------------------------
# topk_backward


def gather_reference(dy: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """x̄ of y = x.gather(-1, indices) for x of last size n, by autograd (top-k's forward is such a gather)."""
    return vjp(lambda x: x.gather(-1, indices), (dy.new_zeros(*indices.shape[:-1], n),), dy)[0]


def topk_alternatives(case: ScatterCase) -> list[Alternative]:
    dy, indices, n = case.args
    if dy.shape[-1] > n:
        return []
    front = torch.zeros(*dy.shape[:-1], n, dtype=dy.dtype)
    front[..., : dy.shape[-1]] = dy
    return [Alternative("wrong-values", "dx holds ȳ in its first k slots, not in the slots the values were read from.",
                        front)]


# ---------------------------------------------------------------------------
# embedding_backward


def embedding_reference(dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int) -> torch.Tensor:
    """W̄ of y = W[ids], by autograd through F.embedding."""
    return vjp(lambda W: F.embedding(ids, W), (dy.new_zeros(num_embeddings, dy.shape[-1]),), dy)[0]


def embedding_case(label: str, dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int,
                   transposed: bool = False) -> ScatterCase:
    """``transposed``: ids (B, T) and dy (B, T, D) laid out with B and T swapped in memory (non-contiguous views)."""
    repeats = _repeats(ids.reshape(1, -1), num_embeddings)
    batch = ids.shape[0] if ids.ndim > 1 else 1
    what = "repeated ids" if repeats else "distinct ids"
    if transposed:
        ids, dy = transposed_view(ids), dy.transpose(0, 1).contiguous().transpose(0, 1)
        what += f", ids and dy {TRANSPOSED}"
    return ScatterCase(
        f"dy {tuple(dy.shape)}, ids {tuple(ids.shape)}, num_embeddings = {num_embeddings}; {label}, {what}",
        (dy, ids, num_embeddings), batch=batch, repeats=repeats,
    )


# ---------------------------------------------------------------------------
# relu_backward


def relu_reference(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return vjp(torch.relu, (x,), dy)[0]


def relu_alternatives(case: Case) -> dict[str, list[Alternative]]:
    dy, x = case.args
    on = (x > 0).to(dy.dtype)
    alts = []
    if bool((x == 0).any()):  # the forward's output was handed in: every dropped entry is exactly 0
        alts.append(Alternative(
            "wrong-values", "dx passes ȳ where the tensor handed in is exactly 0: an in-place ReLU hands the backward "
            "its output, whose dropped entries are all 0, and nothing reached y through them.",
            dy * (x >= 0)))
    return {"dx": alts + [
        Alternative("wrong-values", "dx is relu(ȳ): ReLU's backward depends on where the input x was positive, not "
                    "on the sign of the gradient.", torch.relu(dy)),
        Alternative("wrong-values", "dx is ȳ ⊙ relu(x): that multiplies by the forward's output, not by the "
                    "derivative of max(x, 0).", dy * torch.relu(x)),
        Alternative("wrong-values", "dx is ȳ where x < 0: the mask is inverted.", dy * (1 - on)),
        Alternative("wrong-values", "dx is the 0/1 derivative alone, without the upstream gradient ȳ.", on),
        Alternative("wrong-values", "dx is ȳ everywhere: where x < 0, y = 0 whatever x does.", dy.clone()),
    ]}


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
    return vjp(lambda x: F.max_pool1d(x.reshape(-1, 1, L), kernel_size, stride).reshape(dy.shape), (x,), dy)[0]


def maxpool_collisions(dy, x, kernel_size, stride) -> Collisions:
    """Positions that are the max of several windows, and what storing ȳ window by window keeps there."""
    return gather_collisions(dy, maxpool_positions(x, kernel_size, stride), x.shape[-1])


def maxpool_alternatives(case: ScatterCase) -> list[Alternative]:
    dy, x, kernel_size, stride = case.args
    L = x.shape[-1]
    pos = maxpool_positions(x, kernel_size, stride)
    starts = stride * torch.arange(pos.shape[-1])
    in_window = torch.zeros_like(x).scatter_add_(-1, pos - starts, dy)
    average_pool = lambda x: F.avg_pool1d(x.reshape(-1, 1, L), kernel_size, stride).reshape(dy.shape)  # noqa: E731
    spread = vjp(average_pool, (torch.zeros_like(x),), dy)[0]
    # Each window's argmax offset from j·kernel_size instead of j·stride (possible only where that stays inside x).
    wrong = pos - starts + kernel_size * torch.arange(pos.shape[-1])
    alts = []
    if stride != kernel_size and int(wrong.max()) < L:
        alts.append(Alternative(
            "wrong-values", f"dx places window j's max as if the window started at j·kernel_size = {kernel_size}j; it "
            f"starts at j·stride = {stride}j, and the windows {'overlap' if stride < kernel_size else 'leave gaps'} here.",
            torch.zeros_like(x).scatter_add_(-1, wrong, dy)))
    return alts + [
        Alternative("wrong-values", "dx puts ȳ_j at the argmax's position *within* window j (0 … kernel_size − 1), "
                    "not at its position in x.", in_window),
        Alternative("wrong-values", "dx spreads ȳ_j evenly over window j: that is the backward of average pooling. "
                    "Max-pool's output y_j is one input, the window's max.", spread),
    ]


# ---------------------------------------------------------------------------
# dropout_backward


def dropout_reference(dy, mask, p):
    """x̄ of y = x ⊙ mask / (1 − p), by autograd."""
    return vjp(lambda x: x * mask / (1 - p), (torch.zeros_like(dy),), dy)[0]


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


def keep_mask(gen: torch.Generator, p: float, *shape: int) -> torch.Tensor:
    """A bool mask, True with probability 1 − p, with at least one entry kept and one dropped."""
    mask = torch.rand(shape, generator=gen) >= p
    flat = mask.view(-1)
    flat[0], flat[-1] = True, False
    return mask


# ---------------------------------------------------------------------------
# moe_gate_backward


def moe_reference(dy, logits, indices, expert_out):
    """(logits̄, expert_out̄) by autograd; the indices get no gradient."""

    def forward(logits, expert_out):  # y = Σ_m g_m · expert_out[..., m, :] with g = softmax(logits).gather(-1, indices)
        gates = torch.softmax(logits, dim=-1).gather(-1, indices)  # (..., k)
        return torch.einsum("...m,...md->...d", gates, expert_out)  # (..., D)

    return vjp(forward, (logits, expert_out), dy)


def moe_case(label: str, gen: torch.Generator, lead: tuple[int, ...], E: int, k: int, D: int,
             transposed: bool = False) -> Case:
    """``transposed``: every tensor a view with its last two axes swapped in memory (non-contiguous)."""
    logits = randn(gen, *lead, E)
    indices = logits.topk(k, dim=-1).indices  # (..., k): chosen by the forward, constants from here on
    expert_out = randn(gen, *lead, k, D)
    dy = randn(gen, *lead, D)
    args = (dy, logits, indices, expert_out)
    if transposed:
        label, *args = _transposed(label, "every input", *args)
    return Case(
        f"dy {(*lead, D)}, logits {(*lead, E)}, indices {(*lead, k)}, expert_out {(*lead, k, D)}; {label}, "
        f"top-{k} of {E} experts", tuple(args), batch=lead[0],
    )


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
    after_distinct: bool = False  # a case before it (so one that passed) had no shared destination

    @property
    def repeats(self) -> bool:
        return bool((torch.bincount(self.index, minlength=self.n) >= 2).any())

    @property
    def args(self) -> tuple:
        return self.src, self.index, self.n


def kernel_cases(gen: torch.Generator, rows: Sequence[tuple]) -> list[KernelCase]:
    """A case per (rows, n, D, BLOCK_D, dtype, index) of ``rows``, index a list, "distinct" (n − 1 among them) or
    "repeated" (n − 1 first and last); the drawn indices come from ``gen`` first, then each src, in that order."""
    index = [distinct_with_last(gen, n, r) if i == "distinct" else last_slot_twice(_randint(gen, n, r), n)
             if i == "repeated" else torch.as_tensor(i) for r, n, _, _, _, i in rows]
    cases = [KernelCase(randn(gen, r, D), i, n, block, dtype) for (r, n, D, block, dtype, _), i in zip(rows, index)]
    for i, case in enumerate(cases):
        case.after_distinct = any(not c.repeats for c in cases[:i])
    return cases


def index_add_reference(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, src.shape[1], dtype=F64).index_add_(0, index, src.to(F64))


def launch_scatter_add(kernel, case: KernelCase, fill: float = math.nan) -> Launch:
    """Launch once, as the notebook's host function does: src rows D + 2 apart with ``fill`` after each row and in
    guard rows after the last (memory past a row may hold anything); output rows D + 3 apart, zero in the first D
    columns, the padding and guard rows at a sentinel that a stray store would change."""
    import triton

    rows, D = case.src.shape
    src = Guarded(case.src, (2, 2), fill, case.dtype)
    out = Guarded(torch.zeros(case.n, D), (rows + 1, 3), SENTINEL, case.dtype)
    index = case.index.to(device(), torch.int64).contiguous()
    touched = launch("scatter_add_kernel", lambda: kernel[(rows, triton.cdiv(D, case.block))](
        src.view, index, out.view, src.view.stride(0), out.view.stride(0), D, BLOCK_D=case.block),
        {"SRC_ptr": src.buf, "INDEX_ptr": index})
    label = (f"src ({rows}, {D}) with rows {src.view.stride(0)} apart, index ({rows},) into n = {case.n} output rows "
             f"{out.view.stride(0)} apart, BLOCK_D = {case.block}, {str(case.dtype).removeprefix('torch.')}; "
             f"{'repeated' if case.repeats else 'distinct'} indices")
    return Launch({"out": out.got()}, touched, ["outside"] if out.spilled() else [], label)


def _kernel_past_end(spec: KernelSpec, case: KernelCase, run: Launch) -> tuple[str, str]:
    D = case.src.shape[1]
    return (f"scatter_add_kernel writes outside the {case.n} × {D} output: into the columns past n_cols of a row (a "
            f"row of {D} takes {math.ceil(D / case.block)} block(s) of BLOCK_D = {case.block}), or into rows that do "
            "not exist.", "")


def kernel_alternatives(case: KernelCase) -> list[Alternative]:
    """What a kernel adds that writes source row i to output row i, or ignores tl.program_id(1)."""
    rows, D = case.src.shape
    expected = index_add_reference(case.src, case.index, case.n)
    alts = []
    if rows <= case.n:
        own_row = torch.zeros_like(expected)
        own_row[:rows] = case.src.to(F64)
        alts.append(Alternative("wrong-values", "out holds source row i in output row i: each source row has its own "
                                "destination, index[i].", own_row))
    blocks = math.ceil(D / case.block)
    if blocks == 1:
        return alts
    sentence = (f"out holds only the first BLOCK_D = {case.block} columns of each row{{}}: a row of n_cols = {D} takes "
                f"{blocks} programs along the grid's second axis, each with its own block of columns.")
    first = torch.zeros_like(expected)
    first[:, :case.block] = expected[:, :case.block]
    return alts + [
        Alternative("wrong-values", sentence.format(f", added {blocks} times (once per column block)"), blocks * first),
        Alternative("wrong-values", sentence.format(""), first),
    ]


def _kernel_collided_only(wrong: Wrong) -> GradingFailure | None:
    """Wrong only where rows share a destination, once a case without shared ones passed: a store, not an add."""
    case = wrong.case
    if wrong.failure.cls != "wrong-values" or not case.repeats or not case.after_distinct:
        return None
    return collided_only(wrong.failure, "out", wrong.got, wrong.expected["out"], STORE.kept(case), STORE.how)


STORE = Scatter("out", embedding_collisions, "tl.store", kernel_alternatives)  # the kernel's src rows are ȳ's
SCATTER_ADD = KernelSpec(
    name="scatter_add_kernel", launch=launch_scatter_add,
    reference=lambda case: {"out": index_add_reference(case.src, case.index, case.n)}, alternatives=STORE.alternatives,
    read_only="src and index are read-only; store the sums through OUT_ptr.", past_end=_kernel_past_end,
    wrote_first=True, refinements=(_kernel_collided_only,))


# ---------------------------------------------------------------------------
# The exercises, as data


DX = {"outputs": ("dx",), "of": ("x",), "tol": TOL[F64]}  # one float64 dx for x


def scatter(name: str, reference: Callable, scattered: Scatter, out: str = "dx", of: str = "x") -> Exercise:
    """A scatter exercise: cases without repeated indices come first, where a store is as good as an add."""
    return Exercise(name=name, reference=reference, outputs=(out,), of=(of,), tol=TOL[F64],
                    alternatives=scattered.alternatives, refine=scattered.refine)


EXERCISES = {ex.name: ex for ex in (
    scatter("topk_backward", gather_reference, Scatter("dx", gather_collisions, "a store (an indexed assignment, "
                                                       "scatter_ or index_put_)", topk_alternatives)),
    scatter("embedding_backward", embedding_reference,
            Scatter("dW", embedding_collisions, "a store (dW[ids] = ȳ, index_put_ or index_copy_)"),
            "dW", "the embedding table W"),
    Exercise(name="relu_backward", reference=relu_reference, alternatives=relu_alternatives, **DX),
    scatter("maxpool1d_backward", maxpool_reference,
            Scatter("dx", maxpool_collisions, "a store (dx[..., argmax] = ȳ, scatter_)", maxpool_alternatives)),
    Exercise(name="dropout_backward", reference=dropout_reference, alternatives=dropout_alternatives, **DX),
    Exercise(name="moe_gate_backward", reference=moe_reference, outputs=("dlogits", "dexpert_out"),
             of=("logits", "expert_out"), tol=TOL[F64]),
)}


# ---------------------------------------------------------------------------
# Case builders: a generator, a table of shapes, and (for tie-free values) a way to draw them.
# Each table lists its rows in the order the cases run; the transposed case follows the contiguous ones.


def last_slot_twice(indices: torch.Tensor, n: int) -> torch.Tensor:
    """Put the last slot n − 1 at the first and last position of every row: repeated, at the edge."""
    indices = indices.clone()
    indices[..., 0] = indices[..., -1] = n - 1
    return indices


def distinct_with_last(gen: torch.Generator, n: int, count: int) -> torch.Tensor:
    """``count`` distinct indices below n in a random order, the last one n − 1 (the last slot)."""
    return torch.cat([torch.randperm(n - 1, generator=gen)[:count - 1], torch.tensor([n - 1])])


def _randint(gen: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen, dtype=torch.int64)


def _in_order(rows: Sequence, transposed, repeated: Sequence = ()) -> list[tuple]:
    """(row, kind) for each of ``rows`` (kind ""), then ``transposed``, then each of ``repeated``: the order
    the cases run in (the layout case after the contiguous ones, repeated indices last)."""
    return [(row, "") for row in rows] + [(transposed, "transposed")] + [(row, "repeated") for row in repeated]


def topk_cases(gen, distinct, top, transposed, repeated) -> list[ScatterCase]:
    """``top``: (label, lead, n, k) true top-k of tie-free rows, the last slot chosen in the first row;
    ``transposed``: one more, laid out transposed; ``repeated``: gathers with k > n, the last slot twice per row."""
    cases = []
    for (label, lead, n, k), kind in _in_order(top, transposed, repeated):
        if kind == "repeated":
            indices = last_slot_twice(_randint(gen, n, *lead, k), n)  # k > n: repeats in every row
        else:
            x = distinct(gen, *lead, n)
            if not kind:
                x[(0,) * len(lead) + (n - 1,)] = 10.0  # the last slot is chosen in the first row
            indices = x.topk(k, dim=-1).indices
        dy, repeats = randn(gen, *lead, k), _repeats(indices, n)
        what = "repeated indices" if repeats else "distinct indices (a top-k)"
        if kind == "transposed":
            what, dy, indices = _transposed(what, "dy and indices", dy, indices)
        cases.append(ScatterCase(f"dy {tuple(dy.shape)}, indices {tuple(indices.shape)}, n = {n}; {label}, {what}",
                                 (dy, indices, n), batch=dy.shape[0] if dy.ndim > 1 else 1, repeats=repeats))
    return cases


def embedding_cases(gen, widths, distinct, transposed, repeated) -> list[ScatterCase]:
    """One width D in ``widths`` [lo, hi) for every case. ``distinct``: (label, ids shape, num_embeddings)
    with distinct ids, the last row of the table among them; ``transposed``: one more, laid out transposed;
    ``repeated``: random ids, the last row read first and last."""
    D = widths[0] + int(_randint(gen, widths[1] - widths[0]))
    ids = [distinct_with_last(gen, num, math.prod(shape)).reshape(shape) for _, shape, num in distinct]
    cases = [embedding_case(label, randn(gen, *shape, D), i, num) for (label, shape, num), i in zip(distinct, ids)]
    label, shape, num = transposed
    cases.append(embedding_case(label, randn(gen, *shape, D),
                                torch.randperm(num, generator=gen)[:math.prod(shape)].reshape(shape), num,
                                transposed=True))
    for label, shape, num in repeated:
        ids = last_slot_twice(_randint(gen, num, *shape).reshape(-1), num).reshape(shape)
        cases.append(embedding_case(label, randn(gen, *shape, D), ids, num))
    return cases


def maxpool_cases(gen, distinct, apart, transposed, overlapping) -> list[ScatterCase]:
    """Rows (label, lead, L, kernel_size, stride) with (L − kernel_size) % stride == 0, so the last window
    ends at L − 1, whose position is the last window's max. ``apart``: windows that share no max;
    ``transposed``: one more, laid out transposed; ``overlapping``: one position (kernel_size − 1, in
    windows 0 and 1) is the max of both."""
    cases = []
    for (label, lead, L, K, s), kind in _in_order(apart, transposed, overlapping):
        x = distinct(gen, *lead, L)
        top = x.max().item()
        x[..., L - 1] = top + 2.0
        if kind == "repeated":
            x[..., K - 1] = top + 1.0
        dy = randn(gen, *lead, (L - K) // s + 1)
        if kind == "transposed":
            label, dy, x = _transposed(label, "dy and x", dy, x)
        repeats = _repeats(maxpool_positions(x, K, s), L)
        windows = "overlapping windows, a position that is the max of several" if repeats else "windows that do not share a max"
        cases.append(ScatterCase(f"dy {tuple(dy.shape)}, x {tuple(x.shape)}, kernel_size = {K}, stride = {s}; {label}, "
                                 f"{windows}", (dy, x, K, s), batch=x.shape[0] if x.ndim > 1 else 1, repeats=repeats))
    return cases


def relu_cases(gen, shapes, transposed, margin: float, in_place=()) -> list[Case]:
    """(label, shape) rows of ȳ and x, x at least ``margin`` away from the kink at 0; then ``transposed``; then
    ``in_place``: rows where the tensor handed in is the forward's output relu(x), as an in-place ReLU leaves it
    (its dropped entries exactly 0)."""
    cases = []
    for (label, shape), kind in _in_order(shapes, transposed, in_place):
        dy, x = randn(gen, *shape), randn(gen, *shape)
        x = x + margin * torch.sign(x)
        if kind == "transposed":
            label, dy, x = _transposed(label, "dy and x", dy, x)
        what = "x"
        if kind == "repeated":
            x, what, label = torch.relu(x), "y", f"{label}, the forward's output y = relu(x) handed in (in-place ReLU)"
        cases.append(Case(f"dy {tuple(dy.shape)}, {what} {tuple(x.shape)}; {label}", (dy, x), batch=x.shape[0]))
    return cases


def dropout_cases(gen, shapes, transposed) -> list[Case]:
    """(label, shape, p) rows, then ``transposed``; p a number, or a range (lo, hi) to draw it from (3 digits)."""
    cases = []
    for (label, shape, p), kind in _in_order(shapes, transposed):
        if isinstance(p, tuple):
            p = round(p[0] + (p[1] - p[0]) * torch.rand((), generator=gen, dtype=F64).item(), 3)
        dy, mask = randn(gen, *shape), keep_mask(gen, p, *shape)
        if kind:
            label, dy, mask = _transposed(label, "dy and mask", dy, mask)
        label = f"dy {tuple(dy.shape)}, mask {tuple(mask.shape)}, p = {p:g}; {label}"
        cases.append(Case(label, (dy, mask, p), batch=dy.shape[0]))
    return cases


def moe_cases(gen, shapes, transposed) -> list[Case]:
    """(label, lead, E, k, D) rows: top-k of E experts of width D; then ``transposed``."""
    return [moe_case(label, gen, *sizes, transposed=kind == "transposed")
            for (label, *sizes), kind in _in_order(shapes, transposed)]


# ---------------------------------------------------------------------------
# The visible checks: the same inputs on every run


def spread(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """A random permutation of spread-out values per row: no ties."""
    return torch.argsort(torch.rand(shape, generator=gen), dim=-1).to(F64) * 0.37 - 1.5


topk_backward = visible(EXERCISES["topk_backward"], lambda: topk_cases(
    seeded(606 + 1), spread, top=(("batch 1", (1,), 8, 3), ("batch 7", (7,), 10, 4), ("3-D", (2, 3), 9, 2)),
    transposed=("batch 7", (7,), 10, 3),
    repeated=(("batch 1", (1,), 6, 5), ("batch 7", (7,), 5, 8), ("3-D", (2, 3), 4, 6))),  # k > n: repeats certain
    "top-k at batch 1, 7, 3-D and transposed; repeated indices")
embedding_backward = visible(EXERCISES["embedding_backward"], lambda: embedding_cases(
    seeded(606 + 2), (4, 5), distinct=(("batch 1", (1, 5), 11), ("batch 7", (7, 3), 23)),
    transposed=("batch 7", (7, 2), 17),
    repeated=(("batch 1", (1, 6), 11), ("batch 7", (7, 4), 6), ("1-D ids", (9,), 5), ("3-D ids", (2, 3, 4), 7))),
    "distinct ids at batch 1 and 7, transposed; repeated ids; 1-D and 3-D ids")
relu_backward = visible(EXERCISES["relu_backward"], lambda: relu_cases(
    seeded(606 + 3), (("batch 1", (1, 6)), ("batch 7", (7, 5)), ("3-D", (2, 3, 4))), transposed=("batch 7", (7, 6)),
    margin=0.1, in_place=(("batch 7", (7, 5)),)), "batch 1, 7, 3-D and transposed; handed x, and handed y")
maxpool1d_backward = visible(EXERCISES["maxpool1d_backward"], lambda: maxpool_cases(
    seeded(606 + 4), spread, apart=(("batch 1", (1,), 9, 3, 3),
                                    ("batch 1", (1,), 11, 2, 3),  # stride > kernel_size: gaps, at batch 1
                                    ("batch 7", (7,), 10, 2, 2)),
    transposed=("batch 7", (7,), 9, 3, 3),
    overlapping=(("batch 1", (1,), 8, 3, 1), ("batch 7", (7,), 12, 4, 2), ("3-D", (2, 3), 9, 3, 2))),
    "side-by-side windows, windows with gaps, overlapping windows; batch 1, 7, 3-D and transposed")
dropout_backward = visible(EXERCISES["dropout_backward"], lambda: dropout_cases(
    seeded(606 + 5), (("batch 1", (1, 16), 0.25), ("batch 7", (7, 6), 0.6), ("3-D", (2, 3, 5), 0.5)),
    transposed=("batch 7", (7, 8), 0.3)), "p = 0.25, 0.6, 0.5, 0.3; batch 1, 7, 3-D and transposed")
moe_gate_backward = visible(EXERCISES["moe_gate_backward"], lambda: moe_cases(seeded(606 + 6), (
    ("batch 1", (1,), 6, 2, 4),
    ("batch 7", (7,), 5, 3, 3),
    ("batch 7", (7,), 4, 1, 2),  # k = 1: one expert per token, as in a Switch Transformer
    ("3-D (batch, tokens)", (2, 3), 8, 2, 5),
), transposed=("batch 7", (7,), 6, 2, 3)), "top-1, 2 and 3 of 4 to 8 experts; batch 1, 7, 3-D and transposed")
scatter_add_kernel = visible(SCATTER_ADD, lambda: kernel_cases(seeded(606 + 7), (
    (1, 4, 5, 8, F64, [3]),  # batch 1: one row, the last slot, a masked tail
    (7, 9, 13, 8, F64, "distinct"),  # distinct rows, two column blocks per row
    (7, 4, 13, 8, F64, [3, 0, 3, 1, 3, 0, 3]),  # repeats: row 3 (the last) four times
    (12, 5, 6, 4, F32, "repeated"),  # float32
)), "one row, distinct and repeated rows, float64 and float32; races read from the accesses")

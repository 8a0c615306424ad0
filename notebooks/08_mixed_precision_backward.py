# %% [markdown]
# # 08 · Backward passes in bf16 and fp16
#
# Notebooks 03 and 04 kept their Triton kernels' arithmetic in float32 whatever they loaded, because their float16
# checks asked for it. Training computes in half precision: the activations a forward saves, and the gradients that
# flow back through them, are bfloat16 or float16: half the bytes of float32, and twice the tensor-core throughput of
# TF32. A backward written for float32 runs unchanged on half-precision tensors and returns an answer that looks
# fine. It is often wrong, and nothing raises. This notebook measures how wrong, which operations must leave half
# precision to fix it, and what a test should accept. The numeric bugs kernel writers ship are few, and they come
# back in every op:
#
# - **A row statistic accumulated in the input's dtype.** LayerNorm's mean and rstd, the softmax hub
#   $s = \langle y, \bar y \rangle$, attention's $D = \operatorname{rowsum}(\bar O \odot O)$, the
#   log-sum-exp, the partial sums of $\bar\gamma$ over the batch: each is a sum of hundreds to tens of
#   thousands of terms. In bfloat16 a sum of similar terms stops growing after a few hundred of them (§2), and the
#   backward then subtracts it from every element of the row, where its error lands on each one (§3).
# - **fp16 gradients that flush to zero.** float16 has nothing between 0 and $6 \times 10^{-8}$, and in
#   some networks a large share of the gradients is smaller than that (the paper that introduced loss scaling
#   measured it for an SSD detector; its ImageNet CNNs trained without scaling). Without loss scaling they
#   become 0 (§5).
# - **An fp32 `tl.dot` that is not fp32.** On an NVIDIA GPU since Ampere, Triton's `tl.dot` of two float32
#   blocks runs on tensor cores as TF32 by default (`input_precision="tf32"`), which keeps 11 significant
#   bits of each input, not 24. This one is only tabulated here (§1): Triton's interpreter on your CPU multiplies
#   in full float32, so no cell of this notebook can show it — a test that passes here at float32's tolerance
#   can fail on the GPU.
# - **Tolerances copied from float32 tests.** `torch.testing.assert_close` holds every element to a relative
#   error fixed by the dtype alone, whatever the length of the sum behind it: it fails correct code on long
#   rows and passes half-precision bugs on short ones (§4).
#
# The cells below measure all but the third on the CPU against float64, then have you write the backward passes
# and the tools that avoid them:
#
# | part | you write | points |
# |---|---|---|
# | A | `softmax_backward_mixed(y, dy) -> dx` — `y`, `dy` in half precision, `dx` in their dtype, within Part C's error target | 2 |
# | B | `layernorm_backward_mixed(dy, x, gamma, mean, rstd) -> (dx, dgamma, dbeta)` — half-precision `x` and `dy`, float32 `gamma` and statistics; `dx` in `x`'s dtype and a $\bar\gamma$ summed over every row in `gamma`'s, within Part C's error target | 3 |
# | C | `grad_tolerance(dtype, n, condition=1.0) -> float` — the error a correct backward may have, by dtype, reduction length and how much its result cancels | 2 |
# | D | `DynamicLossScaler` — `scale`, `unscale_(grads) -> found_inf`, `update(found_inf) -> bool` | 2 |
# | E | `softmax_bwd_mixed_kernel` — `@triton.jit`, the capstone: half-precision rows longer than a block in, $\bar x$ stored in their dtype within Part C's error target | 2 |
#
# **Notation** (from notebook 00). $L$ is the scalar loss; $\bar t = \partial L / \partial t$ has the shape
# of $t$ and is `dt` in code. *Half precision* means bfloat16 or float16. A sum is *accumulated in* the
# dtype of its running total, whatever the dtype of its terms. $u$ is a dtype's unit roundoff (§1). An
# error is measured against a float64 reference computed from the same, already rounded, inputs, and
# norm-wise: $\lVert \text{got} - \text{ref} \rVert / \lVert \text{ref} \rVert$. `F64`, `F32`, `BF16` and
# `F16` name the four torch dtypes.
#
# Each test cell prints `✓ ...` when your function is right; when it is wrong, its first line names the
# kind of bug — `diagnosis: half-accumulation — ...` for a statistic summed in half precision — and the
# next lines say where, for instance the row length that exposes it. Hints under each exercise are
# collapsed: open the first only when you are stuck. They ask questions and work small cases; none holds the
# answer. The answer is in the recap after each test cell, collapsed too: open it once your check passes.
# %%
import course

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

F64, F32 = torch.float64, torch.float32  # every reference in this notebook is float64
BF16, F16 = torch.bfloat16, torch.float16


def randn(gen, *shape, dtype=F64):
    """Standard-normal values of the given shape, drawn from the generator `gen`."""
    return torch.randn(shape, generator=gen, dtype=dtype)


def rel_error(got, ref):
    """‖got − ref‖ / ‖ref‖ in float64: the norm-wise relative error every check of this notebook measures."""
    got, ref = got.to(F64), ref.to(F64)
    return ((got - ref).norm() / ref.norm()).item()

# %% [markdown]
# ## 1 · Unit roundoff: what each dtype keeps
#
# A binary floating-point number is $\pm\, m \cdot 2^e$: a significand $1 \le m < 2$ of $p$ bits — the
# leading 1 is implicit, so $p - 1$ of them are stored — and an exponent $e$ from a fixed range. Rounding
# a real number inside that range to the nearest such number makes a relative error of at most
#
# $$u = 2^{-p} = \tfrac{1}{2}\,\varepsilon, \qquad \operatorname{fl}(x) = x\,(1 + \delta), \quad |\delta| \le u,$$
#
# the **unit roundoff**, where $\varepsilon = 2^{1-p}$ (`torch.finfo(dtype).eps`) is the gap between 1 and
# the next number up. Every operation whose result is rounded makes one such $\delta$. The exponent bits
# decide the range; the significand bits decide $u$; the 16- and 19-bit formats split their bits very
# differently.
#
# Measure $u$ instead of trusting the table: round $1 + 2^{-k}$ through each dtype and find the first $k$
# that comes back as exactly 1 (at $k = p$ the number sits halfway between 1 and the next, and the tie
# goes to 1, the even one). TF32 has no torch dtype: it is a float32 whose 23 stored significand bits are
# cut to 10, so the cell below rounds the low 13 bits of a float32 away with integer operations on its bits.
# %% check-output
TF32_DROPPED = 13  # float32 stores 23 significand bits, TF32 keeps the top 10


def round_to_tf32(x):
    """Float32 tensor x rounded to the nearest TF32 number (ties to even), returned as float32; finite x only.

    Conversions to TF32 differ: some round to nearest, some just drop the 13 bits. Rounding is the kinder one.
    """
    bits = x.view(torch.int32)
    kept_is_odd = (bits >> TF32_DROPPED) & 1
    just_under_half = (1 << (TF32_DROPPED - 1)) - 1  # of the dropped part: adding it rounds to nearest
    # A carry out of the significand moves into the exponent, which is the right rounding for 1.11…1 × 2^e.
    return ((bits + just_under_half + kept_is_odd) & -(1 << TF32_DROPPED)).view(torch.float32)


# name: (round a float64 tensor into the format, then back to float64; the float32 limits for TF32's range)
FORMATS = {
    "float64": lambda x: x,
    "float32": lambda x: x.to(F32).to(F64),
    "tf32": lambda x: round_to_tf32(x.to(F32)).to(F64),
    "bfloat16": lambda x: x.to(BF16).to(F64),
    "float16": lambda x: x.to(F16).to(F64),
}
LIMITS_OF = {"float64": F64, "float32": F32, "tf32": F32, "bfloat16": BF16, "float16": F16}


def first_k_lost(fl):
    """The smallest k for which 1 + 2^-k rounds to exactly 1 in the format `fl`: its significand bits p."""
    return next(k for k in range(1, 80) if fl(torch.tensor(1 + 2.0**-k, dtype=F64)).item() == 1.0)


UNIT_ROUNDOFF = {}  # name → u, measured
largest_tf32 = (torch.tensor(torch.finfo(F32).max).view(torch.int32) & -(1 << TF32_DROPPED)).view(F32).item()
print(f"{'format':9} {'bits':>4} {'exponent':>8} {'p':>3} {'u = 2^-p':>10} {'eps/2':>10} {'largest':>10} {'smallest normal':>16}")
for name, fl in FORMATS.items():
    p = first_k_lost(fl)
    UNIT_ROUNDOFF[name] = 2.0**-p
    info = torch.finfo(LIMITS_OF[name])
    total_bits = 1 + 8 + (p - 1) if name == "tf32" else info.bits  # sign + exponent + stored significand
    half_eps = f"{info.eps / 2:10.2e}" if name != "tf32" else f"{'—':>10}"
    largest = largest_tf32 if name == "tf32" else info.max
    print(f"{name:9} {total_bits:4} {total_bits - p:8} {p:3} {2.0**-p:10.2e} {half_eps} {largest:10.3g} {info.smallest_normal:16.3g}")

# %% [markdown]
# Read the table by column. **bfloat16** is float32 with its significand cut from 24 bits to 8: the same
# range (up to $3.4 \times 10^{38}$, normal down to $1.2 \times 10^{-38}$), and a unit roundoff
# $2^{16} = 65{,}536$ times larger — about 2.4 significant decimal digits. **float16** spends three more bits
# on the significand ($u$ eight times smaller than bfloat16's) and three fewer on the exponent: it overflows
# above 65,504 and stops being normal below $6.1 \times 10^{-5}$. **TF32** is float32's range with
# float16's significand; it is not a storage format but what a tensor core keeps of each float32 input of a
# matmul, whose products it then adds in float32.
#
# The same facts as a picture. Left: the numbers each format can hold just above 1. Right: the gap from a
# number to the next, relative to the number, across 15 decades — the sawtooth between $u$ and $2u$ is the
# significand, the ends of each curve are the exponent.
# %%
def relative_gap(name, x):
    """(x rounded into the format, the gap to the next number of the format divided by it), float64."""
    x_fl = FORMATS[name](x)
    if name == "tf32":  # the next TF32 number: one more in the lowest kept bit
        up = (round_to_tf32(x.to(F32)).view(torch.int32) + (1 << TF32_DROPPED)).view(F32).to(F64)
    else:
        dtype = LIMITS_OF[name]
        x_d = x.to(dtype)
        up = torch.nextafter(x_d, torch.full_like(x_d, math.inf)).to(F64)
    return x_fl, (up - x_fl) / x_fl


SHOWN = ["float32", "tf32", "float16", "bfloat16"]
COLOR = {"float32": "C0", "tf32": "C2", "float16": "C1", "bfloat16": "C3"}
fig, (line, gaps) = plt.subplots(1, 2, figsize=(11.5, 3.9), gridspec_kw={"width_ratios": [1, 1.35]})

grid = torch.arange(0, 2**12 + 1, dtype=F64) / 2**16 + 1  # [1, 1 + 2^-4] in steps of 2^-16
for row, name in enumerate(SHOWN):
    values = torch.unique(FORMATS[name](grid))  # every number of the format in the interval (spacing ≥ 2^-16)
    if name == "float32":  # 2^-23 apart: too dense for the grid, count them from the bits instead
        ends = torch.tensor([1.0, 1 + 2.0**-4]).view(torch.int32)
        line.plot([1, 1 + 2.0**-4], [row, row], color=COLOR[name], linewidth=6, solid_capstyle="butt")
        line.annotate(f"{(ends[1] - ends[0]).item() + 1:,} numbers", (1.03125, row + 0.3), ha="center", fontsize=8)
    else:
        line.plot(values, [row] * len(values), "|", color=COLOR[name], markersize=14)
        line.annotate(f"{len(values)} numbers", (1.03125, row + 0.3), ha="center", fontsize=8)
line.set_yticks(range(len(SHOWN)), SHOWN)
line.set_ylim(-0.6, len(SHOWN) - 0.2)
line.set_xticks([1, 1.015625, 1.03125, 1.046875, 1.0625], ["1", "", "1 + 2⁻⁵", "", "1 + 2⁻⁴"])
line.set_title("the numbers between 1 and 1 + 1/16", fontsize=10)

x = torch.logspace(-9, 6, 3000, dtype=F64)
for name in SHOWN:
    x_fl, rel = relative_gap(name, x)
    ok = torch.isfinite(rel) & (x_fl > 0)  # drop what overflowed or rounded to 0
    gaps.loglog(x[ok], rel[ok], color=COLOR[name], linewidth=1.2, linestyle="--" if name == "tf32" else "-",
                label=f"{name}, u = {UNIT_ROUNDOFF[name]:.1e}")
f16 = torch.finfo(F16)
gaps.axvline(f16.smallest_normal, color="C1", linestyle=":", linewidth=1)
gaps.axvline(f16.max, color="C1", linestyle=":", linewidth=1)
gaps.annotate("float16 subnormal\n(fewer bits) below", (f16.smallest_normal, 1e-5), xytext=(-4, 0),
              textcoords="offset points", ha="right", va="center", fontsize=8, color="C1")
gaps.annotate("float16\noverflows", (f16.max, 1e-5), xytext=(-4, 0), textcoords="offset points", ha="right",
              va="center", fontsize=8, color="C1")
gaps.set(xlabel="x", ylabel="gap to the next number / x", title="relative spacing: the sawtooth between u and 2u")
gaps.title.set_fontsize(10)
gaps.grid(True, which="major", alpha=0.3)
gaps.legend(fontsize=8, loc="center", bbox_to_anchor=(0.55, 0.3))
fig.tight_layout()
plt.show()

# %% [markdown]
# float16 and TF32 lie on the same sawtooth wherever float16 is normal (both have $p = 11$): below
# $6.1 \times 10^{-5}$ float16's gaps stop shrinking with the number — its subnormals are evenly spaced
# $2^{-24}$ apart — so the relative gap climbs to 1 and the curve ends where everything rounds to 0. The
# bfloat16 ticks on the left are eight times as sparse as float16's: between 1 and 2 bfloat16 has 128
# numbers. Keep the last column of the table in mind for §5, and $u$ for everything in between.
# %% [markdown]
# ## 2 · The error of a sum of N terms
#
# A loop that adds $N$ numbers one after the other rounds each partial sum:
# $\hat S_k = (\hat S_{k-1} + x_k)(1 + \delta_k)$ with $|\delta_k| \le u$. The first rounding error is
# carried through every later addition, and the classical bound for the whole sum is
#
# $$|\hat S_N - S_N| \;\lesssim\; (N - 1)\, u \sum_i |x_i| :$$
#
# for positive terms, a relative error up to about $N u$. Adding as a tree instead — pairs, then pairs of
# pairs — puts each term through only $\log_2 N$ additions: about $\log_2(N)\, u$. Both are worst cases,
# with every $\delta_k$ at $+u$. Real rounding errors have signs that behave like coin flips, so they add
# like a random walk: a sequential sum is typically off by about $\sqrt{N}\, u$, and Higham and Mary (2019,
# *A new approach to probabilistic rounding error analysis*) made that a bound that holds with high probability.
#
# Which of these describes a real loop? Measure it. Each row below holds $N = 2^{16}$ random terms in
# $[0, 1)$, rounded once into the dtype being tested, so the terms are exact and only the adding is
# measured against the float64 sum of the same numbers. One sequential pass gives every $N$ at once: its
# partial sum after $N$ terms is the sum of the first $N$. Four ways to add:
#
# - **bfloat16, sequential**: the running sum rounded to bfloat16 after every addition (a loop over the
#   columns, all rows at once);
# - **float16, sequential**: `np.cumsum` of a float16 array, which rounds each partial sum to float16;
# - **float32, sequential**: `np.cumsum` of a float32 array;
# - **float32, pairwise**: `np.sum`, which adds in blocks of 128 and halves recursively above that.
# %%
NS = [2**k for k in range(4, 17)]  # N = 16 … 65,536 terms
ROWS = 32  # independent rows; the plot shows their mean relative error
rng = np.random.default_rng(8)
terms = rng.random((ROWS, NS[-1]))  # (rows, N) in [0, 1)


def mean_relative_error(sums, exact):
    """Mean over the rows of |sums / exact − 1|; both (rows,)."""
    return float(np.mean(np.abs(np.asarray(sums, dtype=np.float64) / exact - 1)))


errors = {}  # name → mean relative error at each N of NS

# bfloat16: torch adds two bf16 tensors and rounds the result to bf16, one rounding per step, as a loop would.
terms_bf16 = torch.from_numpy(terms).to(BF16)  # (rows, N)
exact = np.cumsum(terms_bf16.double().numpy(), axis=1)  # (rows, N) float64 prefix sums: the reference
running = torch.zeros(ROWS, dtype=BF16)  # (rows,) the accumulator
partial = {}
for k, column in enumerate(terms_bf16.T.contiguous().unbind(0), start=1):  # column k of every row
    running = running + column
    if k in NS:
        partial[k] = running.double().numpy()
errors["bfloat16, sequential"] = [mean_relative_error(partial[n], exact[:, n - 1]) for n in NS]
bf16_final = partial[NS[-1]]  # where each row's bf16 running sum ended up

for name, dtype in (("float16, sequential", np.float16), ("float32, sequential", np.float32)):
    x = terms.astype(dtype)  # (rows, N), the terms rounded once
    running_sums = np.cumsum(x, axis=1)  # (rows, N), each partial sum rounded to the dtype
    exact = np.cumsum(x.astype(np.float64), axis=1)
    errors[name] = [mean_relative_error(running_sums[:, n - 1], exact[:, n - 1]) for n in NS]
x32 = terms.astype(np.float32)
exact = np.cumsum(x32.astype(np.float64), axis=1)
errors["float32, pairwise (np.sum)"] = [mean_relative_error(np.sum(x32[:, :n], axis=1), exact[:, n - 1]) for n in NS]

fig, ax = plt.subplots(figsize=(7.6, 4.8))
STYLE = {"bfloat16, sequential": "C3", "float16, sequential": "C1", "float32, sequential": "C0",
         "float32, pairwise (np.sum)": "C9"}
for name, errs in errors.items():
    ax.loglog(NS, errs, marker="o", markersize=3.5, color=STYLE[name], label=name)
u32 = UNIT_ROUNDOFF["float32"]
n = np.array(NS, dtype=np.float64)
for label, ref in (("N·u", n * u32), ("√N·u", np.sqrt(n) * u32), ("log₂N·u", np.log2(n) * u32)):
    ax.loglog(n, ref, linestyle="--", color="grey", linewidth=1)
    ax.annotate(f"{label} (float32)", (n[-1], ref[-1]), xytext=(4, 0), textcoords="offset points",
                fontsize=8, color="grey", va="center")
ax.annotate(f"stuck at {bf16_final.max():.0f}", (NS[6], errors["bfloat16, sequential"][6]),
            xytext=(6, -16), textcoords="offset points", fontsize=8, color="C3", ha="left", va="center")
ax.set_xticks(NS[::2], [f"$2^{{{int(math.log2(v))}}}$" for v in NS[::2]])
ax.minorticks_off()
ax.set_xlim(NS[0] / 1.3, NS[-1] * 6)
ax.set(xlabel="terms N", ylabel="relative error of the sum (mean of 32 rows)",
       title="a sum of N random terms in [0, 1), against float64 (measured)")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# Three things to read off:
#
# - **float32, sequential** climbs with the slope of $\sqrt{N}\, u$ — a random walk — a few times below that
#   line and orders of magnitude below the worst case $N u$; still, at $N = 2^{16}$ it is some 40 times
#   float32's $u$. **Pairwise** stays under one $u$ at every length.
# - **bfloat16, sequential** starts on the same slope with its own $u$, 65,536 times larger — already
#   above $10^{-2}$ at a few hundred terms — and then, past $N = 512$, jumps to an error of order 1 and stays
#   there: the sum stopped growing. **float16** does the same, eight times later.
# - A half-precision accumulator is not a slightly less accurate float32: past a length fixed by its $u$,
#   it stops being a sum at all.
#
# Why the sum stops: an addition whose term is at most half a gap of the running sum changes nothing.
# %% check-output
for name, dtype, at in (("bfloat16", BF16, 256.0), ("float16", F16, 2048.0), ("float32", F32, 2.0**24)):
    total = torch.tensor(at, dtype=dtype)  # a running sum
    gap = (torch.nextafter(total, torch.tensor(math.inf, dtype=dtype)) - total).item()
    print(f"{name:9} gap above {at:>10,.0f} is {gap:g}: "
          f"{at:,.0f} + 1 = {(total + 1).item():,.0f}, {at:,.0f} + 0.99 = {(total + 0.99).item():,.0f}")

# %% [markdown]
# Once a bfloat16 running sum of terms below 1 reaches 256, the next gap is 2, half of it is 1, and every
# term rounds away: every one of the 32 rows above ended at exactly 256, where the true sums are near 32,768. (With
# terms of both signs, like the products $y_i \bar y_i$ in the hub, the partial sums do not grow as
# steadily, but each rounding error is still relative to a partial sum, and the result can be far smaller
# than the partial sums were.)
#
# PyTorch's own CPU `sum` and `cumsum` of a bfloat16 tensor accumulate in float32 and round once at the
# end, which is why a PyTorch reference never shows this. A hand-written kernel does exactly what it says: in
# Triton, `tl.sum` adds in the dtype of the block it is given (notebook 03), and a
# kernel that walks a long row in blocks and writes `acc += tl.sum(x, axis=0)` adds the block sums **sequentially
# in `acc`'s dtype** — with `acc` in float16, the sequential line of the plot, one step per block. (On this CPU the
# interpreter computes one block's `tl.sum` with `np.sum`, which adds a float16 array in float32 and rounds once: a
# half-precision bug inside one block is invisible here and shows only in the walk between blocks, so a test of a
# kernel needs rows longer than one block.)
# %% [markdown]
# ## 3 · Save in half, keep the statistics in float32
#
# A forward pass saves what its backward needs. Activations are the bulk of training memory, so they are
# saved in half precision. The statistics are not: LayerNorm saves its mean and rstd in float32, FlashAttention
# its log-sum-exp. The reason is in two numbers — what the statistics cost, and what the backward does with
# them. First the cost, for one LayerNorm of a batch of 8 sequences of 4096 tokens, hidden size 4096:
# %% check-output
BATCH, TOKENS, HIDDEN = 8, 4096, 4096  # sequences, tokens per sequence, features per token
x_bytes = 2 * BATCH * TOKENS * HIDDEN  # the saved input x in bfloat16: 2 bytes an element
stats_bytes = 2 * 4 * BATCH * TOKENS  # mean and rstd, one of each per row (token), in float32
print(f"x in bfloat16:        {x_bytes / 2**20:9,.1f} MiB")
print(f"mean, rstd in float32: {stats_bytes / 2**20:8,.2f} MiB = {stats_bytes / x_bytes:.2%} of it "
      f"(in bfloat16 they would save {stats_bytes / 2 / 2**20:.2f} MiB)")

# %% [markdown]
# A statistic is one number per row, so its dtype costs nothing next to the row. Its precision does. Every
# backward of this course subtracts a row statistic from every element of the row: LayerNorm's $\hat x$ is
# $(x - \mu)\cdot\mathrm{rstd}$, and the softmax backward is
#
# $$\bar x = y \odot (\bar y - s), \qquad s = \langle y, \bar y \rangle .$$
#
# An error $\delta s$ in $s$ lands, unchanged, on every element of $\bar y - s$. How large is it? $\delta s$
# is relative to $s$: at best $u \cdot |s|$, if $s$ is rounded once to its dtype. The answer $\bar y - s$ is
# as large as the *spread* of $\bar y$ around $s$. Write $\bar y = c\,\mathbf 1 + \sigma z$: a common part
# $c$, the same for every element of the row, and a spread $\sigma$. The softmax output sums to 1, so
# $s = c + \sigma \langle y, z \rangle$ and $\bar y - s = \sigma\,(z - \langle y, z \rangle)$: the common part
# cancels exactly (adding a constant to $\bar y$ changes nothing in $\bar x$: notebook 02's Jacobian is
# symmetric and its rows sum to zero), while the error left behind is about $u \cdot |c|$. Relative to the
# answer: about $u\,|c| / \sigma$.
#
# Common parts are not exotic. In attention, $\bar y$ is $\bar P = \bar O V^\top$, and when the value vectors
# share a mean $\bar v$ (they usually do), every entry of a row of $\bar P$ carries the same $\bar O_i \cdot \bar v$.
# LayerNorm sees the same thing in its input: a row whose mean is large next to its spread.
#
# Below, the hub of 64 softmax rows of 1024 is computed exactly, in float64; then only $s$ is rounded to
# bfloat16, float16 or float32, and $\bar y - s$ is compared, in float64 arithmetic, with its exact value, as
# the common part $c$ grows against a spread $\sigma = 1$. $\bar y$ itself is kept exact, so that the plot
# shows what the rounding of $s$ does and nothing else.
# %%
gen = torch.Generator().manual_seed(10)
R, N_ROW = 64, 1024  # rows, and the length of each
y = torch.softmax(randn(gen, R, N_ROW), dim=-1)  # (R, N) softmax rows
z = randn(gen, R, N_ROW)  # (R, N) the spread of ȳ, σ = 1
jitter = 2 ** torch.rand(R, 1, generator=gen, dtype=F64)  # (R, 1) in [1, 2): each row's c sits elsewhere between two gaps
commons = np.logspace(-2, 4, 25)  # c / σ
S_DTYPES = {"bfloat16": BF16, "float16": F16, "float32": F32}
relative_errors = {name: [] for name in S_DTYPES}  # the mean over the rows, at each c
for c in commons:
    dy = c * jitter + z  # (R, N) ȳ = c·1 + σz, c within a factor 2 of the nominal one
    s = (y * dy).sum(dim=-1, keepdim=True)  # (R, 1) the hub, exact to float64
    exact_diff = dy - s  # (R, N) ȳ − s in float64
    for name, dtype in S_DTYPES.items():
        diff = dy - s.to(dtype).double()  # the same subtraction, with s rounded once into `dtype`
        errs = (diff - exact_diff).norm(dim=-1) / exact_diff.norm(dim=-1)  # (R,)
        relative_errors[name].append(errs.mean().item())

fig, ax = plt.subplots(figsize=(7.2, 4.4))
for (name, errs), color in zip(relative_errors.items(), ("C3", "C1", "C0")):
    ax.loglog(commons, errs, marker="o", markersize=3, color=color, label=f"s rounded to {name}")
    ax.loglog(commons, UNIT_ROUNDOFF[name] * commons, color=color, linestyle=":", linewidth=1)
ax.plot([], [], color="grey", linestyle=":", linewidth=1, label="u · c / σ, for each")
ax.axhline(UNIT_ROUNDOFF["bfloat16"], color="grey", linestyle="--", linewidth=1)
ax.annotate("u(bfloat16): the rounding of x̄ when it is stored", (commons[-1], UNIT_ROUNDOFF["bfloat16"]),
            xytext=(0, -3), textcoords="offset points", fontsize=8, color="grey", ha="right", va="top")
ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
ax.annotate("error as large as the answer", (commons[0], 1.0), xytext=(0, 4), textcoords="offset points", fontsize=8)
ax.set_ylim(top=3)
ax.set(xlabel="common part of ȳ, c / σ", ylabel="relative error of ȳ − s (mean of 64 rows)",
       title=f"softmax rows of {N_ROW}: s exact, then rounded once (measured)")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# Each line rises with slope 1, along the dotted $u\, c / \sigma$ of its dtype. With $s$ in bfloat16, the
# error passes bfloat16's own rounding of the output once the common part is a few times the spread, and
# reaches 100% — a gradient of pure noise — when the common part is a few hundred times the spread. With $s$
# in float32 it stays below the output's rounding across the whole plot. And this is the best a bfloat16 $s$ can do:
# computed exactly, then rounded once. A hub *accumulated* in bfloat16 adds §2's error on top. (A bfloat16
# $\bar y$ has the same problem at the far right: from $c \approx 128\,\sigma$ on, its own gap is as wide as the
# spread it should carry. Below that, it holds the spread, and only a half-precision $s$ destroys it.)
#
# The same holds for every statistic of this course: LayerNorm's mean and rstd, and its two row means in the
# backward; attention's $D$ and log-sum-exp; and $\bar\gamma$, $\bar\beta$, sums over all $B \cdot T$ rows —
# tens of thousands of terms, far past where §2's bfloat16 line stopped. A statistic rounded to half precision
# is a bug wherever it is later subtracted. Which of the *other* operations of a backward must leave half
# precision — and which may stay — is what Parts A and B measure.
# %% [markdown]
# ## Part A — softmax_backward_mixed (2 points)
#
# Notebook 02 derived the softmax backward from $y$ alone: a row's gradient needs one number per row, the hub
# $s = \langle y, \bar y \rangle$, then one elementwise line. Here it is, every operation in the dtype it is handed:
# %%
# From notebook 02, Part B: the softmax backward, derived there. Both lines run in the dtype of y and dy.
def softmax_backward_02(y, dy):
    s = (y * dy).sum(dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩
    return y * (dy - s)  # (..., N)


# %% [markdown]
# Notebook 03's kernel widened both loaded rows to float32 and did everything there, which costs nothing in
# registers. At the torch level each widened copy is a whole tensor in memory, and notebook 03 left open which of
# these operations actually need float32. PyTorch's CPU `sum` of a bfloat16 tensor already accumulates in float32
# (§2), so the hub's *sum* in `softmax_backward_02` is not where it goes wrong. Is a float32 sum all it takes — or
# must the elementwise $\bar y - s$, which cancels when $\bar y$ has a large common part (§3), run in float32 too,
# and what about the product with $y$? Answer it by measuring against the error target below, then write the
# version that meets it:
#
# - `y`, `dy`: $(\ldots, N)$, in bfloat16 or float16 — or float32/float64, where the function must be exact
#   (the check runs it in float64 first, against notebook 02's cases);
# - return `dx`: $(\ldots, N)$, **in `y`'s dtype**;
# - the error target: against a float64 reference from the same rounded values, `dx` within twice the error
#   that a float32-accumulated backward makes on those values (the grader's hidden check holds it to the rule
#   Part C makes you derive);
# - no autograd, no torch backward kernel, and nothing $N \times N$.
#
# The check runs it on rows whose $\bar y$ has a large common part (ȳ = 32 + noise). Before you write it: run
# `softmax_backward_02` on such a bfloat16 row and compare it with a float64 reference — how far from the target is
# it, and which of its intermediates, widened alone, closes the gap?
# %% solution id=softmax_backward_mixed
def softmax_backward_mixed(y, dy):
    """x̄ for y = softmax(x) over the last axis, from y and ȳ in half precision (or float32/float64).

    y, dy: (..., N). Returns dx (..., N) in y's dtype, within the error target of the text.
    """
    ### BEGIN SOLUTION
    acc = torch.promote_types(y.dtype, F32)  # float32, or float64 when the inputs are float64
    y_acc, dy_acc = y.to(acc), dy.to(acc)  # upcast once: every product and sum below runs in acc
    s = (y_acc * dy_acc).sum(dim=-1, keepdim=True)  # (..., 1) the hub, summed in acc
    return (y_acc * (dy_acc - s)).to(y.dtype)  # ȳ − s in acc (it cancels), rounded once, at the very end
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which quantities are statistics</summary>
#
# Follow `softmax_backward_02` line by line with bfloat16 `y` and `dy`, and write down the dtype of each
# intermediate: PyTorch keeps the dtype of its inputs, so the product of two bfloat16 tensors is bfloat16, and so is
# their sum, however it was accumulated inside. Which intermediate is one number standing for the whole row? Which
# subtraction cancels when $\bar y$ has a large common part (§3)?
#
# </details>
#
# <details><summary>Hint 2 — where each one must live, and what comes back</summary>
#
# §3 computed the hub exactly and rounded it once to bfloat16: what did that do to $\bar y - s$? So in which dtype
# may $s$ reach the subtraction? If $s$ is a float32 tensor and $\bar y$ a bfloat16 one, what dtype does PyTorch
# give their difference — and what dtype would it give if $s$ were first converted back to $\bar y$'s? Then count
# the roundings between the inputs and the `dx` you return: which one is unavoidable, and does an extra one in
# the product with $y$ still fit the target? For float64 inputs "float32" would throw digits away:
# `torch.promote_types` gives the wider of two dtypes.
#
# </details>
#
# <details><summary>Hint 3 — one row by hand</summary>
#
# Take $N = 2$, $y = (0.25, 0.75)$ and $\bar y = (32.5, 32)$, all exact in bfloat16 (its gap between 32 and 64 is
# $0.25$). Compute the hub exactly; then round it to bfloat16 (a tie goes to the even neighbour). Compute
# $\bar y - s$ and $\bar x$ both ways. How far is each entry of $\bar x$ from the exact one with the bfloat16 hub?
#
# </details>
# %% test id=test_softmax_backward_mixed points=2
"""softmax_backward_mixed: exact in float64 on notebook 02's cases (batch 1, 7,
3-D, a transposed view, no N×N tensor), then bfloat16 and float16 rows of 16
to 4096 with dy = 32 + N(0, 1), against float64 within twice the error of a
float32-accumulated backward on the same values; dx in y's dtype; no
autograd."""
course.selfcheck.softmax_backward_mixed(softmax_backward_mixed)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_backward_mixed(softmax_backward_mixed)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;s_{32} = \textstyle\sum_i \operatorname{f32}(y_i)\, \operatorname{f32}(\bar y_i), \qquad \bar x = \operatorname{round}_{\text{dtype}}\big(\operatorname{f32}(y) \odot (\operatorname{f32}(\bar y) - s_{32})\big)\;}$$
#
# In code, `y_acc` and `dy_acc` are `y` and `dy` converted with `.to(acc)`, `acc` the wider of float32 and `y.dtype`;
# notebook 02's two lines run on those, and `(y_acc * (dy_acc - s)).to(y.dtype)` is the last operation. The inputs were already rounded,
# and nothing can bring those bits back; what the backward controls is that it adds no rounding of its own before the
# last one. Then the only error left is the output's rounding, half an ulp per entry — the smallest error any
# bfloat16 result can have. (In Hint 3's row: $s = 32.125$ in float32, $\bar y - s = (0.375, -0.125)$ and
# $\bar x = (0.09375, -0.09375)$; with $s$ held in bfloat16, 32, and the second entry of $\bar x$ is 0.)
#
# Which operations need float32, then? The cell below measures each choice on long bfloat16 rows against the
# check's target. Notebook 02's lines as they are miss it by an order of magnitude — and so does a hub summed in
# float32 and handed back in bfloat16: the float32 *sum* was never the problem (torch already does it), the
# *rounded hub meeting the subtraction* is. Keeping $s$ in float32 through $\bar y - s$ meets the target; rounding
# $\bar y - s$ to bfloat16 before the product with $y$ adds a second rounding of the output's size, which still
# fits. So the float32 the target needs is the hub and its subtraction; the product is a choice, and one rounding
# at the very end is the cleanest.
#
# </details>
#
# Here is each choice on a long row with $\bar y$ far from zero:
# %%
gen = torch.Generator().manual_seed(8)
rows, N = 8, 4096
y = torch.softmax(2 * randn(gen, rows, N), dim=-1).to(BF16)
dy = (32 + randn(gen, rows, N)).to(BF16)  # a large common part, as a loss that sums the row gives
y64, dy64 = y.to(F64), dy.to(F64)
reference = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))  # float64 from the same rounded values
y32, dy32 = y.to(F32), dy.to(F32)
s32 = (y32 * dy32).sum(-1, keepdim=True)  # the hub summed in float32, kept in float32
float32_backward = y32 * (dy32 - s32)  # every operation in float32, not yet rounded
target = 2 * max(rel_error(float32_backward.to(BF16), reference), rel_error(reference.to(BF16), reference))
choices = {  # what stays in bfloat16, what goes to float32
    "notebook 02's lines on bfloat16": softmax_backward_02(y, dy),
    "hub summed in float32, back to bfloat16": y * (dy - s32.to(BF16)),
    "hub and ȳ − s in float32, product in bf16": y * (dy32 - s32).to(BF16),
    "all in float32, rounded once": float32_backward.to(BF16),
}
print(f"the check's target: {target:.1e}")
for name, dx in choices.items():
    err = rel_error(dx, reference)
    print(f"{name:43} {err:.1e}  {err / target:5.2f} of the target")
try:
    yours = softmax_backward_mixed(y, dy)
    print(f"{'yours (' + str(yours.dtype).removeprefix('torch.') + ')':43} {rel_error(yours, reference):.1e}  "
          f"{rel_error(yours, reference) / target:5.2f} of the target")
except NotImplementedError:
    print("Finish Part A first: the last line measures it.")

# %% [markdown]
# ## Part B — layernorm_backward_mixed (3 points)
#
# LayerNorm is where mixed precision most often goes wrong, because it has three reductions: the forward's mean
# and variance, the backward's two row means ($c_1$, $c_2$), and $\bar\gamma$, $\bar\beta$ — sums over **every row of
# the batch**, $B \cdot T$ of them, tens of thousands in a real step. The backward itself is notebook 04's; here it
# is, every operation in the dtype it is handed:
# %%
# From notebook 04: LayerNorm's backward, derived there. Every line runs in the dtype of its operands.
def layernorm_backward_04(dy, x, gamma, mean, rstd):
    N = x.shape[-1]  # features
    rstd = rstd.unsqueeze(-1)  # (..., 1)
    xhat = (x - mean.unsqueeze(-1)) * rstd  # (..., N)
    dxhat = gamma * dy  # (..., N) the gradient reaching x̂
    c1 = (xhat * dxhat).mean(dim=-1, keepdim=True)  # (..., 1) the two row statistics
    c2 = dxhat.mean(dim=-1, keepdim=True)
    dx = (dxhat - c2 - xhat * c1) * rstd
    dgamma = (dy * xhat).reshape(-1, N).sum(dim=0)  # (N,) sums over every row
    dbeta = dy.reshape(-1, N).sum(dim=0)
    return dx, dgamma, dbeta


# %% [markdown]
# Notebook 04's Triton LayerNorm already saves float32 statistics and keeps its $\bar\gamma$, $\bar\beta$ partial
# sums in float32 buffers (its check refused float16 buffers), and Part A just measured what a rounded row
# statistic does. What 04 did not settle is the tolerance: how close a float32 $\bar\gamma$ and $\bar\beta$ must be
# to the exact sums, and that is what is new here. They are not row reductions: each is a
# sum over **every row of the batch**, $n = B \cdot T$ terms, tens of thousands in a real step, not the $N$
# features of a row. Their terms $\bar y \odot \hat x$ have both signs ($\hat x$ has mean zero), so the sum cancels and
# its error is magnified by the condition factor of §4. And they are returned in float32 — $\gamma$ is a float32
# master weight — so no half-precision rounding of the output hides that error: the whole error budget is the sum's,
# Part C's rule at `float32`, with $n$ the number of rows. The interface:
#
# - `dy`, `x`: $(\ldots, N)$ bfloat16 or float16; `gamma`: $(N,)$ float32; `mean`, `rstd`: `x.shape[:-1]`, float32
#   (the forward's, computed with $\varepsilon = 10^{-5}$) — and all five float64 in the exact check;
# - return `(dx, dgamma, dbeta)`: `dx` in **`x`'s dtype**, `dgamma` and `dbeta` in **`gamma`'s dtype**;
# - the error target, each output against a float64 reference from the same rounded values: `dx` within twice the
#   error of a float32-accumulated backward, `dgamma` and `dbeta` (float32 outputs, whose error is their sums'
#   order) within 16 times it; the grader's hidden check holds all three to Part C's rule;
# - no autograd and no torch backward kernel.
#
# The check gives $x$ a mean of 4 and $\bar y$ a common part of 32 against spreads of 1, and sums $\bar\gamma$ over
# 512 rows. Where does $x - \mu$ lose digits if it is computed in bfloat16? How precise must $\bar\gamma$ be, given
# the dtype it is returned in and the number of rows it sums — and what would a single bfloat16 step on its way
# cost, measured against that? (After Part C, a cell measures your $\bar\gamma$ against your rule as the batch grows.)
# %% solution id=layernorm_backward_mixed
def layernorm_backward_mixed(dy, x, gamma, mean, rstd):
    """Gradients of y = LayerNorm(x) ⊙ γ + β (notebook 04) for half-precision x and ȳ.

    dy, x: (..., N); gamma: (N,); mean, rstd: x.shape[:-1], saved by the forward.
    Returns (dx in x's dtype, dgamma and dbeta in gamma's dtype), within the error target of the text.
    """
    ### BEGIN SOLUTION
    acc = torch.promote_types(x.dtype, F32)  # float32, or float64 for float64 inputs
    N = x.shape[-1]  # features
    rstd = rstd.to(acc).unsqueeze(-1)  # (..., 1)
    xhat = (x.to(acc) - mean.to(acc).unsqueeze(-1)) * rstd  # x − μ cancels: in acc, never in half
    dy_acc = dy.to(acc)
    dxhat = gamma.to(acc) * dy_acc  # (..., N) the gradient reaching x̂
    c1 = (xhat * dxhat).mean(dim=-1, keepdim=True)  # (..., 1) row statistics, summed in acc
    c2 = dxhat.mean(dim=-1, keepdim=True)
    dx = (dxhat - c2 - xhat * c1) * rstd  # the cancelling subtraction, in acc
    dgamma = (dy_acc * xhat).reshape(-1, N).sum(dim=0)  # (N,) a sum over every row, in acc
    dbeta = dy_acc.reshape(-1, N).sum(dim=0)
    return dx.to(x.dtype), dgamma.to(gamma.dtype), dbeta.to(gamma.dtype)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which quantities are statistics</summary>
#
# Go through `layernorm_backward_04` and mark every reduction in it (there are four: two row means and two sums over
# rows), then every subtraction of two nearly equal things (there are two). Each marked place is where half
# precision loses what the answer needs. Which of the four reductions is the longest in a real training step?
#
# </details>
#
# <details><summary>Hint 2 — the dtypes in and out</summary>
#
# PyTorch promotes a bfloat16 tensor combined with a float32 one to float32, but a bfloat16 times a bfloat16 stays
# bfloat16: which lines of `layernorm_backward_04` have only half-precision operands, and so run in half precision
# if you leave them alone? Rather than lean on promotion line by line, convert every input to one accumulation
# dtype first — the wider of float32 and the input's own (`torch.promote_types`). Three results, three dtypes: why
# must $\bar\gamma$ never pass through bfloat16 on its way back, even once at the end?
#
# </details>
#
# <details><summary>Hint 3 — one row by hand</summary>
#
# A row of a bfloat16 `x` holds 3.96875 and 4.03125 among others (bfloat16's gap near 4 is $2^{-5}$), and the
# forward's float32 mean of the whole row is $\mu = 4.0078125$. Compute $x - \mu$ for the two entries exactly, and
# then with $\mu$ first rounded to bfloat16. How large is the relative error of each difference — and what does it
# do to $\hat x$, $c_1$ and $\bar\gamma$ downstream?
#
# </details>
# %% test id=test_layernorm_backward_mixed points=3
"""layernorm_backward_mixed: exact in float64 on notebook 04's cases (batch 1,
7, square, 3-D, transposed views), then bfloat16 and float16 with
x = 4 + N(0, 1) and dy = 32 + N(0, 1), rows of 16 to 2048 and 512 rows,
against float64 within a small multiple of what float32 accumulation makes on
the same values; dx in x's dtype, dgamma and dbeta in gamma's; no autograd."""
course.selfcheck.layernorm_backward_mixed(layernorm_backward_mixed)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.layernorm_backward_mixed(layernorm_backward_mixed)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Notebook 04's lines, unchanged, run from float32 copies — `acc` the wider of float32 and `x.dtype`, and
# $\hat x$ as `(x.to(acc) - mean.to(acc).unsqueeze(-1)) * rstd`, built from converted operands — with one rounding per
# output at the very end, `dx.to(x.dtype), dgamma.to(gamma.dtype), dbeta.to(gamma.dtype)`:
#
# $$\hat x_{32} = (\operatorname{f32}(x) - \mu)\,\text{rstd}, \quad \bar x = \operatorname{round}_{\text{bf16}}\!\big((\hat{\bar x} - c_2 - \hat x_{32}\, c_1)\,\text{rstd}\big),
# \quad \boxed{\;\bar\gamma = \textstyle\sum_{\text{rows}} \operatorname{f32}(\bar y) \odot \hat x_{32} \ \text{summed in float32, returned in float32}\;}$$
#
# The parameter gradients are the ones that suffer most: they sum over $B \cdot T$ rows, so they are the longest
# reductions of the whole layer, and they feed the optimizer, which adds tiny updates to float32 weights. Notebooks
# 03 and 04 already built their Triton kernels this way — their row sums accumulate in float32 whatever they load,
# and 04's LayerNorm saves mean and rstd in float32 and keeps its per-program partial sums of $\bar\gamma$ and
# $\bar\beta$ in float32 buffers even when every activation it reads is bfloat16. This notebook measured why.
#
# </details>
# %% [markdown]
# ## 4 · What does `assert_close` accept?
#
# How should a test of a half-precision backward decide that its answer is right? The usual tool is
# `torch.testing.assert_close(actual, expected)`. It passes when every element satisfies
# $|a - e| \le \mathrm{atol} + \mathrm{rtol} \cdot |e|$, with `rtol` and `atol` picked by the dtype when you
# give none. The installed torch's defaults, next to each dtype's $u$:
# %% check-output
from torch.testing._comparison import default_tolerances

for name, dtype in (("float64", F64), ("float32", F32), ("bfloat16", BF16), ("float16", F16)):
    rtol, atol = default_tolerances(dtype)
    print(f"{name:9} rtol {rtol:<7g} atol {atol:<7g} rtol = {rtol / UNIT_ROUNDOFF[name]:7,.1f} u")

# %% [markdown]
# Every rule is a fixed multiple of $u$ per element. None knows how many terms were summed to make the
# element, or in which dtype. Both matter, as §2 measured, and in both directions.
#
# **Correct code, rejected.** A float32 loop adding $2^{20}$ terms, one at a time, has no bug, and still
# misses float32's `rtol` of $1.3 \times 10^{-6}$:
# %%
rng = np.random.default_rng(11)
long_rows = rng.random((4, 2**20)).astype(np.float32)  # (rows, n) float32 terms
sequential = np.cumsum(long_rows, axis=1)[:, -1]  # float32, one addition at a time
reference = long_rows.astype(np.float64).sum(axis=1)  # float64
try:
    torch.testing.assert_close(torch.from_numpy(sequential), torch.from_numpy(reference).float())
    print("float32 sequential sum of 2^20 terms: assert_close passes")
except AssertionError as failure:
    print("float32 sequential sum of 2^20 terms: assert_close fails")
    print("\n".join(line for line in str(failure).splitlines() if "Mismatched" in line or "relative" in line))

# %% [markdown]
# **A bug, accepted.** A sum *accumulated in bfloat16* — the bug of §2 — on rows of 64 terms, compared
# at bfloat16's default `rtol` of $1.6 \times 10^{-2}$:
# %%
rng = np.random.default_rng(12)
short_rows = torch.from_numpy(rng.random((8, 64))).to(BF16)  # (rows, n) bf16 terms
in_bf16 = torch.zeros(8, dtype=BF16)
for column in short_rows.T.unbind(0):
    in_bf16 = in_bf16 + column  # the running sum rounded to bf16 each step
reference = short_rows.double().sum(dim=1)  # float64
try:
    torch.testing.assert_close(in_bf16, reference.to(BF16))
    worst = ((in_bf16.double() - reference).abs() / reference).max().item()
    print(f"bfloat16-accumulated sum of 64 terms: assert_close passes (largest relative error {worst:.2e})")
except AssertionError:
    print("bfloat16-accumulated sum of 64 terms: assert_close fails")

# %% [markdown]
# Both verdicts are wrong, and the plot of §2 says where each begins. Here it is again with the two
# default tolerances drawn on it:
# %%
fig, ax = plt.subplots(figsize=(7.6, 4.6))
for name in ("bfloat16, sequential", "float32, sequential"):
    ax.loglog(NS, errors[name], marker="o", markersize=3.5, color=STYLE[name], label=f"{name} (§2)")
for name, dtype, color in (("float32", F32, "C0"), ("bfloat16", BF16, "C3")):
    rtol = default_tolerances(dtype)[0]
    ax.axhline(rtol, color=color, linestyle="--", linewidth=1)
    ax.annotate(f"assert_close's rtol for {name}", (NS[0], rtol), xytext=(0, 4), textcoords="offset points",
                fontsize=8, color=color)
fp32_errs, bf16_errs = np.array(errors["float32, sequential"]), np.array(errors["bfloat16, sequential"])
ns = np.array(NS)
ax.fill_between(ns, fp32_errs, default_tolerances(F32)[0], where=fp32_errs > default_tolerances(F32)[0],
                interpolate=True, color="C0", alpha=0.15, label="correct float32 code rejected")
ax.fill_between(ns, bf16_errs, default_tolerances(BF16)[0], where=bf16_errs < default_tolerances(BF16)[0],
                interpolate=True, color="C3", alpha=0.15, label="bfloat16 accumulation accepted")
ax.set_xticks(NS[::2], [f"$2^{{{int(math.log2(v))}}}$" for v in NS[::2]])
ax.minorticks_off()
ax.set(xlabel="terms N", ylabel="relative error of the sum",
       title="one tolerance per dtype, whatever the length of the sum")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=8, loc="center right")
plt.show()

# %% [markdown]
# Blue: a correct float32 sum fails its dtype's default from about ten thousand terms on, and a backward's
# reductions over a batch are longer than that. Red: the bfloat16 accumulator passes its dtype's default up
# to several hundred terms — the lengths a small test uses. To tell the two apart, a check needs a tolerance
# that grows with the dtype's $u$ **and** with the length $n$ of the reduction behind each output, and a
# reference exact enough to add no error of its own: float64, from the same rounded inputs.
#
# ### Relative to what? The condition factor
#
# §2's $\sqrt{N}\,u$ needs two qualifications before it can be a tolerance. It is *typical*, not guaranteed: it
# assumes the rounding errors behave like independent coin flips (Higham and Mary's model), and holds with high
# probability, not always. And it is relative to $\sum_i |x_i|$, not to the result: each addition rounds its own
# partial sum, and the partial sums are at most $\sum_i |x_i|$. §2 added positive terms, where the two are the same
# number. A backward's sums have terms of both signs: $\bar y - s$ with $\bar y$ far from zero,
# $\bar\gamma = \sum_{\text{rows}} \bar y \odot \hat x$ with $\hat x$ of mean zero. When the result is much smaller
# than the magnitudes that went into it, the same absolute error is larger, relative to the result, by the
# **condition factor**
#
# $$\kappa = \frac{\sum_i |x_i|}{\left|\sum_i x_i\right|} \;\ge 1,$$
#
# taken norm-wise for a whole output: the norm of the element-wise $\sum |\text{terms}|$ over the norm of the
# result. Measure it: rows of $N$ float32 terms whose first half is near $+1$ and second half near $-1$, so that the
# partial sums climb to about $N/2$ and come back down to a result $\kappa$ times smaller than $\sum |x_i|$, summed
# left to right in float32 against float64.
# %%
def cancelling_rows(gen, rows, n, kappa):
    """(rows, n) float32 terms, first half near +1 and second half near −1, each row's sum about Σ|x| / kappa."""
    x = torch.cat([torch.ones(rows, n // 2, dtype=F64), -torch.ones(rows, n - n // 2, dtype=F64)], dim=1)
    x = x + 0.25 * randn(gen, rows, n)
    target = x.abs().sum(-1, keepdim=True) / kappa
    x = x + (target - x.sum(-1, keepdim=True)) / n  # shift every term a little: the row ends at its target
    return (x * 2 ** torch.rand(rows, 1, generator=gen, dtype=F64)).to(F32).numpy()  # rows at different scales


gen = torch.Generator().manual_seed(12)
u32 = UNIT_ROUNDOFF["float32"]
print(f"{'N':>6} {'κ':>5}   error / |Σx| in units of √N·u     error / Σ|x| in units of √N·u")
for n in (256, 4096, 65536):
    for kappa in (1, 8, 64):
        x = cancelling_rows(gen, 8, n, kappa) if kappa > 1 else np.abs(cancelling_rows(gen, 8, n, 64))
        exact = np.array([math.fsum(row) for row in x.astype(np.float64)])  # (rows,)
        error = np.abs(np.cumsum(x, axis=1)[:, -1] - exact)  # float32, left to right
        magnitudes = np.abs(x.astype(np.float64)).sum(-1)
        measured_kappa = np.linalg.norm(magnitudes) / np.linalg.norm(exact)
        unit = math.sqrt(n) * u32
        print(f"{n:6} {measured_kappa:5.0f}   {np.linalg.norm(error) / np.linalg.norm(exact) / unit:20.2f}"
              f"     {np.linalg.norm(error) / np.linalg.norm(magnitudes) / unit:28.2f}")

# %% [markdown]
# Read the two columns. Measured against $\sum_i |x_i|$, the error stays a fraction of $\sqrt{N}\,u$ whatever the
# cancellation, as §2 found. Measured against the result, it grows with $\kappa$ — at $\kappa = 64$ it is many times
# $\sqrt{N}\,u$, so a tolerance built on $\sqrt{N}\,u$ alone would fail this correct float32 sum. Part C asks you
# for a rule that knows this:
#
# > *What tolerance would accept every correct float32-accumulated backward in `dtype` whose reductions have $n$
# > terms and a result $\kappa$ times smaller than their magnitudes, and still reject one that held a statistic in
# > half precision?*
# %% [markdown]
# ## Part C — grad_tolerance (2 points)
#
# Write the rule the grader's hidden checks hold Parts A, B and E to: `grad_tolerance(dtype, n, condition=1.0)`
# returns the largest norm-wise relative error, against a float64 reference from the same inputs, that a check
# should accept from a gradient stored in `dtype` whose reductions had `n` terms, summed in float32 (float64 when
# `dtype` is float64), with condition factor `condition` ($\kappa$ above: 1 when nothing cancels).
#
# - `dtype`: `torch.float16`, `torch.bfloat16`, `torch.float32` or `torch.float64`; `n` $\ge 1$; `condition`
#   $\ge 1$, and `grad_tolerance(dtype, n)` means a condition of 1;
# - return a positive float.
#
# The check measures; it does not compare your formula with one. At each dtype and at $n$ from 16 to $2^{20}$ it
# makes errors two ways — correct code (a left-to-right float32 sum, its result stored in `dtype`) and buggy code (a
# float32 result passed through bfloat16, or a sum whose halves are held in half precision before they cancel) —
# on sums that do not cancel ($\kappa = 1$) and sums that do ($\kappa \approx 64$), and your tolerance, called with
# each sum's measured $\kappa$, must **accept every right one and reject every wrong one**. It must also depend on
# the dtype, grow with $n$ and with $\kappa$, and never shrink as either grows. How many sources of error does a
# correct answer have, and which of them does a cancellation magnify?
# %% solution id=grad_tolerance
def grad_tolerance(dtype, n, condition=1.0):
    """Largest relative error to accept from a gradient stored in `dtype`, built by reductions of n terms
    summed in float32 (float64 for float64) whose results are `condition` times smaller than the magnitudes
    summed, against a float64 reference from the same inputs."""
    ### BEGIN SOLUTION
    u = {F64: 2.0**-53, F32: 2.0**-24, BF16: 2.0**-8, F16: 2.0**-11}  # unit roundoff: half an ulp of 1
    u_acc = u[F64] if dtype == F64 else u[F32]  # the dtype the sums ran in
    # The output's one rounding, and a typical n-term sum relative to the result: 2× margin on each.
    return 2 * u[dtype] + 2 * condition * math.sqrt(n) * u_acc
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — two sources of error</summary>
#
# A correct mixed-precision gradient is wrong for two reasons only. It was rounded once to `dtype` at the end: how
# large is that relative error at most, in units of the unit roundoff $u$ of §1 — and whose $u$ is it? And its
# reductions added $n$ terms in the accumulation dtype, each addition rounding once: whose $u$ is that? Your rule
# has one term for each. How much margin would you leave, so that an unlucky draw of correct code does not fail?
#
# </details>
#
# <details><summary>Hint 2 — how the sum's term grows with n</summary>
#
# The output's rounding does not depend on $n$. The sum's error does: the worst case grows like $n\,u$, but §2's
# plot showed that a real float32 sum stays far below it, on the slope of a random walk. A rule built on $n\,u$ is
# safe but useless at large $n$: at $n = 2^{20}$, $n\,u$ in float32 is 6 %, more than rounding the answer to
# bfloat16 would cost, so it would accept a half-precision bug. A rule that ignores $n$ fails a correct float32 sum
# of a million terms.
#
# </details>
#
# <details><summary>Hint 3 — the condition factor</summary>
#
# Which of your two terms is relative to the terms summed, and which to the finished result? The rounding of the
# stored output is relative to the output itself, however it was made. The sum's error is relative to
# $\sum_i |x_i|$: to express it relative to the result, what do you multiply it by? Check one case against the
# table above: float32, $N = 4096$, $\kappa \approx 64$ — is your rule above the measured error? And the bug of §3,
# a hub held in bfloat16 on rows with $\kappa \approx 64$, is off by some ten times bfloat16's $u$: does your rule
# still reject it, or did $\kappa$ end up multiplying a term it should not?
#
# </details>
# %% test id=test_grad_tolerance points=2
"""grad_tolerance: a positive float that depends on the dtype, grows with n
and with the condition factor (1 by default) and never shrinks; at float16,
bfloat16, float32 and float64, n = 16 to 2²⁰ and condition factors 1 and about
64, above the errors of correct code and below those of a statistic held in
half precision, measured here on fresh data."""
course.selfcheck.grad_tolerance(grad_tolerance)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.grad_tolerance(grad_tolerance)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\boxed{\;\text{tol}(\text{dtype}, n, \kappa) = 2\,u_{\text{dtype}} + 2\,\kappa\sqrt{n}\; u_{\text{acc}}\;}$$
#
# — `2 * u[dtype] + 2 * condition * math.sqrt(n) * u_acc`: the output's one rounding, and the typical error of an
# $n$-term float32 sum measured against what it went through and converted to the result by $\kappa$, each with a
# factor 2 of margin. The condition factor multiplies the sum's term only: the stored result is rounded once, to
# itself, however much the sum behind it cancelled. For half-precision outputs the first term dominates at every
# realistic $n$ and $\kappa$ ($\sqrt{n}\,u_{32}$ reaches bfloat16's $u$ only at $n \approx 4 \times 10^{9}$); for
# float32 outputs such as $\bar\gamma$ the second does, which is why a float32 test with a fixed `rtol` passes at
# $N = 1024$ and fails at $B \cdot T = 32768$ rows — and fails sooner when $\bar\gamma$ cancels, as it does when
# $\hat x$ has mean zero. It is a typical size, not a guarantee: a check built on it fails right code with a small
# probability, which is what the factors 2 buy down. The grader's hidden checks hold Parts A, B and E to this rule,
# with the $\kappa$ of each output (for $\bar x = y \odot (\bar y - s)$: the norm of $y \odot (|\bar y| + |s|)$
# over the norm of $\bar x$).
#
# </details>
#
# Here is your rule against your own code: the errors of your Part A at growing row lengths, float16 and bfloat16,
# with your tolerance for each at that row's $\kappa$, and what the same rows give with the hub held in half
# precision.
# %%
N_SWEEP = [16, 64, 256, 1024, 4096]
gen = torch.Generator().manual_seed(9)
fig, ax = plt.subplots(figsize=(9.0, 4.2))
try:
    for dtype, color in ((BF16, "C0"), (F16, "C1")):
        yours, held, tol = [], [], []
        for N in N_SWEEP:
            y = torch.softmax(2 * randn(gen, 4, N), dim=-1).to(dtype)
            dy = (32 + randn(gen, 4, N)).to(dtype)
            y64, dy64 = y.to(F64), dy.to(F64)
            ref = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))
            yours.append(rel_error(softmax_backward_mixed(y, dy), ref))
            s_half = (y * dy).sum(-1, keepdim=True).to(F64)  # the hub rounded to the half dtype
            held.append(rel_error((y64 * (dy64 - s_half)).to(dtype), ref))
            s = (y64 * dy64).sum(-1, keepdim=True)
            kappa = max(1.0, (y64.abs() * (dy64.abs() + s.abs())).norm().item() / ref.norm().item())
            tol.append(grad_tolerance(dtype, N, kappa))
        name = str(dtype).removeprefix("torch.")
        ax.loglog(N_SWEEP, yours, "o-", color=color, label=f"your Part A, {name}")
        ax.loglog(N_SWEEP, held, "x:", color=color, label=f"hub held in {name}")
        ax.loglog(N_SWEEP, tol, "--", color=color, label=f"your grad_tolerance({name}, N, κ)")
    ax.set(xlabel="row length N", ylabel="relative error vs float64",
           title="softmax backward, ȳ = 32 + N(0, 1): right code sits under the rule, the bug above it")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    plt.show()
except NotImplementedError:
    plt.close(fig)
    print("Finish Parts A and C first: this cell measures your code against your rule.")

# %% [markdown]
# And Part B's $\bar\gamma$, the one output with no half-precision rounding to hide in: bfloat16 $x$ and $\bar y$ of
# 64 features, the batch growing from 64 rows to 32,768, your $\bar\gamma$ against your `grad_tolerance(float32, rows,
# κ)` — $n$ the number of rows, $\kappa$ measured from the terms $\bar y \odot \hat x$ — and the same $\bar\gamma$ with one
# bfloat16 step on its way: the products $\bar y \odot \hat x$ rounded to bfloat16 before the sum, or the float32 sum
# itself rounded to bfloat16 at the end.
# %%
gen = torch.Generator().manual_seed(12)
FEATURES = 64
print(f"{'rows':>6} {'κ':>5} {'your tolerance':>15} {'yours':>9} {'products in bf16':>17} {'rounded to bf16':>16}")
try:
    for rows in (64, 512, 4096, 32768):
        x = (4 + randn(gen, rows, FEATURES)).to(BF16)
        dy = (32 + randn(gen, rows, FEATURES)).to(BF16)
        gamma = torch.ones(FEATURES, dtype=F32)
        x64 = x.to(F64)
        mean, var = x64.mean(-1), x64.var(-1, unbiased=False)
        rstd = torch.rsqrt(var + 1e-5)
        terms = dy.to(F64) * (x64 - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)  # (rows, N) ȳ ⊙ x̂, float64
        reference = terms.sum(0)  # (N,) γ̄ in float64
        kappa = terms.abs().sum(0).norm().item() / reference.norm().item()
        xhat32 = (x.to(F32) - mean.to(F32).unsqueeze(-1)) * rstd.to(F32).unsqueeze(-1)
        in_bf16 = (dy * xhat32.to(BF16)).sum(0)  # each product rounded to bfloat16 (torch still sums in float32)
        rounded = (dy.to(F32) * xhat32).sum(0).to(BF16)  # the float32 sum, then one bfloat16 rounding
        dgamma = layernorm_backward_mixed(dy, x, gamma, mean.to(F32), rstd.to(F32))[1]
        print(f"{rows:6} {kappa:5.0f} {grad_tolerance(F32, rows, kappa):15.1e} {rel_error(dgamma, reference):9.1e} "
              f"{rel_error(in_bf16, reference):17.1e} {rel_error(rounded, reference):16.1e}")
except NotImplementedError:
    print("Finish Parts B and C first: this cell measures your γ̄ against your rule.")

# %% [markdown]
# Your $\bar\gamma$ sits orders of magnitude under the rule at every batch: torch's float32 `sum` adds in blocks, not
# one term after another, and does far better than the random walk the rule allows for. One bfloat16 step costs
# about one bfloat16 rounding, whatever the batch. The rule rejects it at the batches a unit test uses, but its
# $\kappa\sqrt{n}$ term grows with the batch, and the recap's rule no longer tells the two apart at 32,768 rows.
# Why: for terms of random sign the sum itself grows only like $\sqrt n$ while what it went through grows like $n$,
# so $\kappa \approx \sqrt n$ and $\kappa\sqrt n\,u$ becomes $n\,u$ — the worst-case bound Hint 2 of Part C set
# aside as too loose. The checks probe the rule on cancelling sums of at most 65,536 terms, where it still separates.
# A tolerance built on a bound keeps right code from failing; it does not catch every bug on the longest sums of a
# layer. There, comparing with a float32 computation on the same values — what the visible checks do — is the
# sharper test.
# %% [markdown]
# ## 5 · Loss scaling: keeping fp16 gradients off zero
#
# float16's five exponent bits stop early. Its smallest **normal** number is $2^{-14}$; below that come the
# **subnormals**, evenly spaced $2^{-24}$ apart, which keep fewer significant bits the smaller they get;
# below half of $2^{-24}$, everything rounds to 0. At the top, 65,504 is the largest number and anything
# past it is inf:
# %% check-output
f16 = torch.finfo(F16)
smallest_subnormal = torch.nextafter(torch.tensor(0.0, dtype=F16), torch.tensor(1.0, dtype=F16)).item()
print(f"float16: smallest subnormal {smallest_subnormal:.3g} = 2^{math.log2(smallest_subnormal):.0f}, "
      f"smallest normal {f16.smallest_normal:.3g} = 2^{math.log2(f16.smallest_normal):.0f}, largest {f16.max:,.0f}")
print(f"bfloat16: smallest normal {torch.finfo(BF16).smallest_normal:.3g}, the same as float32's")

# %% [markdown]
# Gradients live low. The loss is a mean over many tokens, so each token's share of a gradient carries a
# factor of one over their number, and the backward multiplies it by weights and activation derivatives
# layer after layer: the magnitudes spread over many decades, mostly far below 1. How far below depends on the
# network. The paper that introduced loss scaling (Micikevicius et al., 2018, *Mixed precision training*) showed one
# such histogram, of the activation gradients of an SSD object detector: much of the mass below float16's normal
# range, part of it below its smallest subnormal, and the top of the range unused. SSD needed scaling to train in
# float16; the ImageNet CNNs of the same paper trained without any. So some networks need it, and the way to know is
# to look at where the gradients live. The histogram below is a made-up distribution of that kind, to show the
# mechanism.
#
# The cure uses linearity: multiply the loss by a scale $S$ before the backward, and every gradient is
# multiplied by $S$ too. On a log axis the whole distribution slides up by $\log_2 S$ octaves, into
# float16's range. The gradients are then divided by $S$ in float32 — *unscaled* — before the optimizer
# uses them. Below, $2^{17}$ gradients whose magnitudes are log-normal around $10^{-6}$, cast to float16
# as they are, and scaled by $S = 2^{16}$ first:
# %%
rng = np.random.default_rng(13)
G = 2**17  # gradients drawn
grads = np.exp(rng.normal(math.log(1e-6), 3.0, size=G)) * rng.choice([-1.0, 1.0], size=G)  # float64
SCALE = 2.0**16


def through_fp16(g, scale):
    """g (float64 numpy) multiplied by scale, cast to float16, unscaled in float32: what the optimizer sees."""
    return (torch.from_numpy(g * scale).to(F16).float() / scale).double().numpy()


def fates(g, scale):
    """Boolean masks of g's elements that become 0, subnormal, normal, or inf in float16 after scaling."""
    h = np.abs(torch.from_numpy(g * scale).to(F16).double().numpy())
    return {"flushed to 0": h == 0, "subnormal": (h > 0) & (h < f16.smallest_normal),
            "normal": (h >= f16.smallest_normal) & np.isfinite(h), "overflowed to inf": ~np.isfinite(h)}


magnitudes = np.abs(grads)
bins = np.logspace(-14, 6, 121)
FATE_COLOR = {"flushed to 0": "C3", "subnormal": "C1", "normal": "C0", "overflowed to inf": "black"}
LIMITS = {"$2^{-24}$": smallest_subnormal, "$2^{-14}$": f16.smallest_normal, "65,504": f16.max}  # float16's, dotted
fig, axes = plt.subplots(2, 1, figsize=(8.6, 6.0), sharex=True)
for ax, scale, legend_at in zip(axes, (1.0, SCALE), ("upper left", "upper right")):
    masks = fates(grads, scale)
    error = np.median(np.abs(through_fp16(grads, scale) / grads - 1))  # over all of them, the flushed ones at 1
    below = np.zeros(len(bins) - 1)  # the stack so far, per bin
    for fate, m in masks.items():
        counts = below + np.histogram(magnitudes[m], bins=bins)[0]
        ax.stairs(counts, bins, baseline=below, fill=True, color=FATE_COLOR[fate], label=f"{fate}: {m.mean():.1%}")
        below = counts
    top = below.max()
    ax.set_ylim(0, 1.3 * top)
    for text, limit in LIMITS.items():
        ax.axvline(limit / scale, color="grey", linestyle=":", linewidth=1)
        ax.annotate(text if scale == 1 else f"{text} / S", (limit / scale, 1.2 * top), fontsize=8, color="grey",
                    ha="center", va="center", backgroundcolor="white")
    title = "cast to float16 as they are" if scale == 1 else "loss × 2¹⁶, cast to float16, then ÷ 2¹⁶ in float32"
    ax.set_title(f"{title}: median relative error {error:.1e}", fontsize=10)
    ax.set_xscale("log")
    ax.set_ylabel("gradients")
    ax.legend(fontsize=8, loc=legend_at)
    print(f"{title}: " + ", ".join(f"{m.mean():.1%} {fate}" for fate, m in masks.items())
          + f"; median relative error {error:.1e}")
axes[-1].set_xlabel("|gradient| before the cast; dotted: float16's smallest subnormal, smallest normal, largest")
fig.tight_layout()
plt.show()
bf16_zero = (torch.from_numpy(grads).to(BF16) == 0).double().mean().item()
print(f"cast to bfloat16 as they are: {bf16_zero:.1%} flushed to 0")

# %% [markdown]
# The same gradients, the same float16: without scaling, the window of float16's normal numbers (from the
# $2^{-14}$ line to the 65,504 line) catches only the upper tail, and a large share flushes to zero — those
# weights get no update at all — or lands in the subnormals, where a gradient keeps only a few bits. Scaled
# by $2^{16}$, the window slides left by 16 octaves, almost everything is normal, and the median error after
# unscaling is a fraction of float16's $u$. The price is at the other end: the largest gradient float16 can
# now carry is $65{,}504 / S \approx 1$. None of these reached it, but one that does turns into inf, and the
# step with it.
#
# ### Which S? Dynamic loss scaling
#
# A fixed $S$ would have to suit every layer at every step, and the gradients drift by orders of magnitude
# over a run: too large and some gradient becomes inf, which poisons the update (inf − inf is NaN); too
# small and the low tail flushes to zero again. **Dynamic loss scaling** looks for the largest $S$ that
# does not overflow, as it trains:
#
# 1. Start high.
# 2. After each backward, unscale the gradients in float32 and look for an inf or a NaN in any of them.
# 3. If there is one, **skip this step** — those gradients are not the gradient — and **back off**: multiply
#    $S$ by a factor below 1.
# 4. If there is none, take the step, and after $K$ **consecutive** good steps **grow** $S$ by a factor above 1.
#
# $S$ then hovers just below the overflow point and follows it as it moves; an overflow costs one skipped step
# in thousands. PyTorch's `torch.amp.GradScaler` does this; its defaults, from the installed torch:
# %% check-output
import inspect

defaults = inspect.signature(torch.amp.GradScaler.__init__).parameters
print(", ".join(f"{name} = {defaults[name].default}" for name in ("init_scale", "growth_factor", "backoff_factor",
                                                                   "growth_interval")))

# %% [markdown]
# bfloat16 needs none of this. Its exponent has float32's eight bits, so it holds numbers down to
# $1.2 \times 10^{-38}$: the histogram's cell found none of the gradients flushed to zero in bfloat16. Its price is
# paid in the significand instead — $u = 2^{-8}$ — which is why training in bfloat16 needs §3's float32
# statistics and §2's float32 accumulators all the more.
# %% [markdown]
# ## Part D — DynamicLossScaler (2 points)
#
# Write the dynamic loss scaler that float16 training runs with (PyTorch's `torch.amp.GradScaler` does the same
# job). One training step with it: multiply the loss by `scaler.scale` before backward; then
# `found_inf = scaler.unscale_(grads)`; then `if scaler.update(found_inf): optimizer.step()`.
#
# - `DynamicLossScaler(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)`;
#   `scale` is a number, `init_scale` at first;
# - `unscale_(grads)`: `grads` is a list of float32 tensors (or `None` for a parameter that got no gradient);
#   divide each by `scale` **in place** (the trailing underscore is PyTorch's sign for that), and return
#   `found_inf`: `True` when any of them holds an inf or a NaN;
# - `update(found_inf)`: return whether the optimizer may take this step — never a step with inf or NaN in its
#   gradients — and change the scale: after an overflow, multiply it by `backoff_factor`; after `growth_interval`
#   finite steps **in a row**, multiply it by `growth_factor`. An overflow starts the count again, and so does a
#   change of scale.
#
# The check builds scalers with small intervals and runs them through fixed sequences of good and overflowing
# steps, comparing `scale` and `update`'s answer after every one. What state does the scaler need beyond `scale`?
# %% solution id=DynamicLossScaler
class DynamicLossScaler:
    """Loss scaling for float16 training: scale the loss up so small gradients stay normal numbers, unscale the
    gradients in float32, skip the steps that overflowed, and adapt the scale to the gradients' range."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        ### BEGIN SOLUTION
        self.scale = float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.good_steps = 0  # finite steps in a row since the last overflow or change of scale
        ### END SOLUTION

    def unscale_(self, grads):
        """Divide every gradient in `grads` (tensors, or None) by the scale, in place; return found_inf."""
        ### BEGIN SOLUTION
        inv_scale = 1.0 / self.scale  # a power of two: multiplying by it is exact
        found_inf = False
        for g in grads:
            if g is None:
                continue
            g.mul_(inv_scale)
            found_inf = found_inf or not bool(torch.isfinite(g).all())  # inf or NaN anywhere
        return found_inf
        ### END SOLUTION

    def update(self, found_inf):
        """Adapt the scale after a step; return whether the optimizer may apply that step."""
        ### BEGIN SOLUTION
        if found_inf:
            self.scale *= self.backoff_factor  # the scaled gradients overflowed: the scale is too large
            self.good_steps = 0
            return False  # skip: these gradients are not numbers
        self.good_steps += 1
        if self.good_steps == self.growth_interval:  # a long run without overflow: try a larger scale
            self.scale *= self.growth_factor
            self.good_steps = 0
        return True
        ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — the state, and unscale_</summary>
#
# Beside `scale` and the three options, what must the scaler remember between calls to `update` to know when
# `growth_interval` finite steps *in a row* have passed? `unscale_` changes the tensors it is handed, not copies:
# the optimizer reads those very tensors (each `param.grad`), so a new list would be thrown away. PyTorch's in-place
# methods end in an underscore; `torch.isfinite` is false for both inf and NaN.
#
# </details>
#
# <details><summary>Hint 2 — the two transitions, and the step</summary>
#
# An overflowing step: are its gradients usable, and what does that make `update`'s answer? What happens to the
# scale, and to the run of good steps? A finite step: it is taken — and when does the scale change? Without growth,
# one early overflow would leave the scale small for the rest of training; without a reset of the run on overflow,
# the scale would grow again too soon.
#
# </details>
#
# <details><summary>Hint 3 — a run traced by hand</summary>
#
# Options `init_scale=8`, `growth_factor=2`, `backoff_factor=0.5`, `growth_interval=3`, and the steps
# ok, ok, inf, ok, ok, ok, ok. The first three rows of (scale, finite steps in a row, `update`'s answer) after each
# step are (8, 1, `True`), (8, 2, `True`), (4, 0, `False`). Fill in the other four before you write `update`: at
# which step does the scale change again, and to what?
#
# </details>
# %% test id=test_DynamicLossScaler points=2
"""DynamicLossScaler: starts at init_scale (2**16 by default); unscale_
divides float32 gradients in place and reports inf and NaN; update skips
overflowing steps, backs off, and grows only after growth_interval finite
steps in a row, over fixed runs of good and overflowing steps."""
course.selfcheck.DynamicLossScaler(DynamicLossScaler)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.DynamicLossScaler(DynamicLossScaler)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $$\text{overflow:}\ \ \text{scale} \leftarrow \text{scale} \cdot \text{backoff},\ \text{skip the step};\qquad
# \boxed{\;\text{growth\_interval finite steps in a row:}\ \ \text{scale} \leftarrow \text{scale} \cdot \text{growth}\;}$$
#
# — in code, two branches of `update` and one counter that both of them reset. The scale settles just below the
# largest value the gradients tolerate: it climbs until a step overflows, halves, and climbs again a growth interval
# later — a sawtooth that costs one skipped step in every interval. (The run of Hint 3 ends at scale 8, with the
# counter at 1.)
#
# </details>
#
# Here is the sawtooth on a made-up run whose gradients' largest magnitude wanders up and down over training, with
# your scaler (interval 25):
# %%
gen = torch.Generator().manual_seed(10)
F16_MAX = torch.finfo(F16).max  # 65504: a scaled gradient beyond it is inf
steps = 600
step_index = torch.arange(steps, dtype=F64)
peak = 10 ** (-1 + 0.6 * torch.sin(2 * math.pi * step_index / 400)) * (1 + 0.3 * torch.rand(steps, generator=gen, dtype=F64))
try:
    scaler = DynamicLossScaler(init_scale=2.0**16, growth_interval=25)
    scales, skipped = [], []
    for t in range(steps):
        grad = torch.tensor([peak[t].item() * scaler.scale], dtype=F64).to(F16).to(F32)  # the backward in float16
        found_inf = scaler.unscale_([grad])
        if not scaler.update(found_inf):
            skipped.append(t)
        scales.append(scaler.scale)
    fig, ax = plt.subplots(figsize=(7.2, 3.8))
    ax.semilogy(scales, label="scaler.scale")
    ax.semilogy((F16_MAX / peak).tolist(), "k:", label="the largest scale this step's gradients allow")
    ax.semilogy(skipped, [scales[t] for t in skipped], "rv", ms=4, label=f"skipped steps ({len(skipped)})")
    ax.set(xlabel="step", ylabel="loss scale", title="dynamic loss scaling: back off on overflow, grow after 25 good steps")
    ax.legend(fontsize=8)
    plt.show()
except NotImplementedError:
    print("Finish Part D first: this cell runs your scaler.")

# %% [markdown]
# ## Part E — softmax_bwd_mixed_kernel (2 points)
#
# This is the course's capstone, and it says so: no new algebra and no new walk. Notebook 03's `softmax_bwd_kernel`
# gave the body: one program per row, the whole row in one block; both rows loaded through the row's mask with 0 in
# the tail lanes and, when they are half precision, widened to float32 right after the load, before any arithmetic;
# the hub from one `tl.sum`; $\bar x$ stored once through the same mask.
#
# Notebook 07's `ce_grad_kernel` gave the walk: a row longer than a block, read twice, with a float32 running value
# carried from the first walk to the second. What this kernel adds is where the error goes once both are combined,
# in Part C's terms. The hub is no longer one `tl.sum` but a running value across blocks — §2's sequential sum,
# one step per block — so its dtype decides whether the row's length enters the error at all. And the store is the
# one rounding, into a half-precision output: with the hub accumulated wide, Part C's first term $2u_{\text{dtype}}$
# is the whole budget at every row length, and a bfloat16 output gets eight times float16's. The kernel is launched as
#
# ```python
# softmax_bwd_mixed_kernel[(n_rows,)](dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), n_cols, BLOCK=BLOCK)
# ```
#
# - `DY_ptr`, `Y_ptr`: $\bar y$ and $y$, $(n_\text{rows}, n_\text{cols})$, each row's values adjacent, rows the
#   given strides apart; read-only. `DX_ptr`: where $\bar x$ goes, **in the same dtype as the inputs**.
# - One program per row. `BLOCK` is a power of two, usually **smaller** than `n_cols`: walk the row in `BLOCK`-wide
#   pieces, twice — once to build the hub, once to write $\bar x$. No load or store past the row.
# - The error target: Part C's rule (the visible check: twice the error of a float32-accumulated backward on the
#   same values), and float64 rows exact enough for a float64 gradcheck.
#
# The test cell launches it on rows inside wider buffers whose padding holds NaN, in float32, float64 and float16
# (bfloat16 too when there is a GPU: the interpreter cannot run it), with $\bar y$ far from zero, then gradchecks it
# in float64. Notebook 03's widening to float32 was written for one block: what must the running hub's dtype be
# when there are many, and what must it be for float64 rows? Where does the one rounding go?
# %%
import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernel in Triton's interpreter


def unfinished(exc):
    """Whether `exc` comes from a kernel that still raises course.todo(): Triton wraps what a kernel raises in its
    own error (and cannot compile a stub on a GPU), so look at the message and the whole chain of causes."""
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "course.todo()" in str(exc):
            return True
        exc = exc.__cause__
    return False


def softmax_backward_by_kernel(y, dy, BLOCK=128):
    """Given: launch softmax_bwd_mixed_kernel on (n_rows, n_cols) tensors; dx in their dtype."""
    dx = torch.empty_like(y)
    softmax_bwd_mixed_kernel[(y.shape[0],)](dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), y.shape[1],
                                            BLOCK=BLOCK)
    return dx
# %% solution id=softmax_bwd_mixed_kernel
@triton.jit
def softmax_bwd_mixed_kernel(
    DY_ptr,  # (n_rows, n_cols) ȳ, half precision (or float32/float64)
    Y_ptr,  # (n_rows, n_cols) y = softmax(x), the same dtype
    DX_ptr,  # (n_rows, n_cols) x̄, written in the same dtype
    dy_row_stride,  # elements from one row of DY to the next
    y_row_stride,
    dx_row_stride,
    n_cols,  # the length of a row
    BLOCK: tl.constexpr,  # a power of two: the columns one step of the walk reads
):
    """One row per program: notebook 03's softmax backward on half-precision rows, its hub accumulated in float32
    (float64 for float64 rows), x̄ stored in the rows' dtype."""
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2³¹ on a large batch
    cols = tl.arange(0, BLOCK)
    dtype = Y_ptr.dtype.element_ty  # what is in memory, and what x̄ is stored as
    s = tl.zeros([], tl.float32) + tl.zeros([], dtype)  # 0 in the wider of float32 and the loaded dtype
    for start in range(0, n_cols, BLOCK):  # first walk: the hub
        mask = start + cols < n_cols
        y = tl.load(Y_ptr + row * y_row_stride + start + cols, mask=mask, other=0.0)
        dy = tl.load(DY_ptr + row * dy_row_stride + start + cols, mask=mask, other=0.0)
        s += tl.sum(y.to(s.dtype) * dy.to(s.dtype), axis=0)  # upcast before the product and the sum
    for start in range(0, n_cols, BLOCK):  # second walk: x̄, computed wide, stored narrow
        mask = start + cols < n_cols
        y = tl.load(Y_ptr + row * y_row_stride + start + cols, mask=mask, other=0.0).to(s.dtype)
        dy = tl.load(DY_ptr + row * dy_row_stride + start + cols, mask=mask, other=0.0).to(s.dtype)
        tl.store(DX_ptr + row * dx_row_stride + start + cols, (y * (dy - s)).to(dtype), mask=mask)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — two walks over the row</summary>
#
# Every entry of $\bar x$ needs the hub, and the hub needs the whole row: so how many passes over the row does a
# program make, when it can only hold `BLOCK` columns at a time? Notebook 07's `ce_grad_kernel` had the same
# problem. In the first walk, a masked lane must add nothing to the hub: which `other` value makes that so? In the
# second walk, which mask does the store need? Find the row with `tl.program_id(0)` and the row strides, as in
# notebook 03.
# If the check says `out-of-bounds` or `race`, it names the program, the line and the element: which row is that
# element in, and should this program's address have reached it?
#
# </details>
#
# <details><summary>Hint 2 — the accumulator's dtype</summary>
#
# The running hub is a 0-d value that lives across the loop; its dtype is the accumulation dtype. `tl.sum` adds in
# the dtype it is handed, and the product of two float16 blocks is float16: so in which order must the conversion,
# the product and the `tl.sum` come? `Y_ptr.dtype.element_ty` is the dtype in memory. To start the hub as a zero in
# the *wider* of float32 and that dtype: which dtype must the running hub have for float16 rows, and which for
# float64 rows? In the second walk, in which dtype should $\bar y - s$ be formed, and
# what is the one value converted back before the store?
#
# </details>
#
# <details><summary>Hint 3 — the walk's skeleton</summary>
#
# ```python
# ...  # the row index (in int64: row times stride can pass 2**31) and the column offsets, as in notebook 03
# s = ...  # a zero of the accumulation dtype
# for start in range(...):  # first walk over the row's pieces: the hub
#     ...  # mask, two loads, then add this piece's share to s — converted first
# for start in range(...):  # second walk: x̄
#     ...  # the same mask and loads, x̄ of this piece in s's dtype, one store in the memory dtype
# ```
#
# Work one piece by hand: with `BLOCK = 4` and `n_cols = 6`, the second piece starts at column 4. Which of its four
# lanes are masked, and what do the two loads give them?
#
# </details>
# %% test id=test_softmax_bwd_mixed_kernel points=2
"""softmax_bwd_mixed_kernel: rows of 5 to 1000 walked in blocks smaller than
the row, inside NaN-padded buffers, in float32, float64 and float16 (bfloat16
on a GPU) with dy far from zero, against float64 within twice the error of a
float32-accumulated backward; the padding untouched; a float64 gradcheck."""
course.selfcheck.softmax_bwd_mixed_kernel(softmax_bwd_mixed_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.softmax_bwd_mixed_kernel(softmax_bwd_mixed_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Load narrow, compute wide, store narrow: the hub `s` starts as a zero of the wider of float32 and the memory
# dtype (`tl.zeros([], tl.float32) + tl.zeros([], dtype)`), and every piece is converted to `s.dtype` before the
# product and the `tl.sum` that add it in — `tl.sum(y.to(s.dtype) * dy.to(s.dtype), axis=0)` — so that
#
# $$\boxed{\;s = \textstyle\sum_{\text{pieces}} \operatorname{tl.sum}\big(\operatorname{f32}(y) \cdot \operatorname{f32}(\bar y)\big),
# \qquad \bar x = \operatorname{f16}\big(\operatorname{f32}(y) \odot (\operatorname{f32}(\bar y) - s)\big)\;}$$
#
# The memory traffic is the same as an all-float16 kernel — two reads of each row and one write, all in 2-byte
# numbers — and the conversions are free next to them: a softmax backward is memory-bound. Every kernel in the
# course's `kernels` package follows the same pattern, and its tests hold each one's bfloat16 backward to Part C's
# rule.
#
# </details>
#
# Your kernel against the float64 reference, as the rows grow:
# %%
gen = torch.Generator().manual_seed(11)
try:
    for N in (100, 1000, 4000):
        y = torch.softmax(2 * randn(gen, 2, N), dim=-1).to(F16)
        dy = (32 + randn(gen, 2, N)).to(F16)
        y64, dy64 = y.to(F64), dy.to(F64)
        ref = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))
        err = rel_error(softmax_backward_by_kernel(y.to(DEVICE), dy.to(DEVICE), BLOCK=128).cpu(), ref)
        try:
            verdict = f"{err / grad_tolerance(F16, N):.2f} of your grad_tolerance(float16, {N})"
        except NotImplementedError:
            verdict = "(finish Part C to compare it with your rule)"
        print(f"float16 rows of {N:4}: error {err:.1e}, {verdict}")
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Part E first: this cell runs softmax_bwd_mixed_kernel.")

# %% [markdown]
# ## What to take away
#
# - Each dtype has a unit roundoff $u = 2^{-p}$ (`finfo.eps / 2`): $2^{-24}$ for float32, $2^{-11}$ for float16
#   and TF32 (what a tensor core keeps of a float32 `tl.dot` input by default), $2^{-8}$ for bfloat16. The
#   exponent bits set the range: bfloat16 has float32's, float16 stops at $6 \times 10^{-5}$ (normal) and 65,504.
# - The error of a sum of $N$ terms typically grows like $\sqrt{N}\,u$ of its accumulator when they are added
#   one by one, and stays within a few $u$ pairwise. A half-precision accumulator is worse than that: it
#   **stops** once the terms fall under half a gap of the running sum — a bfloat16 sum of terms below 1 never
#   passes 256. `tl.sum` reduces in its input's dtype; widen to float32 first.
# - Save activations in half precision, statistics in float32: they cost $1/N$ of the row, and the backward
#   subtracts them from every element, so their error, relative to their size, lands on an answer that can be
#   much smaller. Load half, reduce and subtract in float32, round once on the store.
# - A tolerance for a backward must grow with the dtype's $u$ **and** the length of the reductions behind it,
#   against a float64 reference from the same rounded inputs. `assert_close`'s defaults follow the dtype alone:
#   they reject correct long float32 sums and accept short bfloat16 accumulations.
# - float16 gradients need loss scaling: multiply the loss by $S$, unscale in float32, and let $S$ follow the
#   overflow point — back off and skip the step on inf or NaN, grow after $K$ good steps. bfloat16 needs none.

"""The sanitizer's picture says what the report says: who touched each element, and where a race is."""

import matplotlib.pyplot as plt
import pytest
import torch
import triton
import triton.language as tl

from course.sanitizer import sanitize


@triton.jit
def _count_plain(E_ptr, C_ptr):
    t = tl.program_id(0)
    e = tl.load(E_ptr + t)
    tl.store(C_ptr + e, tl.load(C_ptr + e) + 1)  # read, add, store: programs with one expert race


@triton.jit
def _count_atomic(E_ptr, C_ptr):
    t = tl.program_id(0)
    tl.atomic_add(C_ptr + tl.load(E_ptr + t), 1)


@triton.jit
def _rows(X_ptr, OUT_ptr, n_cols, out_row_stride, BLOCK: tl.constexpr):
    """OUT[p * out_row_stride + c] += X[p, c]: own rows with out_row_stride = n_cols, one shared row with 0."""
    p = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    out = OUT_ptr + p * out_row_stride + cols
    tl.store(out, tl.load(out, mask=mask) + tl.load(X_ptr + p * n_cols + cols, mask=mask), mask=mask)


@triton.jit
def _locked(X_ptr, OUT_ptr, LOCK_ptr, N: tl.constexpr):
    cols = tl.arange(0, N)
    v = tl.load(X_ptr + tl.program_id(0) * N + cols)
    while tl.atomic_cas(LOCK_ptr, 0, 1) == 1:
        pass
    tl.store(OUT_ptr + cols, tl.load(OUT_ptr + cols) + v)
    tl.atomic_xchg(LOCK_ptr, 0)


@triton.jit
def _unmasked(X_ptr, Y_ptr, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(Y_ptr + o, tl.load(X_ptr + o))


EXPERTS = torch.tensor([2, 0, 2, 3, 2, 1, 0, 2])  # expert 2 four times, expert 0 twice (programs 1 and 6)


def _gids(fig, prefix):
    found = {}
    for artist in fig.axes[0].get_children():
        gid = artist.get_gid()
        if gid and gid.startswith(prefix):
            found[gid] = artist
    return found


def _title(fig):
    return fig.get_suptitle()


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_a_read_add_store_shows_red_where_programs_met():
    with sanitize() as report:
        _count_plain[(8,)](EXPERTS, torch.zeros(4, dtype=torch.int32))
    fig = report.plot("C_ptr")
    assert sorted(_gids(fig, "race:")) == ["race:0:0", "race:0:2"]  # experts 0 and 2, not 1 or 3
    assert all(a.get_edgecolor()[:3] == (1.0, 0.0, 0.0) for a in _gids(fig, "race:").values())
    labels = {g: a.get_text() for g, a in _gids(fig, "label:").items()}
    assert labels == {"label:0:0": "1,6", "label:0:1": "5", "label:0:2": "0,2,4,7", "label:0:3": "3"}
    assert "2 element(s) raced" in _title(fig)


def test_atomics_meet_without_red():
    with sanitize() as report:
        _count_atomic[(8,)](EXPERTS, torch.zeros(4, dtype=torch.int32))
    fig = report.plot("C_ptr")
    assert not _gids(fig, "race:")
    assert _gids(fig, "label:")["label:0:2"].get_text() == "0,2,4,7"  # they met, atomically
    assert "only through atomics: no race" in _title(fig)


def test_own_rows_are_one_colour_each_and_one_shared_row_is_red():
    x = torch.randn(3, 5)
    with sanitize() as report:
        _rows[(3,)](x, torch.zeros(3, 5), 5, 5, BLOCK=8)  # program p owns row p
        _rows[(3,)](x, torch.zeros(1, 5), 5, 0, BLOCK=8)  # every program adds into row 0
    own = report.plot("OUT_ptr", launch=0)
    assert not _gids(own, "race:")
    assert {g: a.get_text() for g, a in _gids(own, "label:").items()} == {
        f"label:{r}:{c}": str(r) for r in range(3) for c in range(5)}
    assert "at most one program: no race" in _title(own)
    shared = report.plot("OUT_ptr")
    assert sorted(_gids(shared, "race:")) == [f"race:0:{c}" for c in range(5)]
    assert {a.get_text() for a in _gids(shared, "label:").values()} == {"0,1,2"}


def test_a_read_only_tensor_is_pale_and_never_red():
    with sanitize() as report:
        _rows[(3,)](torch.randn(3, 5), torch.zeros(1, 5), 5, 0, BLOCK=8)
    fig = report.plot("X_ptr")
    assert not _gids(fig, "race:")
    assert "only read" in _title(fig)
    cell = _gids(fig, "cell:")["cell:1:0"]
    assert min(cell.get_facecolor()[:3]) > 0.5  # a pale shade of program 1's colour, not a solid one


def test_sharing_under_a_lock_is_dashed_not_red():
    with sanitize() as report:
        _locked[(4,)](torch.randn(4, 4), torch.zeros(4), torch.zeros(1, dtype=torch.int32), N=4)
    assert report.clean
    fig = report.plot("OUT_ptr")
    outlines = _gids(fig, "race:")
    assert len(outlines) == 4
    assert all(a.get_linestyle() == "--" and a.get_edgecolor()[:3] != (1.0, 0.0, 0.0) for a in outlines.values())
    assert "guarded by a lock" in _title(fig)


def test_an_access_out_of_bounds_is_named_in_the_title():
    with sanitize() as report:
        _unmasked[(3,)](torch.randn(10), torch.empty(10), B=4)  # the last program reads and writes 2 past the end
    assert any(f.cls == "out-of-bounds" for f in report.findings)
    title = _title(report.plot("X_ptr"))
    assert "out of bounds, next to X_ptr" in title


def test_a_large_tensor_is_an_image_with_its_races_in_red():
    x = torch.randn(40, 40)  # 1600 elements: one pixel each, not a square each
    with sanitize() as report:
        _rows[(40,)](x, torch.zeros(1, 40), 40, 0, BLOCK=64)  # 40 programs add into one row
        _rows[(40,)](x, torch.zeros(40, 40), 40, 40, BLOCK=64)  # each program its own row
    shared, own = report.plot("X_ptr", launch=0), report.plot("OUT_ptr")
    assert not _gids(own, "cell:") and not _gids(own, "race:")
    pixels = _gids(own, "image")["image"].get_array()
    assert pixels.shape == (40, 40, 3) and all(len({tuple(px) for px in row}) == 1 for row in pixels)  # a colour a row
    assert "at most one program" in _title(own)
    assert "only read" in _title(shared)  # X is only read, one row per program: pale rows, no red
    with sanitize() as report:
        _rows[(40,)](torch.randn(40, 32), torch.zeros(1, 1056), 32, 0, BLOCK=32)  # row 0 of a 1056-wide buffer
    pixels = _gids(report.plot("OUT_ptr"), "image")["image"].get_array()
    red = [tuple(px) == (1.0, 0.0, 0.0) for px in pixels[0]]
    assert red == [True] * 32 + [False] * 1024  # the 32 shared elements, and no other


def test_a_tensor_too_large_to_keep_is_refused_with_its_size():
    n = 130 * 130  # more elements than the sanitizer keeps for a picture
    with sanitize() as report:
        _rows[(1,)](torch.randn(4), torch.zeros(n), 4, 4, BLOCK=4)
    with pytest.raises(ValueError, match=f"OUT_ptr of _rows has {n} elements, more than the picture keeps"):
        report.plot("OUT_ptr")
    report.plot("X_ptr")  # the small argument of the same launch is still drawn


def test_a_wrong_tensor_name_lists_the_arguments():
    with sanitize() as report:
        _count_atomic[(8,)](EXPERTS, torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"one of \['C_ptr', 'E_ptr'\]; got 'COUNT'"):
        report.plot("COUNT")

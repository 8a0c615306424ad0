"""The parameter-reduction picture draws the grouping a LayerNorm backward kernel uses."""

import math

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from course.parameter_reduction import PROGRAM_COLORS, RESULT_COLOR, plot_parameter_reduction, program_rows


@pytest.mark.parametrize("n_rows, n_programs", [
    (7, 3),  # groups of 3, 3, 1: a ragged last program
    (1, 1),  # batch 1
    (8, 4),  # even groups
    (5, 4),  # groups of 2, 2, 1 and an idle program
    (13, 20),  # more programs than rows
])
def test_every_row_belongs_to_exactly_one_program_in_contiguous_groups(n_rows, n_programs):
    groups = program_rows(n_rows, n_programs)
    per = math.ceil(n_rows / n_programs)
    assert len(groups) == n_programs
    assert [r for g in groups for r in g] == list(range(n_rows))  # each row once, in order
    for p, g in enumerate(groups):  # what a kernel computes: first = p·per, last = min(first + per, n_rows)
        assert g == range(min(p * per, n_rows), min(p * per + per, n_rows))


def test_no_rows_or_no_programs_is_refused():
    with pytest.raises(ValueError, match="at least one row"):
        program_rows(0, 3)
    with pytest.raises(ValueError, match="at least one row"):
        program_rows(3, 0)


def test_the_picture_colours_each_row_by_its_program():
    n_rows, n_cols, n_programs = 7, 5, 3
    fig = plot_parameter_reduction(n_rows=n_rows, n_cols=n_cols, n_programs=n_programs)
    try:
        top, bottom = fig.axes
        groups = program_rows(n_rows, n_programs)
        for ax, buffer_rows in ((top, 1), (bottom, 0)):
            faces = [to_rgba(p.get_facecolor()) for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()]
            for p, rows in enumerate(groups):
                # its rows of x̄, plus (top) its own row of the partial buffer
                assert faces.count(to_rgba(PROGRAM_COLORS[p])) == (len(rows) + buffer_rows) * n_cols
            assert faces.count(to_rgba(RESULT_COLOR)) == n_cols  # γ̄, once
    finally:
        plt.close(fig)

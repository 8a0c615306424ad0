"""The seed of a submission's hidden inputs: drawn by the grader, recorded, replayable (docs/grading.md, "Seeds").

No torch here: the grading parent never imports it.
"""

from __future__ import annotations

import os

SEED_ENV = "AUTOGRADER_SEED"
SEED_BITS = 32  # short enough to read and retype; a submission is written before its seed is drawn


def draw() -> int:
    """A fresh seed for one submission's hidden inputs, from the OS."""
    return int.from_bytes(os.urandom(SEED_BITS // 8), "little")


def parse(text: str) -> int:
    """A seed as an instructor or AUTOGRADER_SEED writes it: an integer from 0 to 2**63 - 1; ValueError otherwise."""
    text = str(text).strip()
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"a seed is a non-negative integer, not {text!r}")
    value = int(text)
    if value >= 2**63:
        raise ValueError(f"a seed is at most 2**63 - 1, not {text}")
    return value


def parse_options(values: list[str]) -> tuple[int | None, dict[str, int]]:
    """``--seed`` values: ``N`` (the whole batch; at most one) and ``STUDENT=N`` (one student) -> (N, {student: N})."""
    batch: int | None = None
    per_student: dict[str, int] = {}
    for value in values:
        student, sep, seed = value.rpartition("=")
        if sep and not student:
            raise ValueError(f"--seed {value!r}: a student id before '=' (--seed alice=12345)")
        if not sep:
            if batch is not None:
                raise ValueError(f"--seed given twice for the whole batch ({batch} and {value})")
            batch = parse(value)
        elif student in per_student:
            raise ValueError(f"--seed given twice for {student!r}")
        else:
            per_student[student] = parse(seed)
    return batch, per_student

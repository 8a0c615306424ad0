"""The grading contract's words: the diagnosis classes, the failure a check raises, a named bug.

This module imports nothing heavy (no torch), so the grader loads it on its own, by path, without
running ``course/__init__`` (which picks a device): :func:`load` in ``autograder`` does.
A diagnosis crosses a process boundary as :meth:`GradingFailure.record`, a JSON object, never as text
to be read back.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

# The diagnosis vocabulary of the grading contract (docs/design.md). Tests outside this
# repository match on these names: extend, never rename.
CLASSES: dict[str, str] = {
    "not-implemented": "the stub still raises",
    "error": "the code raised an exception",
    "shape": "the gradient does not have the shape of its input",
    "transpose": "the result matches a transposed placement",
    "batch-reduction": "right at batch 1, wrong above it: a reduction over the batch axis is missing",
    "sign": "right up to sign",
    "scale": "right up to a constant factor",
    "broadcast-axis": "a row reduction broadcast along the wrong axis",
    "non-atomic-scatter": "right without repeated indices, wrong with them",
    "materialized-jacobian": "values right, but an N×N Jacobian was built",
    "saved-quadratic-tensor": "values right, but a T×T tensor was saved or allocated",
    "untiled": "values right, but a tensor computed from queries and keys spans more than a tile: a row or strip against every key",
    "materialized-logits": "values right, but a walk held more logits at once than its chunk (block): T×V, or several chunks",
    "dense-walk": "values right, but the kernel visited tiles its mask hides entirely: above the causal diagonal, or in another document",
    "half-accumulation": "right in float64 and float32, wrong in bf16/fp16: a statistic accumulated or held in half precision",
    "autograd-in-backward": "the hand-written backward called autograd",
    "race": "two programs of one launch touch an address, one with a plain store, with no atomic or lock between them",
    "out-of-bounds": "a kernel loaded or stored an address that is no element of any tensor argument",
    "non-finite": "NaN or inf in the result",
    "tampering": "the checking machinery was modified",
    "delegated-to-helper": "the answer came from a helper the course ships rather than the student's derivation",
    "delegated-to-library": "a library call (a log-sum-exp, logaddexp, softmax) did the step the exercise asks for",
    "wrong-values": "none of the above",
}

# Under the grader (its kernels run with RECORDS_ENV set), a failing check also shows its record as an output of
# this MIME type: the grader reads the class from there, as JSON, never from the text a student sees.
DIAGNOSIS_MIME = "application/vnd.backprop-for-kernel-writers.diagnosis+json"
RECORDS_ENV = "COURSE_DIAGNOSIS_RECORDS"


class GradingFailure(AssertionError):
    """A check failed; ``cls`` is one of :data:`CLASSES`."""

    generic = False  # True for a wrong-values that no specific bug explained
    hint = None  # the number of the notebook hint the failure points to, once ``graded`` added it

    def __init__(self, cls: str, sentence: str, where: str = "", topic: str | None = None):
        if cls not in CLASSES:
            raise ValueError(f"unknown diagnosis class {cls!r}; expected one of {sorted(CLASSES)}")
        self.cls = cls
        self.sentence = sentence
        self.where = where
        self.topic = topic  # a key of the exercise's hints more precise than the class, if any
        message = f"diagnosis: {cls} — {sentence}"
        if where:
            message += "\n" + where
        super().__init__(message)

    def record(self) -> dict[str, Any]:
        """The failure as JSON-ready data: what crosses a process boundary."""
        return {"cls": self.cls, "sentence": self.sentence, "where": self.where, "topic": self.topic,
                "hint": self.hint}


def publish(failure: GradingFailure) -> None:
    """Show ``failure``'s record as typed JSON in the notebook, when the grader asked for records (nothing otherwise)."""
    ipython = sys.modules.get("IPython")  # only a notebook's kernel shows outputs; elsewhere display would print
    if not os.environ.get(RECORDS_ENV) or ipython is None or ipython.get_ipython() is None:
        return
    from IPython.display import display

    display({DIAGNOSIS_MIME: failure.record()}, raw=True)


def read_record(data: object) -> dict[str, Any] | None:
    """A diagnosis record from untrusted JSON data: its known fields, typed, or None when it is not one.

    Only a class of :data:`CLASSES` makes a record; text fields are cut to 500 characters.
    """
    if not isinstance(data, dict) or data.get("cls") not in CLASSES:
        return None
    text = lambda key: data[key][:500] if isinstance(data.get(key), str) else ""  # noqa: E731
    hint = data.get("hint")
    return {"cls": data["cls"], "sentence": text("sentence"), "where": text("where"),
            "topic": data.get("topic") if isinstance(data.get("topic"), str) else None,
            "hint": hint if isinstance(hint, int) and not isinstance(hint, bool) else None}


@dataclass(frozen=True)
class Alternative:
    """What an output would be under one specific bug, and how to name that bug."""

    cls: str
    sentence: str
    value: Any  # a torch.Tensor: the output under that bug
    topic: str | None = None  # the hints key of the hint about this bug, when the class alone does not say

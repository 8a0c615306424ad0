"""Checks for notebook attention (placeholder: being written)."""


def ManualAttention(fn):  # noqa: N802 — named after the exercise it checks
    raise NotImplementedError


def manual_attention(fn):
    raise NotImplementedError


def attention_forward_lse(fn):
    raise NotImplementedError


def attention_backward_recompute(fn):
    raise NotImplementedError


def RecomputeAttention(fn):  # noqa: N802 — named after the exercise it checks
    raise NotImplementedError


def recompute_attention(fn):
    raise NotImplementedError


def attention_delta_kernel(fn):
    raise NotImplementedError

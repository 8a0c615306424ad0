import torch

from course.gradcheck import central_difference_grad, check_vjp, numerical_vjp, verdict


def test_central_difference_matches_a_known_gradient():
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4)
    grad = central_difference_grad(lambda t: (t.sin() * t).sum(), x)
    assert grad.shape == x.shape
    assert torch.allclose(grad, x.cos() * x + x.sin(), atol=1e-9)


def test_numerical_vjp_of_a_matmul():
    g = torch.Generator().manual_seed(1)
    x, w, dy = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((3, 4), (4, 2), (3, 2)))
    dx, dw = numerical_vjp(lambda a, b: a @ b, (x, w), dy)
    assert torch.allclose(dx, dy @ w.T, atol=1e-8) and torch.allclose(dw, x.T @ dy, atol=1e-8)


def test_check_vjp_prints_a_verdict(capsys):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 4, generator=g, dtype=torch.float64)
    w = torch.randn(4, 2, generator=g, dtype=torch.float64)
    assert check_vjp(lambda a, b: a @ b, lambda dy, a, b: (dy @ b.T, a.T @ dy), x, w, names=("x", "w"))
    assert "✓ x" in capsys.readouterr().out
    assert not check_vjp(lambda a, b: a @ b, lambda dy, a, b: (dy @ b.T, -(a.T @ dy)), x, w, names=("x", "w"))
    assert "diagnosis: sign" in capsys.readouterr().out


def test_verdict_thresholds():
    assert verdict(1e-9) == "excellent" and verdict(1e-5).startswith("suspicious") and verdict(1e-2) == "a bug"


def test_integer_inputs_pass_through_unperturbed():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    idx = torch.tensor([[0, 5], [2, 2], [1, 0], [3, 4]])
    dy = torch.randn(4, 2, generator=g, dtype=torch.float64)
    dx, didx = numerical_vjp(lambda a, i: a.gather(-1, i), (x, idx), dy)
    assert didx is None
    assert torch.allclose(dx, torch.zeros_like(x).scatter_add_(-1, idx, dy), atol=1e-8)


def test_transposed_inputs_work_and_are_left_alone(capsys):
    """A transposed x is a view with swapped strides: flat views of a plain clone of it fail."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64).T  # (3, 4), not contiguous
    w = torch.randn(2, 4, generator=g, dtype=torch.float64).T  # (4, 2), not contiguous
    dy = torch.randn(3, 2, generator=g, dtype=torch.float64)
    before = x.clone()
    grad = central_difference_grad(lambda t: (t.sin() * t).sum(), x)
    assert grad.shape == x.shape and torch.allclose(grad, x.cos() * x + x.sin(), atol=1e-9)
    assert torch.equal(x, before)
    dx, dw = numerical_vjp(lambda a, b: a @ b, (x, w), dy)
    assert torch.allclose(dx, dy @ w.T, atol=1e-8) and torch.allclose(dw, x.T @ dy, atol=1e-8)
    assert check_vjp(lambda a, b: a @ b, lambda dy, a, b: (dy @ b.T, a.T @ dy), x, w, names=("x", "w"))
    assert "✓ w" in capsys.readouterr().out

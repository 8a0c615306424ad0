"""course.autograd_graph finds the custom Functions a result's graph runs through, and only those."""

import torch

from course.autograd_graph import custom_functions, runs_through, saved_for_backward


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, dy):
        return 2 * dy


class Triple(Double):
    @staticmethod
    def forward(ctx, x):
        return 3 * x


def test_a_function_deep_in_the_graph_is_found():
    x = torch.ones(3, requires_grad=True)
    y = (Double.apply(x.exp()) + 1).sin().sum()
    assert custom_functions(y) == [Double]
    assert runs_through(y) and runs_through(y, Double)


def test_plain_ops_run_through_none():
    x = torch.ones(3, requires_grad=True)
    y = (2 * x).softmax(-1)
    assert custom_functions(y) == [] and not runs_through(y)


def test_a_subclass_counts_for_its_base_but_not_the_reverse():
    x = torch.ones(3, requires_grad=True)
    y = Triple.apply(x)
    assert runs_through(y, Double) and runs_through(y, Triple)
    assert not runs_through(Double.apply(x), Triple)


def test_several_outputs_list_each_class_once():
    x = torch.ones(3, requires_grad=True)
    a, b = Double.apply(x), Triple.apply(Double.apply(x))
    assert custom_functions(a, b) == [Double, Triple] or custom_functions(a, b) == [Triple, Double]
    assert len(custom_functions(a, b)) == 2


def test_a_tensor_without_a_graph_runs_through_nothing():
    assert custom_functions(torch.ones(2)) == [] and not runs_through(torch.ones(2))


def test_what_a_forward_saves_is_collected_by_reference():
    x = torch.ones(3, requires_grad=True)
    with saved_for_backward() as saved:
        y = (x * x).exp()
    assert any(t is x for t in saved), "mul saves its inputs"
    assert any(t.data_ptr() == y.data_ptr() for t in saved), "exp saves its output"
    with saved_for_backward() as none:
        torch.ones(3).exp()
    assert none == [], "nothing is saved without a graph"

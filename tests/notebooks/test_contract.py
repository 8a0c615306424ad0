"""The assignments keep the grading contract of docs/design.md: names, grading cells, and clean JSON."""

import ast
import json
import re

import pytest

from autograder.nbgrader_cli import ROOT

# docs/design.md, the grading contract: the functions students write, per assignment. Tests outside this repo
# call these names; renaming one breaks them. Written out here, not read from course.registry, so that a change to
# the registry cannot move the contract with it (tests/course/test_registry.py holds the registry to it).
CONTRACT = {
    "00_vjp_contract": ["numerical_gradient", "relative_error", "linear_softmax_ce_backward", "sigmoid_backward"],
    "01_matmul_from_shapes": [
        "linear_backward", "linear_bias_backward", "reduce_to_shape", "name_the_bug", "batched_matmul_backward",
    ],
    "02_softmax_collapse": [
        "softmax_jacobian", "softmax_backward", "shifted_softmax_vjp", "softmax_cross_entropy_backward",
        "log_softmax_backward",
    ],
    "03_triton_fused_softmax": ["softmax_fwd_kernel", "softmax_bwd_kernel", "TritonSoftmax", "triton_softmax"],
    "04_layernorm": ["layernorm_forward", "layernorm_backward", "rmsnorm_backward", "TritonLayerNorm", "triton_layernorm"],
    "05_attention_recompute": [
        "ManualAttention", "manual_attention", "attention_forward_lse", "attention_backward_recompute",
        "RecomputeAttention", "recompute_attention", "attention_delta_kernel", "flash_fwd_kernel",
        "flash_bwd_dkdv_kernel",
    ],
    "06_topk_routing": [
        "topk_backward", "embedding_backward", "relu_backward", "maxpool1d_backward", "dropout_backward",
        "moe_gate_backward", "scatter_add_kernel",
    ],
    "07_fused_linear_cross_entropy": ["linear_ce_backward", "chunked_linear_ce", "vocab_blocked_lse", "ce_grad_kernel"],
    "08_mixed_precision_backward": [
        "softmax_backward_mixed", "layernorm_backward_mixed", "grad_tolerance", "DynamicLossScaler",
        "softmax_bwd_mixed_kernel",
    ],
    "09_matmul_backward_triton": [
        "linear_dx_kernel", "linear_dw_splitk_kernel", "linear_dw_atomic_kernel", "TritonLinear",
    ],
    "10_attention_as_trained": [
        "causal_fwd_kernel", "causal_bwd_dq_kernel", "causal_bwd_dkdv_kernel", "varlen_fwd_kernel",
    ],
    "11_mlp_and_rope": ["gelu_backward", "swiglu_backward", "swiglu_bwd_kernel", "rope_backward", "rope_kernel"],
}
PRESENT = sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())


def cells(kind: str, name: str) -> list[dict]:
    return json.loads((ROOT / kind / name / f"{name}.ipynb").read_text())["cells"]


def nbgrader_meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def test_every_contract_assignment_is_present():
    assert set(CONTRACT) <= set(PRESENT)


@pytest.mark.parametrize("name", PRESENT)
def test_grading_cells_follow_the_contract(name):
    solutions = {nbgrader_meta(c)["grade_id"]: c for c in cells("source", name) if nbgrader_meta(c).get("solution")}
    tests = {nbgrader_meta(c)["grade_id"]: c for c in cells("source", name) if nbgrader_meta(c).get("grade")}
    assert list(solutions) == CONTRACT[name], "one solution cell per exercise, named after its function, in order"
    assert list(tests) == [f"test_{f}" for f in CONTRACT[name]]
    for fn, cell in solutions.items():
        tree = ast.parse("".join(cell["source"]))
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert fn in defined, f"solution cell {fn} must define {fn}"
    for grade_id, cell in tests.items():
        fn = grade_id.removeprefix("test_")
        source = "".join(cell["source"])
        meta = nbgrader_meta(cell)
        assert meta["locked"] and meta["points"] > 0
        assert source.startswith('"""'), "a test cell opens with a docstring saying what it checks"
        assert f"course.selfcheck.{fn}({fn})" in source, "a visible check runs before the hidden block"
        hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*)### END HIDDEN TESTS", source, re.S)
        assert hidden and f"autograder.check.{fn}({fn})" in hidden.group(1)


@pytest.mark.parametrize("kind", ["source", "release"])
@pytest.mark.parametrize("name", PRESENT)
def test_notebook_json_is_clean(kind, name):
    nb = json.loads((ROOT / kind / name / f"{name}.ipynb").read_text())
    ids = [c["id"] for c in nb["cells"]]
    assert len(ids) == len(set(ids)), "cell ids are unique"
    first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert "".join(first_code["source"]).startswith("import course"), "`import course` is the first code"
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        checked = "nbval-check-output" in cell.get("metadata", {}).get("tags", [])
        if kind == "release" or not checked:
            assert cell["execution_count"] is None, f"execution count left in cell {cell['id']}"
            assert cell["outputs"] == [], f"stray output in cell {cell['id']}"
        else:
            assert cell["outputs"], f"cell {cell['id']} is compared by nbval but has no stored output"
            assert cell["execution_count"] == 1, "nbval needs a count on a stored output; the build writes 1"


@pytest.mark.parametrize("name", PRESENT)
def test_release_holds_no_solution_and_no_hidden_test(name):
    text = (ROOT / "release" / name / f"{name}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "autograder", "import kernels", "from kernels"):
        assert marker not in text
    assert text.count("raise course.todo()") >= len(CONTRACT[name]), "every exercise starts as a stub"

"""nbgrader configuration: this repository's root is the course directory."""

c = get_config()  # noqa: F821 — provided by nbgrader when it loads this file

c.CourseDirectory.course_id = "backprop-for-kernel-writers"
c.CourseDirectory.root = "."
# One assignment per notebook; the folder under source/ and the notebook share the name. Written out (this file
# loads without importing torch); tests/course/test_registry.py holds it to course.registry's notebooks.
c.CourseDirectory.db_assignments = [
    {"name": "00_vjp_contract"},
    {"name": "01_matmul_from_shapes"},
    {"name": "02_softmax_collapse"},
    {"name": "03_triton_fused_softmax"},
    {"name": "04_layernorm"},
    {"name": "05_attention_recompute"},
    {"name": "06_topk_routing"},
    {"name": "07_fused_linear_cross_entropy"},
    {"name": "08_mixed_precision_backward"},
    {"name": "09_matmul_backward_triton"},
    {"name": "10_attention_as_trained"},
    {"name": "11_mlp_and_rope"},
]
# Python caches and checkpoints never belong in a release or a submission.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]

# The stub names the function still to write, in words a student can act on.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise course.todo()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Per-cell limit while autograding. Every notebook runs top to bottom on a CPU in
# well under two minutes; a cell that needs more is stuck, and gets a zero with a reason.
c.Execute.timeout = 120
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:"]

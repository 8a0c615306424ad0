# Hostile: nbgrader metadata of unexpected types, valid for nbformat: a grade_id that is a JSON list (it stopped the class: unhashable type), one that is a dict, metadata that is a number, points that are a list. Cells with such metadata run as plain cells; the instructor's test cells are graded as always.
# assignment: 01_matmul_from_shapes
# expect: * full
# %% metadata:test_linear_backward
{"grade": true, "grade_id": ["test_linear_backward"], "locked": true, "points": 3, "schema_version": 3, "solution": false}
# %% metadata:linear_bias_backward
7
# %% metadata:test_reduce_to_shape
{"grade": true, "grade_id": {"id": "test_reduce_to_shape"}, "locked": true, "points": 2, "schema_version": 3, "solution": false}
# %% metadata:name_the_bug
{"grade": "yes", "grade_id": "name_the_bug", "locked": [], "points": [1], "solution": "true"}

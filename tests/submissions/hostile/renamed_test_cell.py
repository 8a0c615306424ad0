# Hostile: right answers, a test cell renamed, another worth 100 points, and an extra graded cell worth 100 (nbgrader failed with a KeyError: 0/11 "grading failed"). Test cells and their points are the instructor's: the renamed cell is put back and graded, the extra one counts for nothing.
# assignment: 01_matmul_from_shapes
# expect: * full
# %% metadata:test_linear_backward
{"grade": true, "grade_id": "test_linear_backward_mine", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# %% metadata:test_reduce_to_shape
{"grade": true, "grade_id": "test_reduce_to_shape", "locked": true, "points": 100, "schema_version": 3, "solution": false}
# %% cell-after:test_batched_matmul_backward
# nbgrader: {"grade": true, "grade_id": "bonus", "locked": true, "points": 100, "schema_version": 3, "solution": false}
print("all tests passed")

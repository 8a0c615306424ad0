# Hostile: a student's zip holding two notebooks, neither named after the assignment (nbgrader's zip_collect stopped the class: "Duplicate submission file"). Which one to grade is not guessed.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: first.ipynb
# member: second.ipynb
# expect: * zero - ambiguous submission

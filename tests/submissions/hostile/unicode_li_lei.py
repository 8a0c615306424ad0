# Hostile: a student folder named 李雷 beside one named 韩梅梅: both once became the id "student", and one's 7/7 was replaced by the other's grade. Unicode ids are kept.
# assignment: 01_matmul_from_shapes
# name: 李雷
# expect: * full

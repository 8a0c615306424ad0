# Hostile: a student's zip with the assignment's notebook beside a second notebook and a checkpoint (nbgrader's zip_collect stopped the class). The notebook named after the assignment is graded, as in a folder.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: @@ASSIGNMENT@@.ipynb
# member: scratch.ipynb text {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
# member: .ipynb_checkpoints/@@ASSIGNMENT@@-checkpoint.ipynb text {}
# expect: * full

"""Hidden grading for Backprop for Kernel Writers, and the class grader (instructor side; never given to
students): docs/design.md, "Packages", and docs/grading.md.
"""

"""Hidden grading for Backprop for Kernel Writers (instructor side; never given to students).

``autograder.check.<function>(student_fn)`` is what each notebook's hidden test
block calls. Checks build random float64 inputs from a seed the student never sees,
compare against references kept here, and raise ``AssertionError`` whose first line
is ``diagnosis: <class> — <sentence>`` (see ``course.diagnose``).
"""

"""``python -m autograder.nbrunner ARGS``: the ``nbgrader`` command, four seconds faster to start.

nbformat validates notebooks with jsonschema, which imports ``rfc3987_syntax`` when it is
installed; that module builds a Lark grammar at import time (about 4 s of CPU on the
course's machines) for URI formats no notebook schema uses. Every nbgrader process the
grader starts — one per submission — would pay it. Blocking the import leaves those
format checks out, and nothing else.
"""

import sys


def fast_imports() -> None:
    """Keep jsonschema from loading rfc3987_syntax (call before anything imports nbformat)."""
    sys.modules.setdefault("rfc3987_syntax", None)


if __name__ == "__main__":
    fast_imports()
    from nbgrader.apps.nbgraderapp import main

    sys.exit(main())

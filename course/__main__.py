"""``python -m course COMMAND``: what a student runs outside a notebook.

validate NOTEBOOK [NOTEBOOK ...]   run each notebook in a fresh kernel and print which graded
                                   checks pass (course/validate.py)
"""

from __future__ import annotations

import sys

COMMANDS = ("validate",)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "validate":
        from .validate import main as validate

        return validate(rest)
    print(f"python -m course: unknown command {command!r}; expected one of: {', '.join(COMMANDS)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""What one Tab press runs: `python -m jobtpu.tab SHELL WORD...` (the script `jobtpu completion`
prints calls it) prints the words that may follow the words typed, one a line
(docs/reference/python.md §11.4)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    from jobtpu.cli import build_parser, command_word
    from jobtpu.commands.completion import SHELLS, complete, home_values

    if not argv or argv[0] not in SHELLS:
        return 2
    typed = list(argv[1:])
    # The words before the one being completed name the command (or not yet): its parser alone then.
    offered = complete(typed, build_parser(command_word(typed[:-1])), home_values)
    if offered:
        sys.stdout.write("\n".join(offered) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

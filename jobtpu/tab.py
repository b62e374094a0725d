"""What one Tab press runs: `python -m jobtpu.tab SHELL WORD...` (the script `jobtpu completion`
prints calls it) prints the words that may follow the words typed, one a line, zsh's and fish's
with a description after a tab where one is known; it exits 3 when nothing fits, not even a file
name (docs/reference/python.md §11.4)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

NO_FILES = 3  # the exit status that tells the shell's script: nothing here, and no file names either


def main(argv: Sequence[str]) -> int:
    from jobtpu.cli import build_parser, command_word
    from jobtpu.commands.completion import SHELLS, lines, offer

    if not argv or argv[0] not in SHELLS:
        return 2
    typed = list(argv[1:])
    # The words before the one being completed name the command (or not yet): its parser alone then.
    offered = offer(typed, build_parser(command_word(typed[:-1])), _home_values)
    shown = lines(offered, argv[0])
    if shown:
        sys.stdout.write("\n".join(shown) + "\n")
    return 0 if offered.files or offered.words else NO_FILES


def _home_values(kind: str, home: str) -> list[str]:
    """The home's words, its module loaded only when asked (`jobtpu ki<Tab>` reads no home)."""
    from jobtpu.commands.home_words import home_values

    return home_values(kind, home)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

""""Did you mean": the nearest of a command's names, options or choices to a mistyped word, and the
verbs of the tool teams used before jobtpu mapped to jobtpu's own (docs/reference/commands.md §2.1). Pure.

argparse suggests only from Python 3.14 on (`suggest_on_error`); difflib does the same here."""

from __future__ import annotations

from collections.abc import Iterable

# The old tool's verbs (`tpu monitor`, `tpu add-user`, ...) whose jobtpu command has another name: a
# closeness score would not find `watch` from `monitor`.
OLD_VERBS = {
    "monitor": "watch",
    "add-user": "user add",
    "set-cur": "dir set",
    "clear": "clean",
    "check-rules": "rules",
    "ack": "manage",  # no monitor to wake: a pass, now, does what the old one's next round would
}


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word` when one is close enough to be what was meant, else None."""
    from difflib import get_close_matches  # here: only a mistake pays for it

    found = get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def command_for(word: str, commands: Iterable[str]) -> str | None:
    """What to type for a command word jobtpu does not know: `jobtpu watch` for `monitor`, `jobtpu
    status` for `stauts`; None when nothing is near."""
    if word in OLD_VERBS:
        return f"jobtpu {OLD_VERBS[word]}"
    close = nearest(word, commands)
    return f"jobtpu {close}" if close else None


def option_for(word: str, options: Iterable[str]) -> str | None:
    """The long option meant by a mistyped one (`--stauts` or `--stauts=x` → `--status`), compared
    without the dashes every option shares (they would make any two options look alike)."""
    name = word.partition("=")[0].lstrip("-")
    longs = {o.lstrip("-"): o for o in options if o.startswith("--")}
    close = nearest(name, longs)
    return longs[close] if close else None

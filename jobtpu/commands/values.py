"""Python values as the command line's: what the Python API's keywords and `jobtpu serve`'s query
strings give, checked by the command line's own argument types, with the same complaints
(docs/reference/python.md). Below both front ends, so neither imports the other for it
(docs/design.md §5.1)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from jobtpu.errors import UsageError

if TYPE_CHECKING:
    from jobtpu.commands.select import Selection

_T = TypeVar("_T")


def _same(value: object) -> object:
    return value


def checked(parse: Callable[[str], _T], value: object, option: str) -> _T:
    """A value checked by the command line's own argument type: its complaint is a UsageError."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UsageError(f"argument {option}: {value!r} is not a whole number", hint=f"give {option} as an int")
    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"argument {option}: {e}", hint="docs/reference/python.md lists what each takes") from None


def words(values: Iterable[object], what: str) -> list[str]:
    if isinstance(values, str | bytes):  # `tags="a"` would be the tags "a" one letter each
        raise UsageError(f"{what}: give a list of strings, not the string {values!r}", hint=f"like {what}=[{values!r}]")
    return [str(v) for v in values]


def ids(jobs: Iterable[object], id_of: Callable[[object], object] = _same) -> list[str]:
    """Job ids as the command line's words; `id_of` takes a caller's handle (the API's Job) to its id."""
    from jobtpu.commands import args

    return [str(checked(args.job_id, id_of(j), "ID")) for j in as_list(jobs, "ids")]


def as_list(values: Iterable[_T], what: str) -> list[_T]:
    if isinstance(values, str | bytes | int):
        raise UsageError(f"{what}: give a list, not {values!r}", hint=f"like {what}=[{values!r}]")
    return list(values)


def selection(given_ids: Iterable[object] = (), tags: Iterable[str] = (), names: Iterable[str] = (),
              statuses: Iterable[str] = (), sweeps: Iterable[object] = (), user: str | None = None,
              all_users: bool = False, history: bool = False,
              id_of: Callable[[object], object] = _same) -> Selection:
    """The selection `status` makes of the same selectors (docs/reference/commands.md §2.7)."""
    from jobtpu.commands.select import Selection, status_words

    if user is not None and all_users:
        raise UsageError("argument --all-users: not allowed with argument --user", hint="give one of them")
    chosen = [w for s in words(statuses, "statuses") for w in checked(status_words, s, "--status")]
    return Selection(ids=tuple(int(i) for i in ids(given_ids, id_of)),
                     tags=tuple(words(tags, "tags")), names=tuple(words(names, "names")), statuses=tuple(chosen),
                     sweeps=tuple(int(i) for i in ids(sweeps, id_of)), user=user, all_users=all_users,
                     history=history)

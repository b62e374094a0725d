"""The command shapes of the tool teams used before jobtpu, as jobtpu's own (docs/reference/commands.md
§2.1, §2.2.10): its verbs that mean what a jobtpu command means (`rel`, `describe`, `find`, `check`, `ls`,
`queue`), its `-p`/`-n`/`-auto` flags, `kill w=43`, and the machine and user a run names as bare words.
Pure: the words in, the words jobtpu runs out, or one line saying what to type.

Two steps, because only the second needs the home: `rewrite` turns the whole command line into
jobtpu's before it is parsed (so every parse of it, a member's relayed act included, sees the same
words); `place_bare_words` decides, at submit, what each bare word among a run's overrides names."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping

from jobtpu.errors import JobtpuError

# An old verb → the jobtpu command it is, and what its bare words become in turn: "" keeps the word
# where it is (a positional argument), an option puts it after that option. Words past these stay.
ALIASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "rel": (("sheet", "release"), ("", "--user")),  # `tpu rel v3-32-p1 xibo`: only if xibo holds it
    "describe": (("tpu", "describe"), ("",)),
    "find": (("sheet", "find"), ()),  # its TYPE words and -p/-n are sheet find's own
    "check": (("status",), ("--user",)),  # `tpu check xibo`: xibo's jobs
    "ls": (("dir", "ls"), ("--user",)),  # `tpu ls xibo`: xibo's working directories
    "queue": (("submit",), ()),  # queued until a machine that fits is free: what submit does
}

# `tpu run … -p`: the old tool's flags for which TPUs a run may take, as requests (docs/reference/
# requests-and-rules.md §6.1). `-auto` (pick any free TPU of the type) is what a dispatch always does.
RUN_FLAGS: dict[str, tuple[str, ...]] = {"-p": ("--req", "preemptible"), "-n": ("--req", "on-demand"), "-auto": ()}
RUNS = frozenset({"run", "submit"})

# `tpu kill w=43`, `-w=43`, `window=43`: the old tool's window number, where jobtpu takes the job's id.
_WINDOW = re.compile(r"-{0,2}(?:w|window)=(\d+)")

TakesValue = Callable[[tuple[str, ...]], Collection[str]]


def rewrite(words: list[str], takes_value: TakesValue) -> list[str]:
    """The command line (global options first) in jobtpu's shapes; words that are jobtpu's already
    come back as they are, so rewriting twice changes nothing. `takes_value(command)` names the
    options of that command (`("sheet", "release")`) that take the next word as their value."""
    at = _command_at(words)
    if at is None:
        return list(words)
    head, verb, rest = words[:at], words[at], words[at + 1:]
    command: tuple[str, ...] = (verb,)
    if verb in ALIASES:
        command, slots = ALIASES[verb]
        rest = _fill_slots(rest, slots, takes_value(command))
    if command[0] in RUNS:
        rest = _run_flags(rest, takes_value(command))
    elif command[0] == "kill":
        rest = _kill_words(rest, takes_value(command))
    return [*head, *command, *rest]


def _command_at(words: list[str]) -> int | None:
    """Where the command word is, past the global options (`--home DIR`)."""
    i = 0
    while i < len(words):
        if words[i] == "--home":
            i += 2
        elif words[i].startswith("-"):
            if words[i] == "--":
                return None
            i += 1
        else:
            return i
    return None


def _positionals(words: list[str], takes_value: Collection[str]) -> list[int]:
    """The indexes of the words that are no option and no option's value, up to a `--`."""
    found: list[int] = []
    i = 0
    while i < len(words) and words[i] != "--":
        if words[i] in takes_value:
            i += 2
            continue
        if not words[i].startswith("-") or words[i] == "-":
            found.append(i)
        i += 1
    return found


def _fill_slots(words: list[str], slots: tuple[str, ...], takes_value: Collection[str]) -> list[str]:
    out = list(words)
    for index, slot in reversed(list(zip(_positionals(words, takes_value), slots, strict=False))):
        if slot:
            out[index:index + 1] = [slot, words[index]]
    return out


def _run_flags(words: list[str], takes_value: Collection[str]) -> list[str]:
    """`-p`, `-n`, `-auto` among run's or submit's words → the requests they meant, put first: the
    old tool took them anywhere (`run v3-32-p1 -p xibo`), and argparse takes no bare word after an
    option once it has taken some."""
    first: list[str] = []
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            out += words[i:]
            break
        if word in takes_value and i + 1 < len(words):  # `--on-resume -p` keeps its value
            out += words[i:i + 2]
            i += 2
            continue
        if word in RUN_FLAGS:
            first += RUN_FLAGS[word]
        else:
            out.append(word)
        i += 1
    return first + out


def _kill_words(words: list[str], takes_value: Collection[str]) -> list[str]:
    """`kill w=43 xibo` → `kill 43 --user xibo`: the window's number is the job's id, and a user's
    name beside an id keeps the act to that user's jobs (alone, it would select all of them: left
    for kill to refuse as no id)."""
    out = list(words)
    i = 0
    while i < len(out) and out[i] != "--":
        if out[i] in takes_value:
            i += 2
            continue
        window = _WINDOW.fullmatch(out[i])
        if window:
            out[i] = window[1]
        i += 1
    plain = _positionals(out, takes_value)
    if any(out[i].isdigit() for i in plain):
        for index in reversed(plain):
            if not out[index].isdigit() and "=" not in out[index]:
                out[index:index + 1] = ["--user", out[index]]
    return out


# ---- the bare words of a run, at submit --------------------------------------------------------------

def place_bare_words(words: list[str], machines: Mapping[str, str], users: Collection[str],
                     machine: str | None = None, user: str | None = None) -> tuple[str | None, str | None, list[str]]:
    """`run v3-32-p1 xibo lr=0.01`: among a run's override words, a word without `=` names a machine
    (a key of `machines`: a name, alias or TPU node → the machine's name) or a user (in `users`); it
    becomes the run's machine or user as typed, as --machine or --user would give it. Returns
    (machine, user, the overrides left). A word that is both, neither, or a second machine or user
    other than the one already given is one line."""
    rest: list[str] = []
    for word in words:
        if "=" in word:
            rest.append(word)
            continue
        is_machine, is_user = word in machines, word in users
        if is_machine and is_user:
            raise JobtpuError(f"{word!r} is both a machine and a user of this home",
                              hint=f"say which: --machine {word} or --user {word}")
        if is_machine:
            if machine is not None and machines.get(machine, machine) != machines[word]:
                raise JobtpuError(f"two machines given, {machine!r} and {word!r}", hint="a job runs on one "
                                  "machine: keep one, or ask for any machine of a type with --req (like --req v3-32)")
            machine = machine or word
        elif is_user:
            if user is not None and user != word:
                raise JobtpuError(f"two users given, {user!r} and {word!r}", hint="a job is one user's: keep one")
            user = word
        else:
            raise _neither(word, [*machines, *users])
    return machine, user, rest


def _neither(word: str, known: list[str]) -> JobtpuError:
    from jobtpu.suggest import nearest

    message = f"{word!r} is not a KEY=VALUE config override, nor a machine or a user of this home"
    if word.isdigit():  # `tpu run v3-32-p1 xibo 2`: the old tool's working directory 2
        return JobtpuError(message, hint=f"working directory {word} is --dir {word}; overrides look like lr=0.01")
    if _is_request(word):
        return JobtpuError(message, hint=f"to run on any free machine of that type, ask for it: --req {word}")
    close = nearest(word, known)
    if close is not None:
        return JobtpuError(f"{message}: did you mean {close!r}?",
                           hint="`jobtpu machines` lists the machines, `jobtpu user ls` the users")
    return JobtpuError(message, hint="`jobtpu machines` lists the machines, `jobtpu user ls` the users; "
                       "overrides look like lr=0.01")


def _is_request(word: str) -> bool:
    """Whether `word` is a --req token (`v3-32`, `v3+`, `v2-32,v3-32`, `preemptible`): the old tool
    took a TPU type where jobtpu takes a request."""
    from jobtpu.decide.fit import parse_request

    try:
        parse_request([word])
    except JobtpuError:
        return False
    return True

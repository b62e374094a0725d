"""`jobtpu completion bash|zsh|fish`: the script that makes Tab complete jobtpu in that shell
(docs/reference/python.md §11.4). The script hands the words typed so far to `python -m jobtpu.tab
SHELL WORD...`, which asks `complete` here: it walks the command line's own parser for commands,
options and choices, and reads the home for the values only it knows: job ids, machine names and
aliases, request tokens, config keys, alias names and sweep ids (state.json at most once)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.home.layout import Home

SHELLS = ("bash", "zsh", "fish")
ACTIVE = ("queued", "launching", "running", "killing")

# The script each shell loads; PY is this jobtpu's interpreter (as `cron install` writes its path:
# the shell's PATH may hold another jobtpu, or none), `-P` keeps the working folder off its path.
_SCRIPTS = {
    "bash": """_jobtpu_complete() {
    local IFS=$'\\n'
    # shellcheck disable=SC2207
    COMPREPLY=($(PY -P -m jobtpu.tab bash "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o nosort -o default -F _jobtpu_complete jobtpu
""",
    "zsh": """_jobtpu_complete() {
    local -a found
    found=("${(@f)$(PY -P -m jobtpu.tab zsh "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    compadd -V jobtpu -- "${(@)found:#}"
}
compdef _jobtpu_complete jobtpu
""",
    "fish": """function __jobtpu_complete
    set -l typed (commandline -opc) (commandline -ct)
    PY -P -m jobtpu.tab fish $typed[2..-1] 2>/dev/null
end
complete -c jobtpu -f -k -a '(__jobtpu_complete)'
""",
}


def script(shell: str) -> str:
    """The shell's script; refused (one line) when the interpreter's path holds a control character,
    which a shell's quoting carries into a line the shell parses (and fish reads `\\` in quotes)."""
    from jobtpu.render.text import refuse_control

    python = refuse_control(sys.executable, "this jobtpu's interpreter", f"a {shell} completion script",
                            "install jobtpu under a path of printable characters and run its `jobtpu completion`")
    return _SCRIPTS[shell].replace("PY", shlex.quote(python))


def completion(shell: str) -> int:
    sys.stdout.write(script(shell))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "completion")
    p.add_argument("shell", choices=SHELLS, help="the shell: bash, zsh or fish")
    p.set_defaults(func=lambda home, a: completion(a.shell))


# ---- what Tab offers ----------------------------------------------------------------------------------

def complete(words: Sequence[str], parser: argparse.ArgumentParser,
             values: Callable[[str, str], list[str]]) -> list[str]:
    """The words that may follow `words[:-1]` and begin with `words[-1]` (the one being typed), by
    the parser: its commands, options and choices; `values(kind, home)` gives the home's own words
    (ids, machines, req, config, aliases, sweeps) for the argument that takes them."""
    typed = _joined(list(words) or [""])
    current, before = typed[-1], typed[:-1]
    home, command, action, seen = "", parser, None, 0
    i = 0
    while i < len(before):
        word = before[i]
        option = _option(command, word.partition("=")[0]) if word.startswith("-") and word != "-" else None
        if option is not None:
            takes = option.nargs != 0 and "=" not in word
            if option.dest == "home":
                home = before[i + 1] if takes and i + 1 < len(before) else word.partition("=")[2]
            action = option if takes and i + 1 == len(before) else None
            i += 2 if takes else 1
            continue
        sub = _subcommands(command)
        if sub is not None and word not in sub.choices:
            return []  # not a command jobtpu knows: nothing to offer after it
        if sub is not None:  # the command's own parser (the full parser holds placeholders until then)
            chosen = sub.choices[word]
            command, seen = chosen.loaded() if isinstance(chosen, args.Parser) else chosen, 0
        else:
            seen += 1
        action = None
        i += 1
    if current.startswith("-") and "=" in current:  # --machine=v1<Tab>
        name, _, prefix = current.partition("=")
        found = _option(command, name)
        offered = _values_of(found, command, home, values) if found else []
        split = "=" in words[-2:]  # bash took `=` for a word of its own: it completes only what follows
        return [v if split else f"{name}={v}" for v in offered if v.startswith(prefix)]
    if action is not None:
        offered = _values_of(action, command, home, values)
    elif current.startswith("-"):
        offered = sorted(o for a in _arguments(command) for o in a.option_strings if o.startswith("--"))
    elif _subcommands(command) is not None:
        offered = list(_subcommands(command).choices)  # type: ignore[union-attr]
    else:
        positional = _positional(command, seen)
        offered = _values_of(positional, command, home, values) if positional is not None else []
    return [v for v in offered if v.startswith(current)]


def _joined(words: list[str]) -> list[str]:
    """bash splits `--machine=v1` at the `=` into three words: one again."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "=" and out and out[-1].startswith("--"):
            out[-1] += "=" + (words[i + 1] if i + 1 < len(words) else "")
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """What the parser records of its arguments (args.Parser: every parser of the command line is one)."""
    return parser.arguments if isinstance(parser, args.Parser) else []


def _option(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    return parser.option(name) if isinstance(parser, args.Parser) else None


def _subcommands(parser: argparse.ArgumentParser) -> args.Subparsers | None:
    return parser.commands if isinstance(parser, args.Parser) else None


def _positional(parser: argparse.ArgumentParser, seen: int) -> argparse.Action | None:
    """The positional argument the next word fills, after `seen` words (one taking many keeps them)."""
    for action in (a for a in _arguments(parser) if not a.option_strings):
        if action.nargs in ("*", "+", argparse.REMAINDER) or seen == 0:
            return action
        seen -= 1
    return None


# An argument's destination → the kind of the home's words it takes.
KINDS = {"ids": "ids", "id": "ids", "after": "ids", "after_any": "ids", "sweeps": "sweeps", "machine": "machines",
         "req": "req", "key": "config", "overrides": "aliases", "sweep": "aliases"}


def _values_of(action: argparse.Action, command: argparse.ArgumentParser, home: str,
               values: Callable[[str, str], list[str]]) -> list[str]:
    if action.choices is not None:
        return [str(c) for c in action.choices]
    if action.dest == "statuses":
        from jobtpu.commands.select import STATUS_NAMES

        return list(STATUS_NAMES)
    kind = KINDS.get(action.dest)
    if action.dest == "args":  # `alias rm NAME`; `dir`'s are numbers and folders
        kind = "alias-names" if command.prog.endswith(" alias") else None
    return values(kind, home) if kind is not None else []


# ---- the home's words ------------------------------------------------------------------------------

def home_values(kind: str, home_arg: str) -> list[str]:
    """The home's words of one kind; nothing when the home cannot be read (Tab never prints an error)."""
    from jobtpu.home.layout import find_home

    try:
        home = find_home(home_arg or None)
        return _READERS[kind](home)
    except Exception:  # noqa: BLE001 - a broken home completes nothing, and says nothing mid-line
        return []


def _jobs(home: Home) -> list[str]:
    """Job ids: yours queued or running first, then your others, then everyone's, newest first in each."""
    from jobtpu.home.actor import resolve_user
    from jobtpu.home.safefs import CAP_LARGE, read_regular

    brief = msgspec.json.decode(read_regular(home.root, "state.json", CAP_LARGE), type=_Brief)
    me = resolve_user(None)
    order = sorted(brief.jobs, key=lambda j: (j.user != me, j.status not in ACTIVE, -j.id))
    return [str(j.id) for j in order]


def _sweeps(home: Home) -> list[str]:
    from jobtpu.home.safefs import CAP_LARGE, read_regular

    brief = msgspec.json.decode(read_regular(home.root, "state.json", CAP_LARGE), type=_Brief)
    return [str(s) for s in sorted({j.sweep for j in brief.jobs if j.sweep is not None}, reverse=True)]


def _machines(home: Home) -> list[str]:
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)
    return [n for m in fleet.machines.values() for n in (m.name, *m.aliases)]


def _req(home: Home) -> list[str]:
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)
    accelerators = sorted({m.accelerator for m in fleet.machines.values() if m.accelerator})
    resources = sorted({f"{r}=" for m in fleet.machines.values() for r in m.capacity})
    return [*accelerators, *resources, "preemptible", "on-demand"]


def _config(home: Home) -> list[str]:
    from jobtpu.home.settings import CONFIG_KEYS

    return list(CONFIG_KEYS)


def _alias_names(home: Home) -> list[str]:
    """Config alias names: yours, the team's (machines.json) and the built-in ones."""
    from jobtpu.home.actor import resolve_user
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import effective_aliases, load_settings

    own = load_settings(home, resolve_user(None)).aliases
    return sorted(effective_aliases(load_fleet(home).config_aliases, own))


def _aliases(home: Home) -> list[str]:
    """An override's or a sweep's key, as an alias: `lr=`."""
    return [f"{name}=" for name in _alias_names(home)]


_READERS: dict[str, Callable[[Home], list[str]]] = {
    "ids": _jobs, "sweeps": _sweeps, "machines": _machines, "req": _req, "config": _config, "aliases": _aliases,
    "alias-names": _alias_names}


class _BriefJob(msgspec.Struct):
    """What Tab needs of a job: decoding only these fields of state.json is a fraction of a full read."""

    id: int
    user: str = ""
    status: str = "queued"
    sweep: int | None = None


class _Brief(msgspec.Struct):
    jobs: list[_BriefJob] = []

"""`jobtpu completion bash|zsh|fish`: the script that makes Tab complete jobtpu in that shell
(docs/reference/python.md §11.4). The script hands the words typed so far to `python -m jobtpu.tab
SHELL WORD...`, which asks `offer` here: it walks the command line's own parser for commands (with
their summaries), options (with their help) and choices, and asks the home (commands/home_words.py)
for the values only it knows: job ids, machine names and aliases, request tokens and counts,
accelerators, config keys, alias names and sweep ids; within a value, after its `=` or a comma."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from collections.abc import Callable, Sequence

from jobtpu.commands import args

SHELLS = ("bash", "zsh", "fish")

# The script each shell loads; PY is this jobtpu's interpreter (as `cron install` writes its path:
# the shell's PATH may hold another jobtpu, or none), `-P` keeps the working folder off its path.
_SCRIPTS = {
    # Status 3: nothing fits, not even a file name (else bash offers file names where no word fits);
    # a word ending in `=` or `,` (`gpu=`, `12,`) is not followed by a space: its value comes next.
    "bash": """_jobtpu_complete() {
    local IFS=$'\\n'
    # shellcheck disable=SC2207
    COMPREPLY=($(PY -P -m jobtpu.tab bash "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
    if [[ $? -eq 3 ]]; then
        compopt +o default
    elif [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *[=,] ]]; then
        compopt -o nospace
    fi
}
complete -o nosort -o default -F _jobtpu_complete jobtpu
""",
    # A line `WORD<tab>SHOWN` is a word listed with its description (commands, options).
    "zsh": """_jobtpu_complete() {
    local -a found described shown plain open
    local line
    found=("${(@f)$(PY -P -m jobtpu.tab zsh "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    for line in "${(@)found:#}"; do
        if [[ $line == *$'\\t'* ]]; then
            described+=("${line%%$'\\t'*}")
            shown+=("${line#*$'\\t'}")
        elif [[ $line == *[=,] ]]; then
            open+=("$line")
        else
            plain+=("$line")
        fi
    done
    compadd -V jobtpu -l -d shown -- "${(@)described}"
    compadd -V jobtpu -- "${(@)plain}"
    compadd -V jobtpu -S '' -- "${(@)open}"
    (( compstate[nmatches] ))
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

class Offer:
    """What one Tab offers: the words, a description of those that have one (a command's summary, an
    option's help: zsh and fish show them beside the word), and whether file names may fit where no
    word does (bash then offers them: never for an argument whose words jobtpu knows)."""

    __slots__ = ("words", "described", "files")

    def __init__(self, words: list[str], described: dict[str, str] | None = None, files: bool = True) -> None:
        self.words, self.described, self.files = words, described or {}, files


def complete(words: Sequence[str], parser: argparse.ArgumentParser,
             values: Callable[[str, str], list[str]]) -> list[str]:
    """The words that may follow `words[:-1]` and begin with `words[-1]` (the one being typed)."""
    return offer(words, parser, values).words


def offer(words: Sequence[str], parser: argparse.ArgumentParser,
          values: Callable[[str, str], list[str]]) -> Offer:
    """What may follow `words[:-1]` and begin with `words[-1]` (the one being typed), by the parser:
    its commands, options and choices; `values(kind, home)` gives the home's own words (ids, machines,
    req, config, aliases, sweeps) for the argument that takes them."""
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
            return Offer([])  # not a command jobtpu knows: nothing to offer after it
        if sub is not None:  # the command's own parser (the full parser holds placeholders until then)
            chosen = sub.choices[word]
            command, seen = chosen.loaded() if isinstance(chosen, args.Parser) else chosen, 0
        else:
            seen += 1
        action = None
        i += 1
    # bash took each `=` for a word of its own (`--machine = b`, `gpu = 2`): it completes only what follows
    split = "=" in words[-2:]
    if current.startswith("-") and "=" in current:  # --machine=v1<Tab>
        name, _, typed_value = current.partition("=")
        found = _option(command, name)
        if found is None:
            return Offer([], files=False)
        got = _value_offer(found, command, home, values, typed_value)
        return Offer([_after_equals(v) if split else f"{name}={v}" for v in got.words], files=got.files)
    if action is not None:
        got = _value_offer(action, command, home, values, current)
    elif current.startswith("-"):
        options = sorted(((o, a) for a in _arguments(command) for o in a.option_strings if o.startswith("--")),
                         key=lambda pair: pair[0])
        matching = [(o, a) for o, a in options if o.startswith(current)]
        return Offer([o for o, _ in matching], {o: _help(a) for o, a in matching if _help(a)}, files=False)
    elif (sub := _subcommands(command)) is not None:
        helps = {c.dest: c.help for c in getattr(sub, "_choices_actions", []) if isinstance(c.help, str)}
        found_words = [w for w in sub.choices if w.startswith(current)]
        return Offer(found_words, {w: _short(helps[w]) for w in found_words if helps.get(w)}, files=False)
    else:
        positional = _positional(command, seen)
        got = _value_offer(positional, command, home, values, current) if positional is not None else Offer([])
    return Offer([_after_equals(v) for v in got.words] if split else got.words, files=got.files)


def lines(offered: Offer, shell: str) -> list[str]:
    """Pure: the lines the shell's script reads: a word each; for zsh a described word is `WORD<tab>
    WORD  -- DESCRIPTION` (the second part aligned, what zsh lists), for fish `WORD<tab>DESCRIPTION`
    (fish aligns it); bash shows no descriptions."""
    described = offered.described if shell != "bash" else {}
    width = max((len(w) for w in offered.words if w in described), default=0)
    out = []
    for word in offered.words:
        text = described.get(word)
        if text is None:
            out.append(word)
        elif shell == "zsh":
            out.append(f"{word}\t{word.ljust(width)}  -- {text}")
        else:
            out.append(f"{word}\t{text}")
    return out


def _after_equals(word: str) -> str:
    """What bash completes of a word it split at `=`: the part after the last one."""
    return word.rpartition("=")[2]


def _joined(words: list[str]) -> list[str]:
    """bash splits `--machine=v1` (and `gpu=2`, `lr=0.1`) at the `=` into three words: one again."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "=" and out:
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


def _help(action: argparse.Action) -> str:
    """An option's help as a line beside it ('' for one whose help is hidden)."""
    text = action.help
    if not isinstance(text, str) or text == argparse.SUPPRESS:
        return ""
    with contextlib.suppress(KeyError, TypeError, ValueError):  # as argparse shows it: `%(default)s` filled in
        text = text % {**vars(action), "default": action.default}
    return _short(text)


def _short(text: str, width: int = 60) -> str:
    """A description cut to one short line, at a word."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0] + "…"


# An argument's destination → the kind of the home's words it takes.
KINDS = {"ids": "ids", "id": "ids", "after": "ids", "after_any": "ids", "sweeps": "sweeps", "machine": "machines",
         "req": "req", "key": "config", "overrides": "aliases", "sweep": "aliases"}
# An argument whose value is a comma-separated list → the kind of its items: `--after 12,<Tab>`, and
# `--req v4-8,<Tab>` (an accelerator's alternatives, docs/reference/requests-and-rules.md §6.1).
LISTS = {"after": "ids", "after_any": "ids", "req": "accelerators"}
# Kinds whose values may be anything a shell completes: an override's value (`lr=` a path or a number).
OPEN_KINDS = frozenset({"aliases"})


def _kind(action: argparse.Action, command: argparse.ArgumentParser) -> str | None:
    if action.dest == "args":  # `alias rm NAME`; `dir`'s are numbers and folders
        return "alias-names" if command.prog.endswith(" alias") else None
    return KINDS.get(action.dest)


def _value_offer(action: argparse.Action, command: argparse.ArgumentParser, home: str,
                 values: Callable[[str, str], list[str]], typed: str) -> Offer:
    """The values the argument may take that begin with `typed`: within a list (`12,<Tab>`) its next
    item, after a resource's `=` (`gpu=<Tab>`) the counts the fleet offers of it."""
    if action.choices is not None:
        return Offer([w for w in map(str, action.choices) if w.startswith(typed)], files=False)
    if action.dest == "statuses":
        from jobtpu.commands.select import STATUS_NAMES

        return Offer([w for w in STATUS_NAMES if w.startswith(typed)], files=False)
    kind = _kind(action, command)
    if kind is None:
        return Offer([])
    item = LISTS.get(action.dest)
    if item is not None and "," in typed:
        head, _, last = typed.rpartition(",")
        given = set(head.split(","))
        return Offer([f"{head},{v}" for v in values(item, home) if v.startswith(last) and v not in given], files=False)
    if kind in OPEN_KINDS and "=" in typed:
        return Offer([])  # an override's value: whatever the shell completes (a path)
    if kind == "req" and "=" in typed:
        kind = "counts"  # gpu=<Tab>
    return Offer([v for v in values(kind, home) if v.startswith(typed)], files=kind in OPEN_KINDS)

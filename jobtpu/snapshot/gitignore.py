"""`.gitignore` rules outside a git checkout, read with gitignore_parser the way git reads them
(nested files, `!negations`, folder-only rules), for the snapshot's walk of a plain folder."""

from __future__ import annotations

import re

Rule = tuple[str, re.Pattern[str], bool, bool]  # (base relpath, regex, negation, directory_only)


def parse_gitignore(path: str, base: str) -> list[Rule]:
    from gitignore_parser import rule_from_pattern  # only outside git; keeps the import off the hot path
    rules: list[Rule] = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f.read().splitlines():
            line = re.sub(r"(?<!\\) +$", "", line)  # the parser keeps trailing spaces of 1-char patterns
            line = re.sub(r"\\(.)", _unescape, line)  # it takes "\ " or "\*" as a literal backslash
            try:
                r = rule_from_pattern(line, base_path=base or "/")
            except IndexError:  # the parser trips on lines such as "!" or "\"; git ignores them too
                continue
            if r is not None:
                # a negated directory rule only matches paths with a trailing "/"; we pass dirs without one
                rx = r.regex[:-2] + "$" if r.regex.endswith("/$") else r.regex
                rules.append((base, re.compile(rx), r.negation, r.directory_only))
    return rules


def _unescape(m: re.Match[str]) -> str:
    c = m.group(1)  # "[c]" is a literal c to the parser; a leading "\#" or "\!" it unescapes itself
    return m.group(0) if m.start() == 0 and c in "#!" else c if c in "#!" else f"[{c}]"


def ignored(rel: str, is_dir: bool, rules: list[Rule]) -> bool:
    for base, rx, negation, dir_only in reversed(rules):  # the last matching rule wins
        if (is_dir or not dir_only) and rx.search(rel[len(base) + 1 :] if base else rel):
            return not negation
    return False


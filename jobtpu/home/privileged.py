"""The keys of machines.json that run code or authenticate as the pass's account (docs/design.md §7):
honoured from machines.json only when that file is trusted (trust.why_untrusted), else only from a
trusted runner.json, whose keys overlay machines.json's.

`gate` works on the file's plain JSON before fleet.py decodes it, so fleet.py's schema and its
one-line errors stay the only parse: a refused key is taken out of the document, said in one line,
and a machine whose identity_file was refused is marked unavailable with that reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jobtpu.errors import ConfigError
from jobtpu.home.trust import Runner, load_runner, why_untrusted
from jobtpu.schema.msgspec_lib import msgspec

SECTIONS = {"gcp": ("credentials", "api_endpoint"), "sheet": ("credentials", "api_endpoint")}


class Gated(msgspec.Struct):
    data: bytes | None  # machines.json's text as the pass may use it (None: the home has none)
    runner: Runner
    refused: list[str] = msgspec.field(default_factory=list)  # the keys taken out, as "machines.gpu.identity_file"
    refused_machines: dict[str, str] = msgspec.field(default_factory=dict)  # machine -> why it takes no job
    why: str | None = None  # why machines.json is not trusted
    unknown: list[str] = msgspec.field(default_factory=list)  # machines runner.json names that machines.json lacks

    def lines(self) -> tuple[str, ...]:
        """One line per refused key (and one for a runner.json not honoured)."""
        out = [f"machines.json {self.why}: its {key} is not used; move it into runner.json "
               "(or make machines.json yours and not group-writable)" for key in self.refused]
        out += [f"runner.json names machine {name!r}, which machines.json does not have: ignored"
                for name in self.unknown]
        if self.runner.problem:
            out.append(self.runner.problem)
        return tuple(out)


def gate(found: tuple[bytes, os.stat_result] | None, home_root: Path) -> Gated:
    runner = load_runner(home_root)
    data = found[0] if found is not None else None
    why = why_untrusted(found[1], os.geteuid()) if found is not None else None
    gated = Gated(data, runner, why=why)
    if why is None and not runner.privileged:
        return gated  # a private home's own file, no runner.json: read as it is
    try:
        doc = json.loads(data) if data is not None else {}
    except (ValueError, RecursionError):
        return gated  # fleet.py says what is wrong with it
    if not isinstance(doc, dict):
        return gated
    if why is not None:
        _strip(doc, gated)
    _overlay(doc, runner.privileged, gated)
    gated.data = json.dumps(doc).encode()
    return gated


def _strip(doc: dict[str, Any], gated: Gated) -> None:
    """Take every privileged key out of an untrusted machines.json, noting each."""
    defaults = doc.get("defaults")
    default_identity = isinstance(defaults, dict) and defaults.get("identity_file") is not None
    if default_identity:
        assert isinstance(defaults, dict)
        del defaults["identity_file"]
        gated.refused.append("defaults.identity_file")
    machines = doc.get("machines")
    for name, entry in (machines.items() if isinstance(machines, dict) else ()):
        if not isinstance(entry, dict):
            continue
        local = entry.get("kind") == "local"
        if entry.get("identity_file") is not None:
            del entry["identity_file"]
            gated.refused.append(f"machines.{name}.identity_file")
            gated.refused_machines[name] = f"{name}'s identity_file is refused (machines.json {gated.why})"
        elif default_identity and not local and "identity_file" not in entry:
            gated.refused_machines[name] = f"{name}'s identity_file is refused (machines.json {gated.why})"
        if local:
            for key in ("root", "setup"):
                if entry.get(key):
                    del entry[key]
                    gated.refused.append(f"machines.{name}.{key}")
    for section, keys in SECTIONS.items():
        part = doc.get(section)
        for key in keys:
            if isinstance(part, dict) and part.get(key) is not None:
                del part[key]
                gated.refused.append(f"{section}.{key}")
    notify = doc.get("notify")
    if isinstance(notify, list):
        kept = [d for d in notify if not (isinstance(d, dict) and "command" in d)]
        gated.refused.extend(f"notify[{i}].command" for i, d in enumerate(notify)
                             if isinstance(d, dict) and "command" in d)
        doc["notify"] = kept


def _overlay(doc: dict[str, Any], privileged: dict[str, Any], gated: Gated) -> None:
    """runner.json's keys over machines.json's: they carry the pass account's consent."""
    if "identity_file" in privileged.get("defaults", {}):
        doc.setdefault("defaults", {})["identity_file"] = privileged["defaults"]["identity_file"]
        machines = doc.get("machines")
        for name in list(gated.refused_machines):
            entry = machines.get(name) if isinstance(machines, dict) else None
            if isinstance(entry, dict) and "identity_file" not in entry:
                del gated.refused_machines[name]
    for name, keys in privileged.get("machines", {}).items():
        machines = doc.get("machines")
        entry = machines.get(name) if isinstance(machines, dict) else None
        if not isinstance(entry, dict):
            gated.unknown.append(name)
            continue
        entry.update(keys)
        if "identity_file" in keys:
            gated.refused_machines.pop(name, None)
    for section in SECTIONS:
        if section in privileged:
            part = doc.get(section)
            if section == "gcp" and part is None:
                part = doc["gcp"] = {}
            if isinstance(part, dict):
                part.update(privileged[section])
    if "notify" in privileged:
        extra = privileged["notify"]
        if not isinstance(extra, list):
            raise ConfigError("runner.json: 'notify' must be a list of destinations", hint="fix runner.json")
        mine = doc.get("notify")
        doc["notify"] = [*(mine if isinstance(mine, list) else []), *extra]

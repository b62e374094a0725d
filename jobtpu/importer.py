"""The TPU manager's data.json → what jobtpu keeps: users, their working directories, aliases and
time zones, TPU machines with their aliases (docs/guide.md, "Moving from the TPU manager").

Pure: nothing here reads or writes a file. `translate` reads the old document; `plan_machines` and
`plan_settings` compare it with what the home already has and say what would change, line by line;
commands/importing.py reads the files, prints the lines and writes through the existing writers."""

from __future__ import annotations

import copy
import re
from typing import Any

from jobtpu.errors import JobtpuError
from jobtpu.home.settings import ALIAS_NAME, BUILTIN_ALIASES, CONFIG_KEY, dir_number, sheet_name_refusal
from jobtpu.schema.accelerator import in_name
from jobtpu.schema.machines_file import MACHINE_NAME
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.names import USER_NAME
from jobtpu.schema.settings import UserSettings

# The old tool's two time zones ("us" it calls UTC-4, "cn" UTC+8) as the IANA zones they stand for.
TIME_ZONES = {"us": "America/New_York", "cn": "Asia/Shanghai"}
# A user setting of the old tool that jobtpu has no counterpart for (its monitor window's knobs).
_NO_EQUIVALENT = "no equivalent in jobtpu"
_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
# Keys of all_tpus that are lists of names with a scheduling kind, not zones.
_KIND_LISTS = ("preemptible", "pre_info")


class ShapeError(Exception):
    """data.json is not shaped like the TPU manager's: one line naming the key at fault."""


class OldUser(msgspec.Struct, frozen=True):
    name: str
    dirs: dict[str, str]
    aliases: dict[str, str]
    time_zone: str | None
    sheet_name: str | None = None  # how the team sheet's User cells name them (`Lyy` for lyy)


class OldTpu(msgspec.Struct, frozen=True):
    node: str
    zone: str
    accelerator: str
    kind: str  # "preemptible", "spot" or "on-demand"
    aliases: tuple[str, ...]

    def entry(self) -> dict[str, Any]:
        """Its machines.json entry."""
        flag = {"preemptible": {"preemptible": True}, "spot": {"spot": True}}.get(self.kind, {})
        return {"kind": "tpu", "node": self.node, "zone": self.zone, "accelerator": self.accelerator, **flag}

    def line(self) -> str:
        return f"machine {self.node} (tpu {self.accelerator}, {self.zone}, {self.kind})"


class Translation(msgspec.Struct):
    users: list[OldUser] = msgspec.field(default_factory=list)
    tpus: list[OldTpu] = msgspec.field(default_factory=list)
    refused: list[str] = msgspec.field(default_factory=list)  # names jobtpu cannot take, reported not mangled
    skipped: list[str] = msgspec.field(default_factory=list)  # what jobtpu has no place for, and why
    jobs_left: int = 0
    builtin_aliases: set[str] = msgspec.field(default_factory=set)  # the old tool's copies of jobtpu's built-in ones


def accelerator_of(name: str) -> str | None:
    """The accelerator inside a TPU's name (schema/accelerator.py): kmh-tpuvm-v3-32-1 → v3-32."""
    found = in_name(name)
    return found.text if found else None


def time_zone_of(value: object) -> str | None:
    return TIME_ZONES.get(value) if isinstance(value, str) else None


def scheduling_kinds(doc: dict[str, Any]) -> dict[str, str]:
    """Node name → "preemptible" or "spot", from all_tpus.preemptible and pre_info: a list of names,
    an object of name → description (one that mentions spot makes the node spot), or, in the old
    tool's newer versions, an object of kind → names ({"preemptible": [...], "spot": [...]})."""
    kinds: dict[str, str] = {}
    all_tpus = doc.get("all_tpus") or {}
    for where, value in ((f"all_tpus.{key}", all_tpus.get(key)) for key in _KIND_LISTS):
        _kinds_from(value, where, kinds)
    _kinds_from(doc.get("pre_info"), "pre_info", kinds)
    return kinds


def _kinds_from(value: object, where: str, kinds: dict[str, str]) -> None:
    if value is None:
        return
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        kinds.update((n, kinds.get(n, "preemptible")) for n in value)
    elif isinstance(value, dict) and value and all(isinstance(names, list) for names in value.values()):
        _kinds_by_kind(value, where, kinds)
    elif isinstance(value, dict):
        kinds.update((str(n), "spot" if "spot" in str(info).lower() else "preemptible") for n, info in value.items())
    else:
        raise ShapeError(f"{where}: must be a list of TPU names")


def _kinds_by_kind(value: dict[str, Any], where: str, kinds: dict[str, str]) -> None:
    """{"preemptible": [names], "spot": [names]}: spot wins over preemptible for a name in both."""
    for kind, names in value.items():
        if kind not in ("preemptible", "spot") or not all(isinstance(n, str) for n in names):
            raise ShapeError(f"{where}.{str(kind)[:40]}: must be \"preemptible\" or \"spot\", a list of TPU names")
        for name in names:
            kinds[name] = "spot" if "spot" in (kind, kinds.get(name)) else "preemptible"


def translate(doc: object) -> Translation:
    """The old document's users and TPUs, with what cannot be taken over said line by line."""
    if not isinstance(doc, dict):
        raise ShapeError("must be a JSON object with \"users\" (the TPU manager's data.json)")
    users = _object(doc.get("users"), "users")
    out = Translation()
    for name, raw in users.items():
        _user(name, _object(raw, f"users.{name}"), out)
    _tpus(doc, out)
    for key, why in (("wandb_api_key", "pass it per job as a secret, which jobtpu keeps private: "
                                       "--env WANDB_API_KEY=..."),
                     ("conda_env_name", "activate it in the job's command, or put its bin on PATH: "
                                        "--env PATH=/path/to/envs/{}/bin:$PATH"),
                     ("monitor_config", "`jobtpu manage --loop SECONDS` sets how often a pass looks")):
        if doc.get(key):
            value = doc[key] if key == "conda_env_name" and isinstance(doc[key], str) else ""
            out.skipped.append(f"skipped {key}{f' {value}' if value else ''}: {why.format(value or 'NAME')}")
    return out


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ShapeError(f"{where}: must be an object")
    return value


def _strings(value: object, where: str) -> dict[str, str]:
    found = _object({} if value is None else value, where)
    if not all(isinstance(v, str) for v in found.values()):
        raise ShapeError(f"{where}: must map names to strings")
    return {str(k): v for k, v in found.items()}


def _user(name: str, raw: dict[str, Any], out: Translation) -> None:
    jobs = raw.get("job_data") or []
    if not isinstance(jobs, list):
        raise ShapeError(f"users.{name}.job_data: must be a list")
    out.jobs_left += len(jobs)
    if not USER_NAME.match(name):
        out.refused.append(f"not imported: user {name[:40]!r} is not a jobtpu user name (1–32 of a-z, 0-9, '_' "
                           "or '-', starting with a letter or '_'); add it under a valid name by hand")
        return
    dirs: dict[str, str] = {}
    for number, folder in _strings(raw.get("working_dir"), f"users.{name}.working_dir").items():
        why = _dir_refusal(number, folder)
        if why is None:
            dirs[number] = folder
        else:
            out.refused.append(f"not imported: {name}'s working directory {number[:10]} {folder[:80]!r}: {why}")
    aliases: dict[str, str] = {}
    for alias, full in _strings(raw.get("config_aliases"), f"users.{name}.config_aliases").items():
        if BUILTIN_ALIASES.get(alias) == full:  # the old tool copied its defaults into every user's
            out.builtin_aliases.add(alias)
        elif ALIAS_NAME.match(alias) and CONFIG_KEY.match(full):
            aliases[alias] = full
        else:
            out.refused.append(f"not imported: {name}'s alias {alias[:40]!r} = {full[:80]!r} (not a name and a config key)")
    settings = _object(raw.get("settings") or {}, f"users.{name}.settings")
    zone = settings.get("time_zone")
    if zone is not None and time_zone_of(zone) is None:
        out.skipped.append(f"skipped {name}'s time_zone {str(zone)[:20]!r}: not us or cn; "
                           "`jobtpu config set time_zone ZONE` sets an IANA name")
    others = sorted(k for k in settings if k != "time_zone")
    if others:
        out.skipped.append(f"skipped {name}'s settings {', '.join(others)}: {_NO_EQUIVALENT}")
    out.users.append(OldUser(name, dirs, aliases, time_zone_of(zone), _sheet_name(name, raw.get("spreadsheet_name"), out)))


def _sheet_name(user: str, value: object, out: Translation) -> str | None:
    """The name the old tool wrote in the sheet's user cells for this user, when it is not the user
    name itself (and is one jobtpu can keep: one printable line)."""
    if value is None or value == user:
        return None
    why = sheet_name_refusal(value)
    if why is None:
        return str(value)
    out.refused.append(f"not imported: {user}'s spreadsheet_name {str(value)[:40]!r}: {why}")
    return None


def _dir_refusal(number: str, folder: str) -> str | None:
    try:
        dir_number(number)
    except JobtpuError:
        return "jobtpu numbers them 1 to 99"
    return None if folder.startswith("/") else "not an absolute path"


def _tpu_refusal(node: str) -> str | None:
    if not MACHINE_NAME.match(node):
        return "not a machine name (letters, digits, '.', '_', '-')"
    return None if accelerator_of(node) else "no accelerator (like v3-32) in its name"


def _tpus(doc: dict[str, Any], out: Translation) -> None:
    all_tpus = _object(doc.get("all_tpus") or {}, "all_tpus")
    kinds = scheduling_kinds(doc)
    aliases = _strings(doc.get("tpu_aliases"), "tpu_aliases")
    zones: dict[str, str] = {}
    for zone, names in all_tpus.items():
        if zone in _KIND_LISTS:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ShapeError(f"all_tpus.{zone}: must be a list of TPU names")
        if not _ZONE.match(zone):
            out.refused.append(f"not imported: all_tpus.{zone[:40]} ({len(names)} TPUs): not a zone like europe-west4-a")
            continue
        for node in names:
            if zones.setdefault(node, zone) != zone:
                out.refused.append(f"not imported: TPU {node[:63]!r} in {zone} as well: imported in {zones[node]}")
    for node, zone in zones.items():
        why = _tpu_refusal(node)
        if why is not None:
            out.refused.append(f"not imported: TPU {node[:63]!r} in {zone}: {why}; add it to machines.json by hand")
            continue
        mine = tuple(sorted(a for a, target in aliases.items() if target == node and MACHINE_NAME.match(a)))
        out.tpus.append(OldTpu(node, zone, accelerator_of(node) or "", kinds.get(node, "on-demand"), mine))
    for alias, target in aliases.items():
        if target not in zones or not MACHINE_NAME.match(alias):
            why = "not a machine name" if target in zones else f"{target[:63]!r} is none of all_tpus"
            out.refused.append(f"not imported: TPU alias {alias[:40]!r} → {target[:63]!r}: {why}")


# ---- against what the home has ---------------------------------------------------------------------

class ImportPlan(msgspec.Struct):
    """What an import would do: `lines` (one per change), `kept` (differing entries left alone)."""

    lines: list[str] = msgspec.field(default_factory=list)
    kept: list[str] = msgspec.field(default_factory=list)


def plan_machines(doc: dict[str, Any], tpus: list[OldTpu], force: bool, plan: ImportPlan) -> dict[str, Any]:
    """machines.json's document with the TPUs and their aliases added (a copy; `doc` is untouched):
    what it already has stays, and a differing entry is replaced only with `force`."""
    new = copy.deepcopy(doc)
    # A machines.json without "machines" means the built-in local machine: it stays.
    machines: dict[str, Any] = new.setdefault("machines", {"local": {"kind": "local"}})
    for tpu in tpus:
        entry = tpu.entry()
        have = machines.get(tpu.node)
        if have is None:
            machines[tpu.node] = entry
            plan.lines.append(tpu.line())
        elif _differs(have, entry):
            if not force:
                plan.kept.append(f"kept machine {tpu.node}, differs from the import ({tpu.line()}): use --force")
                continue
            for flag in ("preemptible", "spot"):
                have.pop(flag, None)
            have.update(entry)
            plan.lines.append(f"{tpu.line()} (replaced)")
        for alias in tpu.aliases:
            _plan_alias(machines, tpu.node, alias, force, plan)
    return new


def _differs(have: object, entry: dict[str, Any]) -> bool:
    if not isinstance(have, dict):
        return True
    flags = ("preemptible", "spot")
    return any(have.get(k) != v for k, v in entry.items() if k not in flags) or \
        any(bool(have.get(k)) != bool(entry.get(k)) for k in flags)


def _plan_alias(machines: dict[str, Any], node: str, alias: str, force: bool, plan: ImportPlan) -> None:
    if alias in machines and alias != node:
        plan.kept.append(f"kept machine {alias}: the TPU alias {alias} → {node} is its name (not imported)")
        return
    holder = next((n for n, e in machines.items() if isinstance(e, dict) and alias in (e.get("aliases") or [])), None)
    if holder == node:
        return
    if holder is not None:
        if not force:
            plan.kept.append(f"kept alias {alias} of machine {holder}, differs ({node}): use --force")
            return
        machines[holder]["aliases"] = [a for a in machines[holder]["aliases"] if a != alias]
    machines[node].setdefault("aliases", []).append(alias)
    plan.lines.append(f"{node}: alias {alias}" + (f" (was {holder}'s)" if holder else ""))


def plan_settings(user: OldUser, have: UserSettings, force: bool, plan: ImportPlan) -> UserSettings:
    """The user's settings with the import applied (a copy): set where unset, replaced where they
    differ only with `force`."""
    from jobtpu.schema.msgspec_lib import msgspec

    new = msgspec.structs.replace(have, dirs=dict(have.dirs), aliases=dict(have.aliases))
    for number, folder in user.dirs.items():
        _plan_value(new.dirs, number, folder, f"{user.name}: working directory {number}", force, plan)
    for alias, full in user.aliases.items():
        _plan_value(new.aliases, alias, full, f"{user.name}: alias {alias}", force, plan)
    if user.time_zone is not None:
        zones = {"time_zone": new.time_zone} if new.time_zone is not None else {}
        _plan_value(zones, "time_zone", user.time_zone, f"{user.name}: time_zone", force, plan)
        new.time_zone = zones["time_zone"]
    if user.sheet_name is not None:
        names = {"sheet_name": new.sheet_name} if new.sheet_name is not None else {}
        _plan_value(names, "sheet_name", user.sheet_name, f"{user.name}: sheet_name", force, plan)
        new.sheet_name = names["sheet_name"]
    return new


def _plan_value(values: dict[str, Any], key: str, value: str, what: str, force: bool, plan: ImportPlan) -> None:
    have = values.get(key)
    if have == value:
        return
    if have is not None and not force:
        plan.kept.append(f"kept {what} = {have}, differs ({value}): use --force")
        return
    values[key] = value
    plan.lines.append(f"{what} = {value}" + (f" (was {have})" if have is not None else ""))

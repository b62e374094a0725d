"""`jobtpu import tpu-manager DATA_JSON`: read the old tool's data.json, print what it would create,
and unless --dry-run write it through jobtpu's own writers (users.json, each user's settings.json,
machines.json). The translation itself is importer.py's; docs/guide.md, "Moving from the TPU manager"."""

import functools
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.render.text import printable

if TYPE_CHECKING:
    from jobtpu.schema.settings import UserSettings


class _Changes(NamedTuple):
    """What the import would change, planned against the home before anything is written."""

    plan: Any  # importer.ImportPlan: the lines to print, and the differing entries kept
    machines: dict[str, Any] | None  # machines.json's new document; None when it stays as it is
    machines_mode: int | None
    new_users: list[str]
    settings: "dict[str, UserSettings]"  # user → their settings with the import applied, for those that change


def tpu_manager(home: Home, data_json: str, dry_run: bool, force: bool, project: str | None) -> int:
    from jobtpu import importer
    from jobtpu.home.settings import check_may_write

    path = Path(data_json).expanduser()
    try:
        found = importer.translate(_read_json(path))
    except importer.ShapeError as e:
        raise JobtpuError(f"{path}: {e}", hint="pass the TPU manager's data.json; nothing was changed") from None
    changes = _plan(home, found, force, project)
    for user in changes.settings if not dry_run else []:
        check_may_write(home, user)  # every refusal comes before the first line and the first write
    _tell(found, changes.plan, dry_run)
    _warn_missing_dirs(found.users)
    _say_absent_nodes(changes.machines if changes.machines is not None else _machines_doc(home)[0], found.tpus)
    if not dry_run and changes.plan.lines:
        _write(home, changes)
    return 0


def _warn_missing_dirs(users: list[Any]) -> None:
    """A working directory that is gone on this machine is imported all the same (a submit from it
    says what is wrong), but said now, while the user still remembers where it moved."""
    for user in users:
        for number, folder in user.dirs.items():
            if not os.path.isdir(folder):
                note(f"{user.name}'s working directory {number} {folder} does not exist here: "
                     f"`jobtpu dir set {number} PATH --user {user.name}` points it elsewhere")


def _say_absent_nodes(machines: dict[str, Any], tpus: list[Any]) -> None:
    """The imported TPUs that have no node now, by one listing per zone, when machines.json names the
    TPU API's credentials (the import never goes looking for credentials of its own)."""
    from jobtpu.errors import RemoteError
    from jobtpu.tpu.api import TpuApi

    gcp = machines.get("gcp")
    if not tpus or not isinstance(gcp, dict) or not gcp.get("project") or "credentials" not in gcp:
        return
    api = TpuApi(gcp)
    for zone in sorted({t.zone for t in tpus}):
        try:
            listed = api.list_nodes(zone)
        except RemoteError as e:
            note(f"could not check which imported TPUs have a node: {e.message}")
            return
        for tpu in (t for t in tpus if t.zone == zone and t.node not in listed):
            note(f"no node: {tpu.node} does not exist in {zone} now: a pass creates it for a job that needs it "
                 f"(rule pre, reapply or rerun), or `jobtpu tpu apply {tpu.node}`")


def _plan(home: Home, found: Any, force: bool, project: str | None) -> _Changes:
    from jobtpu import importer
    from jobtpu.home.settings import load_settings
    from jobtpu.home.users import load_users

    plan = importer.ImportPlan()
    machines_doc, machines_mode = _machines_doc(home)
    new_machines = importer.plan_machines(machines_doc, found.tpus, force, plan)
    _plan_project(new_machines, found.tpus, project, force, plan)
    if new_machines != machines_doc:
        _check_loads(home, new_machines)  # a document jobtpu would refuse is never written
    team = load_users(home) or []
    new_users = [u.name for u in found.users if u.name not in team]
    plan.lines[:0] = [f"user {name}" for name in new_users]
    settings = {}
    for user in found.users:
        have = load_settings(home, user.name, own=False)  # the runner reads a member's as data
        wanted = importer.plan_settings(user, have, force, plan)
        if wanted != have:
            settings[user.name] = wanted
    return _Changes(plan, new_machines if new_machines != machines_doc else None, machines_mode, new_users, settings)


def _tell(found: Any, plan: Any, dry_run: bool) -> None:
    """What was left out on stderr; what is (or would be) imported on stdout, a line each."""
    for line in [*found.refused, *found.skipped, *plan.kept]:
        note(line)
    if found.builtin_aliases:
        note(f"left out the aliases that are jobtpu's built-in ones ({', '.join(sorted(found.builtin_aliases))}): "
             "every user has them already")
    if found.jobs_left:
        note(f"left {found.jobs_left} job(s) of the old tool: jobs are not imported; "
             "submit them again with `jobtpu submit` once the old tool has stopped them")
    for line in plan.lines:
        print(printable(("would import: " if dry_run else "") + line))
    if not plan.lines:
        note("nothing to import: this home already has everything data.json holds")


def _write(home: Home, changes: _Changes) -> None:
    """Through jobtpu's own writers: machines.json atomically, then users.json, then each user's settings."""
    from jobtpu.home.settings import update_settings
    from jobtpu.home.users import add_user, load_users

    if changes.new_users and load_users(home) is None:
        note("started users.json with these users: from now on a user not on it is refused "
             "(`jobtpu user add NAME` adds one)")
    if changes.machines is not None:
        _write_machines(home, changes.machines, changes.machines_mode)
    for name in changes.new_users:
        add_user(home, name)
    for name, wanted in changes.settings.items():
        update_settings(home, name, functools.partial(_take, wanted=wanted))


def _read_json(path: Path) -> Any:
    import orjson

    try:
        data = path.read_bytes()
    except OSError as e:
        raise JobtpuError(f"{path}: cannot read it ({e.strerror or e})",
                          hint="pass the TPU manager's data.json; nothing was changed") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise JobtpuError(f"{path}: not JSON ({e})", hint="pass the TPU manager's data.json; nothing was changed") from None


def _machines_doc(home: Home) -> tuple[dict[str, Any], int | None]:
    """machines.json as a plain document (the built-in local machine when there is none), and its mode."""
    from jobtpu.commands.team import LOCAL_ONLY
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.safefs import CAP_CONFIG, read_regular
    from jobtpu.schema.decode import parse_json_file

    try:
        data = read_regular(home.root, home.machines_file, CAP_CONFIG)
        mode: int | None = stat.S_IMODE(os.stat(home.machines_file).st_mode)
    except FileNotFoundError:
        return dict(parse_json_file(home.machines_file, LOCAL_ONLY)), None
    load_fleet(home)  # a file jobtpu refuses is refused here too, in the same words, before anything is added
    return dict(parse_json_file(home.machines_file, data)), mode


def _plan_project(doc: dict[str, Any], tpus: list[Any], project: str | None, force: bool, plan: Any) -> None:
    """TPU machines need gcp.project, which data.json does not hold: --project gives it."""
    found = doc.get("gcp")
    gcp: dict[str, Any] = found if isinstance(found, dict) else {}
    have = gcp.get("project")
    if project is not None and project != have:
        if have and not force:
            plan.kept.append(f"kept gcp.project = {have}, differs ({project}): use --force")
        else:
            doc["gcp"] = {**gcp, "project": project}
            plan.lines.append(f"gcp.project = {project}" + (f" (was {have})" if have else ""))
            return
    if tpus and not have:
        raise JobtpuError("data.json's TPUs need the Google Cloud project they live in, which it does not say",
                          hint="pass --project PROJECT (it goes to machines.json's gcp.project); nothing was changed")


def _check_loads(home: Home, doc: dict[str, Any]) -> None:
    from jobtpu.home.machines import check_machines

    check_machines(home, _encoded(doc))


def _encoded(doc: dict[str, Any]) -> bytes:
    import json

    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def _write_machines(home: Home, doc: dict[str, Any], mode: int | None) -> None:
    from jobtpu.home.layout import write_atomic

    home.ensure()
    write_atomic(home.machines_file, _encoded(doc), mode=mode)


def _take(settings: "UserSettings", wanted: "UserSettings") -> None:
    """The planned values, over what the file holds now (update_settings reads it again under its lock)."""
    settings.dirs.update(wanted.dirs)
    settings.aliases.update(wanted.aliases)
    settings.time_zone = wanted.time_zone
    settings.sheet_name = wanted.sheet_name


def add_parser(subparsers: "args.Subparsers") -> None:
    p = args.add_command(subparsers, "import")
    p.add_argument("source", choices=("tpu-manager",), help="the tool: tpu-manager (its data.json)")
    p.add_argument("data_json", metavar="DATA_JSON", help="the TPU manager's data.json")
    p.add_argument("--dry-run", action="store_true", help="print what it would import; change nothing")
    p.add_argument("--force", action="store_true", help="replace entries this home has with other values")
    p.add_argument("--project", help="the Google Cloud project of its TPUs (machines.json's gcp.project), "
                   "when machines.json does not name one")
    p.set_defaults(func=lambda home, a: tpu_manager(home, a.data_json, a.dry_run, a.force, a.project))

"""`jobtpu clean`: move ended jobs from state.json into history.jsonl (with --remote, their remote
folders too), under the pass lock."""

from __future__ import annotations

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.commands.select import Selection, add_selection_args, announce, select_current, selection_from
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.home.users import check_owners, known_user


def clean(home: Home, sel: Selection, remote: bool, force: bool = False, dry_run: bool = False) -> int:
    """Move ended jobs to history.jsonl (with `remote`, delete their remote folders too): your ended
    jobs, or the ended ones among those the ids and selectors name."""
    from jobtpu.commands.batch import settle_dependents
    from jobtpu.fleet.operations import clean_remote
    from jobtpu.home.secrets import SecretStore
    from jobtpu.home.store import append_to_history
    from jobtpu.passes.session import locked_session

    me = known_user(home, None)
    with locked_session(home) as session:
        gone = [j for j in select_current(home, session.state.jobs, sel, "clean") if j.ended]
        check_owners(home, gone, me, force, "clean", record=not dry_run)  # history keeps who forced it
        announce("clean", gone, sel, dry_run)
        if dry_run:
            return 0
        if remote:
            clean_remote(session, gone)
        gone_ids = {j.id for j in gone}
        settle_dependents([j for j in session.state.jobs if j.id not in gone_ids], gone)
        append_to_history(home, gone)
        session.state.jobs = [j for j in session.state.jobs if j.id not in gone_ids]  # the commit removes them
        # The cleaned jobs' secrets, and any a failed submit left behind. Under the state lock no
        # submit is between filing a secret and saving its job, so a secret whose id no saved job
        # holds is an orphan.
        with Store(home).lock():
            SecretStore(home).keep_only({j.id for j in Store(home).load().jobs} - gone_ids)
        from jobtpu.home.specs import drop_spec

        for job_id in sorted(gone_ids):  # another member's spec stays (the sticky folder keeps it theirs)
            drop_spec(home, job_id)
    note(f"moved {len(gone)} ended job(s) to {home.history_file.name}")
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "clean")
    p.add_argument("--remote", action="store_true", help="also delete their remote folders and unused archives")
    add_selection_args(p, "only these ended jobs", dry_run=True)
    p.set_defaults(func=lambda home, a: clean(home, selection_from(a), a.remote, a.force, a.dry_run))

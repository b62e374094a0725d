"""The last attempt that saved, and checkpoints that follow a job (docs/reference/job-environment.md
§8.2.1): the pure rules as tables (what a user may give, which attempt last saved, what a resume is
told, which copy it needs), then real processes: a local job whose saves come and go across its
retries, and a resume on another ssh box in another region whose worker copies the checkpoint with
a fake `gcloud` that records what it was asked."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobtpu.decide import core, saving
from jobtpu.errors import JobtpuError
from jobtpu.schema.saving import Saved, Saving
from jobtpu.schema.state import Attempt, Cause, Job, Status
from tests.accounts import Team
from tests.helpers import jobtpu, make_home, manage_until, run_pass, status, submit, wait_for, write_tree
from tests.sshfleet import SshFleet

NOW = 1_000_000.0

# ---- what a user may give -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "says"), [
    (Saving(when="saved (?=ckpt)"), "--saved-when 'saved (?=ckpt)' is not a valid regular expression for RE2"),
    (Saving(when="x" * 1001), "--saved-when is 1001 characters, over the limit of 1000"),
    (Saving(marker="/tmp/SAVED"), "--saved-marker '/tmp/SAVED' is absolute"),
    (Saving(marker="~/SAVED"), "--saved-marker '~/SAVED' is absolute"),
    (Saving(marker="ckpt/../../SAVED"), "--saved-marker 'ckpt/../../SAVED' climbs out of the job's folder (..)"),
    (Saving(marker=" "), "--saved-marker must be a path of 1 to 1000 characters on one line"),
    (Saving(marker="a\nb"), "--saved-marker must be a path of 1 to 1000 characters on one line"),
    (Saving(marker="S", checkpoints="s3://ckpt-{region}/run7"), "--checkpoints 's3://ckpt-{region}/run7' is not a gs:// place"),
    (Saving(marker="S", checkpoints="gs:///{region}"), "is not a gs:// place"),
    (Saving(marker="S", checkpoints="gs://ckpt/run7"), "--checkpoints 'gs://ckpt/run7' lacks {region}"),
    (Saving(marker="S", checkpoints="gs://ckpt-{zone}/run7"), "--checkpoints names unknown placeholder {zone}"),
    (Saving(checkpoints="gs://ckpt-{region}/run7"), "--checkpoints needs --saved-when or --saved-marker"),
])
def test_a_way_of_saving_jobtpu_cannot_use_is_one_line(given: Saving, says: str) -> None:
    with pytest.raises(JobtpuError) as raised:
        saving.check_saving(given)
    assert says in raised.value.message and "\n" not in raised.value.message


@pytest.mark.parametrize("given", [
    None, Saving(when=r"saved checkpoint (\d+)"), Saving(marker="ckpt/SAVED"), Saving(marker="./a b/..x"),
    Saving(when="saved", checkpoints="gs://ckpt-{region}/run7/{region}"),
])
def test_a_way_of_saving_it_can_use_passes(given: Saving | None) -> None:
    saving.check_saving(given)


def test_no_option_keeps_no_record() -> None:
    assert saving.saving_of(None, None, None) is None
    assert saving.saving_of(None, "S", None) == Saving(marker="S")


# ---- which attempt last saved, and what a resume is told ------------------------------------------------------

MARKER = Saving(marker="S")


def job(saves: list[Saved | None], way: Saving | None = MARKER, **kw: Any) -> Job:
    """A job whose attempts 0 … n-1 saved as `saves` says, queued for attempt n."""
    attempts = [Attempt(n=i, machine=f"m{i}", saved=s) for i, s in enumerate(saves)]
    return Job(id=7, user="u", cmd="c", archive="a.tar.gz", created=NOW, attempt=len(saves), attempts=attempts,
               saving=way, **kw)


AT = Saved(at=NOW, region="us-east1")


@pytest.mark.parametrize(("saves", "way", "last", "resumes"), [
    ([None], Saving(marker="S"), None, False),  # nothing saved: a resume reruns from scratch
    ([AT, None], Saving(marker="S"), 0, True),
    ([AT, AT, None], Saving(when="saved"), 1, True),  # the newest save wins
    ([None, None], None, None, True),  # a job that says nothing of its saves resumes as asked
    ([None], Saving(checkpoints="gs://c-{region}"), None, True),  # (only a hand edit has this: not watched)
])
def test_a_resume_resumes_from_the_attempt_that_last_saved(saves: list[Saved | None], way: Saving | None,
                                                          last: int | None, resumes: bool) -> None:
    j = job(saves, way)
    found = saving.last_saved(j)
    assert (found.n if found else None, saving.resumes(j, True), saving.resumes(j, False)) == (last, resumes, False)


def test_a_recovery_that_would_resume_reruns_when_no_attempt_saved() -> None:
    for saves, resumed in (([None], False), ([AT], True)):
        j = job(saves)
        j.attempt = len(saves) - 1
        j.status, j.machine = Status.RUNNING, "m0"
        core.requeue(j, resume=True, reason="recovering", cause=Cause.RECOVER)
        assert (j.attempt, j.resume, saving.unsaved_rerun(j)) == (len(saves), resumed, not resumed)


@pytest.mark.parametrize(("root", "folder"), [
    ("/srv/runs", "/srv/runs/jobs/7"),
    ("jobtpu", "$HOME/jobtpu/jobs/7"),
    ("~/x/", "$HOME/x/jobs/7"),
    ("we$ird", "$HOME/we\\$ird/jobs/7"),  # the wrapper expands $HOME only: a root's own $ stays
])
def test_a_resume_is_told_the_attempt_and_its_folder_as_the_worker_sees_it(root: str, folder: str) -> None:
    j = job([AT, None], resume=True)
    assert saving.resume_env(j, {"m0": root, "m1": "/elsewhere"}) == {
        "JOBTPU_RESUME_FROM_ATTEMPT": "0", "JOBTPU_RESUME_FROM_DIR": folder}
    assert saving.resume_env(job([AT, None], resume=False), {"m0": root}) == {}  # a rerun is told nothing
    assert saving.resume_env(job([None, None], None, resume=True), {"m0": root}) == {}  # nor a job without a way


@pytest.mark.parametrize(("was", "now", "copy"), [
    ("us-east1", "europe-west4", ("gs://ckpt-us-east1/run7", "gs://ckpt-europe-west4/run7")),
    ("us-east1", "us-east1", None),  # the same region: the checkpoint is there
    ("", "europe-west4", None),  # a region machines.json does not name: nothing to say where it is
    ("us-east1", "", None),
])
def test_a_resume_in_another_region_copies_the_checkpoint_there(was: str, now: str, copy: tuple[str, str] | None) -> None:
    way = Saving(marker="S", checkpoints="gs://ckpt-{region}/run7")
    assert saving.checkpoint_copy(job([Saved(at=NOW, region=was), None], way, resume=True), now) == copy


def test_no_copy_without_a_save_a_template_or_a_resume() -> None:
    way = Saving(marker="S", checkpoints="gs://ckpt-{region}/run7")
    assert saving.checkpoint_copy(job([None], way, resume=True), "europe-west4") is None
    assert saving.checkpoint_copy(job([AT], Saving(marker="S"), resume=True), "europe-west4") is None
    assert saving.checkpoint_copy(job([AT], way, resume=False), "europe-west4") is None


# ---- through real processes ------------------------------------------------------------------------------------

# Each attempt says what it was told and what its folder holds, leaves a file of its own in the folder,
# and exits 1 until attempt 3; attempt 1 alone saves (its marker, written after it started).
SAYS = ('echo "$JOBTPU_ATTEMPT $JOBTPU_RESUME ${{JOBTPU_RESUME_FROM_ATTEMPT:-none}} ${{JOBTPU_RESUME_FROM_DIR:-none}} '
        '$(ls -d left-* 2>/dev/null | tr "\\n" ,)" >> {out}\n'
        'touch "left-$JOBTPU_ATTEMPT"\n'
        '[ "$JOBTPU_ATTEMPT" = 1 ] && mkdir -p ckpt && touch ckpt/SAVED\n'
        '[ "$JOBTPU_ATTEMPT" -ge 3 ]\n')


def test_a_local_job_reruns_until_it_saved_then_resumes_from_the_attempt_that_last_saved(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2}}})
    out = tmp_path / "said"
    src = write_tree(tmp_path / "src", {"a.sh": SAYS.format(out=out)})
    job_id = submit(home, src, "bash a.sh", "--retries", "3", "--saved-marker", "ckpt/SAVED")
    notes: list[str] = []  # what each pass said

    def ended() -> bool:
        notes.append(run_pass(home))
        return status(home)[job_id]["status"] in ("finished", "failed")

    wait_for(ended, timeout=120, what="the job to end")
    done = status(home)[job_id]
    folder = str(home / "run" / "jobs" / str(job_id))
    assert out.read_text().splitlines() == [
        "0 0 none none ",
        "1 0 none none ",  # nothing saved: a rerun from scratch, in a fresh folder (left-0 is gone)
        f"2 1 1 {folder} left-1,",  # attempt 1 saved: resumed from it, in its folder
        f"3 1 1 {folder} left-1,left-2,",  # attempt 2's marker was attempt 1's: still 1
    ], out.read_text()
    assert done["status"] == "finished" and done["saving"] == {"marker": "ckpt/SAVED"}
    assert [a.get("saved") is not None for a in done["attempts"]] == [False, True, False, False]
    assert [a.get("resume", False) for a in done["attempts"]] == [False, False, True, True]
    said = jobtpu(home, "events", "--job", str(job_id)).stdout
    assert said.count("will rerun from scratch: no attempt saved a checkpoint") == 1, said
    note = f"job {job_id}: no attempt saved a checkpoint: attempt 1 reruns from scratch"
    assert sum(note in said for said in notes) == 1 and "attempt 2 reruns" not in "".join(notes), notes


def test_a_submit_with_a_bad_way_of_saving_queues_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2}}})
    src = write_tree(tmp_path / "src", {"x": ""})
    for bad, says in ((["--saved-when", "a(?=b)"], "--saved-when 'a(?=b)' is not a valid regular expression"),
                      (["--saved-marker", "../x"], "--saved-marker '../x' climbs out of the job's folder"),
                      (["--saved-marker", "x", "--checkpoints", "gs://b/run7"], "lacks {region}")):
        done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", *bad, check=False)
        assert done.returncode != 0 and says in done.stderr.splitlines()[0] and "Traceback" not in done.stderr, done.stderr
    assert status(home) == {} and not list((home / "archives").glob("*.tar.gz"))


def test_a_log_line_shows_a_save_and_the_retry_resumes_from_it(tmp_path: Path) -> None:
    """--saved-when: the line of attempt 0 that says it saved, as the pass brings it home."""
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2}}})
    script = ('echo "attempt $JOBTPU_ATTEMPT from ${JOBTPU_RESUME_FROM_ATTEMPT:-none}"\n'
              '[ "$JOBTPU_ATTEMPT" = 0 ] && echo "step 100: saved checkpoint" && exit 3\n'
              'echo "step 200: no save"\n')
    src = write_tree(tmp_path / "src", {"a.sh": script})
    job_id = submit(home, src, "bash a.sh", "--retries", "1", "--saved-when", r"saved checkpoint$")
    done = manage_until(home, [job_id], {"finished", "failed"}, timeout=120)[job_id]
    assert done["status"] == "finished" and [a.get("saved") is not None for a in done["attempts"]] == [True, False]
    assert (home / "logs" / str(job_id) / "1.0.log").read_text().startswith("attempt 1 from 0\n")


def test_a_member_s_submit_with_a_marker_that_climbs_out_is_refused(trio: Team) -> None:
    """bob rewrites his submit's marker before the runner takes it in: the runner refuses that submit
    in one line, as submit would, and queues nothing of it."""
    from tests.test_shared_ids import HANG, owners, shared_home
    from tests.test_shared_ids import submit as member_submit

    alice, bob, _ = trio.accounts
    home = shared_home(trio)
    refused = member_submit(trio, bob, home, "--saved-marker", "ckpt/SAVED")[0]
    claim = next((home / "spool").glob(f"submit-{refused}-1-*.json"))
    doc = json.loads(claim.read_text())
    assert doc["jobs"][0]["saving"] == {"marker": "ckpt/SAVED"}
    doc["jobs"][0]["saving"]["marker"] = "../../.ssh/SAVED"
    done = subprocess.run(["runuser", "-u", bob, "--", "bash", "-c", f"cat > {claim}"], input=json.dumps(doc),
                          capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr
    said = trio.run(alice, "--home", str(home), "manage", umask="0077")
    assert refused not in owners(trio, home), said.stderr
    assert "--saved-marker '../../.ssh/SAVED' climbs out of the job's folder (..)" in said.stderr, said.stderr


# A fake gcloud, first on the worker's PATH, that records its arguments, one line per call, and fails
# as gcloud does while the test leaves it a file that says so.
FAKE_GCLOUD = ('#!/bin/bash\necho "$*" >> "$HOME/gcloud-calls"\n'
               'if [ -e "$HOME/gcloud-fails" ]; then echo "ERROR: (gcloud.storage.rsync) 403 no access" >&2; exit 1; fi\n')


def _fake_gcloud(fm: Any) -> None:
    bindir = fm.home / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "gcloud").write_text(FAKE_GCLOUD)
    (bindir / "gcloud").chmod(0o755)
    rc = fm.home / ".bashrc"  # bash reads it for an ssh command, before its interactive-only part
    rc.write_text(f'export PATH="$HOME/bin:$PATH"\n{rc.read_text() if rc.exists() else ""}')
    uid, gid = fm.home.stat().st_uid, fm.home.stat().st_gid
    for p in (bindir, bindir / "gcloud", rc):
        os.chown(p, uid, gid)


def test_a_resume_in_another_region_copies_the_checkpoint_from_the_new_worker(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    from tests import test_ssh_jobs as ssh

    east, west = ssh_fleet.add_machine("east", n_hosts=1), ssh_fleet.add_machine("west", n_hosts=1)
    for fm in (east, west):
        _fake_gcloud(fm)
    home = tmp_path / "home"
    ssh.write_fleet(home, ssh_fleet, {"east": (east, {"zone": "us-east1-b"}), "west": (west, {"zone": "europe-west4-a"})})
    # Attempt 0 saves and fails; attempt 1, resumed on the other box, says what it was told.
    script = ('if [ "$JOBTPU_ATTEMPT" = 0 ]; then mkdir -p ckpt && touch ckpt/SAVED; exit 1; fi\n'
              'echo "told $JOBTPU_RESUME $JOBTPU_RESUME_FROM_ATTEMPT $JOBTPU_RESUME_FROM_DIR $JOBTPU_REGION"\n')
    src = write_tree(tmp_path / "src", {"a.sh": script})
    job_id = ssh.submit(home, src, "bash a.sh", "--machine", "east", "--saved-marker", "ckpt/SAVED",
                        "--checkpoints", "gs://ckpt-{region}/run7")
    first = ssh.manage_until(home, lambda s: s[job_id]["status"] == "failed", "attempt 0 to fail")[job_id]
    assert first["attempts"][0]["saved"]["region"] == "us-east1", first
    (west.home / "gcloud-fails").touch()  # a copy that fails fails the launch, in gcloud's words
    jobtpu(home, "resume", str(job_id), "--machine", "west")  # queued to resume; it lands on the other box
    refused = ssh.manage_until(home, lambda s: s[job_id]["status"] == "failed", "the launch to fail")[job_id]
    assert (refused["reason"], refused["last_line"]) == ("launch_failed", (
        "launch failed on worker 0: checkpoint copy gs://ckpt-us-east1/run7 -> gs://ckpt-europe-west4/run7 failed: "
        "gcloud storage rsync exited 1: ERROR: (gcloud.storage.rsync) 403 no access")), refused
    (west.home / "gcloud-fails").unlink()
    jobtpu(home, "resume", str(job_id))  # still pinned to west; attempt 1 never ran, so 0 is still the last save
    done = ssh.manage_until(home, lambda s: s[job_id]["status"] in ("finished", "failed"), "the resume to end")[job_id]
    assert done["status"] == "finished" and [a["machine"] for a in done["attempts"]] == ["east", "west", "west"], done
    copy = "storage rsync -r gs://ckpt-us-east1/run7 gs://ckpt-europe-west4/run7\n"
    assert (west.home / "gcloud-calls").read_text() == copy * 2
    assert not (east.home / "gcloud-calls").exists()
    # The folder attempt 0 ran in, under the login folder of the worker that reads it.
    log = (home / "logs" / str(job_id) / "2.0.log").read_text()
    assert log.strip() == f"told 1 0 {west.home}/jobtpu/jobs/{job_id} europe-west4", log

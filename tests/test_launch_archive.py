"""A launch runs exactly the snapshot its job names: checked against its name on the worker and in the
home, unpacked without trusting it, copied without collisions, fresh again on `rerun`. Through the CLI,
with real processes, real files, and a real sshd for the SSH transport."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home, manage, manage_until, status, submit, write_tree
from tests.sshfleet import SshFleet


def _src(tmp_path: Path, files: dict[str, str | bytes], name: str = "src") -> Path:
    return write_tree(tmp_path / name, files)


def _local_copy(home: Path, archive: str) -> Path:
    return home / "run" / "archives" / archive


def _tail(home: Path, job_id: int, *extra: str) -> str:
    return jobtpu(home, "tail", str(job_id), *extra).stdout


def _same_size_and_time(bad: bytes, good: Path) -> bytes:
    """`bad` cut or padded to good's size: a damaged copy a size-and-time check would not notice."""
    size = good.stat().st_size
    return (bad + b"\0" * size)[:size]


# ---- crafted archives (named the way jobtpu names snapshots, so only the unpack can refuse them) ------

def _digest_name(members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    h = hashlib.sha256()
    for info, data in members:
        kind = "l" if info.issym() else "x" if info.mode & 0o111 else "f"
        content = info.linkname.encode() if info.issym() else data
        h.update(b"%s\0%s\0%s\n" % (info.name.encode(), kind.encode(), hashlib.sha256(content).hexdigest().encode()))
    return f"{h.hexdigest()}.tar.gz"


def _member(name: str, data: bytes = b"", mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
            link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 3
    return info, data


def _write_crafted(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


def _point_job_at(home: Path, job_id: int, archive: str) -> None:
    """Hand-edit state.json (one job per line) so the queued job names another snapshot."""
    state = home / "state.json"
    old = status(home)[job_id]["archive"]
    lines = [ln.replace(old, archive) if f'"id":{job_id},' in ln.replace(" ", "") else ln
             for ln in state.read_text().splitlines()]
    state.write_text("\n".join(lines) + "\n")
    assert status(home)[job_id]["archive"] == archive


# ---- the worker's copy and the home's copy are checked against their name -------------------------

def test_a_damaged_copy_on_the_worker_is_replaced_and_the_job_runs_the_right_code(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    first = submit(home, _src(tmp_path, {"run.sh": "echo right code\n"}), "bash run.sh")
    manage_until(home, [first], {"finished"})
    archive = status(home)[first]["archive"]
    # The worker's copy now holds other code under the same name, with the size and time it had.
    worker_copy = _local_copy(home, archive)
    st = worker_copy.stat()
    wrong = _src(tmp_path, {"run.sh": "echo WRONG code\n"}, name="wrong")
    other = submit(home, wrong, "bash run.sh")
    wrong_archive = home / "archives" / status(home)[other]["archive"]
    jobtpu(home, "kill", str(other))
    worker_copy.write_bytes(_same_size_and_time(wrong_archive.read_bytes(), worker_copy))
    os.utime(worker_copy, ns=(st.st_atime_ns, st.st_mtime_ns))

    again = submit(home, tmp_path / "src", "bash run.sh")
    assert status(home)[again]["archive"] == archive
    jobs = manage_until(home, [again], {"finished", "failed"})
    assert jobs[again]["status"] == "finished", jobs[again]
    assert _tail(home, again) == "right code\n"
    assert worker_copy.read_bytes() == (home / "archives" / archive).read_bytes()


def test_a_damaged_snapshot_in_the_home_fails_the_job_with_a_reason_and_runs_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    ran = tmp_path / "ran"
    job_id = submit(home, _src(tmp_path, {"run.sh": f"touch {ran}\n"}), "bash run.sh")
    archive = home / "archives" / status(home)[job_id]["archive"]
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    job = manage(home)[job_id]
    assert (job["status"], job["reason"]) == ("failed", "launch_failed"), job
    assert "in the home is unusable" in job["last_line"], job["last_line"]
    assert not ran.exists()
    assert not (home / "run" / "jobs" / str(job_id)).exists()


def test_a_snapshot_missing_from_the_home_fails_in_one_pass_and_frees_its_slot(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}}})
    job_id = submit(home, _src(tmp_path, {"run.sh": "echo one\n"}), "bash run.sh")
    (home / "archives" / status(home)[job_id]["archive"]).unlink()
    job = manage(home)[job_id]
    assert (job["status"], job["reason"]) == ("failed", "launch_failed"), job
    assert "is missing" in job["last_line"], job["last_line"]
    other = submit(home, _src(tmp_path, {"run.sh": "echo two\n"}, name="other"), "bash run.sh")
    assert manage_until(home, [other], {"finished"}, timeout=30)[other]["exit_code"] == 0


# ---- a crafted archive under the right name cannot escape, keep setuid bits or make devices ------------

def test_modes_are_kept_but_setuid_bits_are_not(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job_id = submit(home, _src(tmp_path, {"x": "x\n"}), "true")
    members = [_member("plain.txt", b"text\n", 0o644), _member("run.sh", b"ls -l > modes.txt\n", 0o755),
               _member("suid", b"#!/bin/sh\n", 0o4755), _member("sub/tool", b"#!/bin/sh\n", 0o2775)]
    name = _digest_name(members)
    _write_crafted(home / "archives" / name, members)
    _point_job_at(home, job_id, name)
    job = manage_until(home, [job_id], {"finished", "failed"})[job_id]
    assert job["status"] == "finished", job
    folder = home / "run" / "jobs" / str(job_id)
    modes = {rel: stat.S_IMODE((folder / rel).stat().st_mode) for rel in ("plain.txt", "run.sh", "suid", "sub/tool")}
    # The exec bit is kept, setuid/setgid are not; in a private home the run folder is the owner's
    # alone (docs/design.md §4), so the umask of its scripts (077) leaves group and others nothing.
    assert modes == {"plain.txt": 0o600, "run.sh": 0o700, "suid": 0o700, "sub/tool": 0o700}


@pytest.mark.parametrize("case", ["parent", "absolute", "device", "fifo", "through-symlink", "hard-link"])
def test_a_crafted_archive_cannot_write_outside_the_job_folder_or_make_special_files(
        tmp_path: Path, case: str) -> None:
    home = make_home(tmp_path)
    ran, outside = tmp_path / "ran", tmp_path / "outside"
    outside.mkdir()
    job_id = submit(home, _src(tmp_path, {"x": "x\n"}), f"touch {ran}")
    evil = {
        "parent": [_member("../../escaped", b"pwned\n")],
        "absolute": [_member(str(outside / "escaped"), b"pwned\n")],
        "device": [_member("null", kind=tarfile.CHRTYPE)],
        "fifo": [_member("pipe", kind=tarfile.FIFOTYPE)],
        "through-symlink": [_member("link", kind=tarfile.SYMTYPE, link=str(outside)),
                            _member("link/escaped", b"pwned\n")],
        "hard-link": [_member("passwd", kind=tarfile.LNKTYPE, link="/etc/passwd")],
    }[case]
    members = [_member("run.sh", b"echo ran\n", 0o755), *evil]
    name = _digest_name(members)
    for where in (home / "archives", home / "run" / "archives"):  # the worker's copy is checked too
        _write_crafted(where / name, members)
    _point_job_at(home, job_id, name)
    job = manage(home)[job_id]
    assert (job["status"], job["reason"]) == ("failed", "launch_failed"), job
    assert "unusable" in job["last_line"], job["last_line"]
    assert not ran.exists()
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in (home / "run").iterdir()) == ["archives", "jobs", "meta", "stop"]  # stop: teammates' stop requests
    assert [p.name for p in (home / "run" / "jobs").iterdir()] == []


# ---- jobs sharing a new snapshot all start in one pass; logs hold only the jobs' output -------------

def _big_src(tmp_path: Path) -> Path:
    # Big enough (incompressible) that four copies of it overlap in time.
    return _src(tmp_path, {"run.sh": "echo right code\n", "weights.bin": os.urandom(24 << 20)})


def _four_jobs_start_in_one_pass(home: Path, src: Path) -> list[int]:
    ids = [submit(home, src, 'echo "job $JOBTPU_JOB_ID"; sleep 2') for _ in range(4)]
    assert len({status(home)[i]["archive"] for i in ids}) == 1
    jobs = manage(home)
    assert {jobs[i]["status"] for i in ids} == {"running"}, {i: (jobs[i]["status"], jobs[i]["last_line"]) for i in ids}
    jobs = manage_until(home, ids, {"finished", "failed"}, timeout=60)
    for i in ids:
        assert jobs[i]["status"] == "finished", jobs[i]
        assert _tail(home, i) == f"job {i}\n"  # the job's output and nothing jobtpu printed
        assert jobs[i]["last_line"] == f"job {i}", jobs[i]
    return ids


def test_four_jobs_sharing_a_new_snapshot_all_start_in_one_pass_locally(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    _four_jobs_start_in_one_pass(home, _big_src(tmp_path))
    # No temporary copy is left; the snapshot's verified tree (docs/design.md §4) is kept on purpose.
    leftovers = [p.name for p in (home / "run" / "archives").iterdir()
                 if p.name.startswith(".") and not p.name.startswith(".tree.")]
    assert leftovers == []


def test_four_jobs_sharing_a_new_snapshot_all_start_in_one_pass_over_ssh(ssh_fleet: SshFleet,
                                                                          tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    home.mkdir()
    spec = {"kind": "ssh", "hosts": [h.address() for h in fm.hosts], "user": fm.user,
            "identity_file": str(ssh_fleet.identity), "connect_timeout": 3, "resources": {"slot": 4}}
    (home / "machines.json").write_text(json.dumps({"machines": {"box": spec}}))
    src = _big_src(tmp_path)
    _four_jobs_start_in_one_pass(home, src)
    # A damaged copy with the size and time rsync would compare is replaced, not skipped.
    again = submit(home, src, "bash run.sh")
    archive = status(home)[again]["archive"]
    remote = fm.home / "jobtpu" / "archives" / archive
    st = remote.stat()
    remote.write_bytes(_same_size_and_time(b"not a snapshot", remote))
    os.utime(remote, ns=(st.st_atime_ns, st.st_mtime_ns))
    jobs = manage_until(home, [again], {"finished", "failed"}, timeout=60)
    assert jobs[again]["status"] == "finished", jobs[again]
    assert _tail(home, again) == "right code\n"
    assert remote.read_bytes() == (home / "archives" / archive).read_bytes()


# ---- rerun starts from the snapshot; resume keeps the folder ---------------------------------------

def test_rerun_starts_from_the_snapshot_and_resume_keeps_the_folder(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    script = "cat data.txt; echo modified > data.txt; rm run.sh; mkdir -p out; touch out/x\n"
    job_id = submit(home, _src(tmp_path, {"run.sh": script, "data.txt": "original\n"}), "bash run.sh || cat data.txt")
    manage_until(home, [job_id], {"finished"})
    assert _tail(home, job_id, "--attempt", "0") == "original\n"
    jobtpu(home, "resume", str(job_id))
    manage_until(home, [job_id], {"finished"})
    assert _tail(home, job_id, "--attempt", "1").splitlines()[-1] == "modified"  # run.sh is gone too
    jobtpu(home, "rerun", str(job_id))
    manage_until(home, [job_id], {"finished"})
    assert _tail(home, job_id, "--attempt", "2") == "original\n"
    # The folder the earlier attempts left was removed, not kept aside.
    assert [p.name for p in (home / "run" / "jobs").iterdir()] == [str(job_id)]


def test_rerun_on_workers_sharing_one_root_resets_the_folder_once(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("pod", n_hosts=3)  # one login, so one root for the three workers
    home = tmp_path / "home"
    home.mkdir()
    spec = {"kind": "ssh", "hosts": [h.address() for h in fm.hosts], "user": fm.user,
            "identity_file": str(ssh_fleet.identity), "connect_timeout": 3}
    (home / "machines.json").write_text(json.dumps({"machines": {"pod": spec}}))
    cmd = ('cat data.txt; touch "seen-$JOBTPU_ATTEMPT-$JOBTPU_WORKER"; '
           'if [ "$JOBTPU_ATTEMPT" = 0 ]; then echo "modified by $JOBTPU_WORKER" > data.txt; fi')
    job_id = submit(home, _src(tmp_path, {"data.txt": "original\n"}), cmd)
    manage_until(home, [job_id], {"finished"}, timeout=60)
    folder = fm.home / "jobtpu" / "jobs" / str(job_id)
    assert (folder / "data.txt").read_text().startswith("modified")
    jobtpu(home, "rerun", str(job_id))
    first = manage(home)[job_id]  # the workers that did not reset waited for the one that did
    assert first["status"] in ("running", "finished"), first
    job = manage_until(home, [job_id], {"finished", "failed"}, timeout=60)[job_id]
    assert job["status"] == "finished", job
    for w in range(3):
        assert _tail(home, job_id, "--attempt", "1", "--worker", str(w)) == "original\n"
    # Reset once, before any worker of the attempt started: none of their marks was swept away.
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("seen-")) == \
        ["seen-1-0", "seen-1-1", "seen-1-2"]


def test_a_reset_left_by_a_dead_pass_is_taken_over_once_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobtpu.decide.workers import LaunchSpec, WorkerRef
    from jobtpu.remote.scripts import claim_stale_minutes, launch_script, parse_launch
    from jobtpu.snapshot.archive import snapshot

    root = tmp_path / "root"
    snap = snapshot(_src(tmp_path, {"data.txt": "original\n"}), root / "archives")
    folder = root / "jobs" / "7"
    write_tree(folder, {"data.txt": "left by attempt 0\n"})
    reset = root / "meta" / "7" / "1.reset"
    reset.mkdir(parents=True)  # the pass that began resetting for attempt 1 died
    ref = WorkerRef(7, 1, 0)
    monkeypatch.setenv("JOBTPU_TIMING", json.dumps({"reset_wait": 0.5}))  # the wait for a reset, shortened
    script = launch_script([LaunchSpec(ref, str(root), snap.name, "cat data.txt", {}, fresh=True)])

    def launch() -> str:
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        return parse_launch(done.stdout)[ref].outcome

    assert launch() == "pending"  # a fresh reset: another worker may be replacing the folder now
    assert (folder / "data.txt").read_text() == "left by attempt 0\n"
    old = time.time() - 60 * (claim_stale_minutes() + 1)
    os.utime(reset, (old, old))
    assert launch() == "ok"
    assert launch() == "ok"
    deadline = time.monotonic() + 10
    while not (root / "meta" / "7" / "1.0.exit").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (root / "meta" / "7" / "1.0.log").read_text() == "original\n"


def test_a_snapshot_unpacks_as_it_was_taken(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"run.sh": "true\n", "bin/tool": "#!/bin/sh\necho tool\n", "deep/a/b/c.txt": "c\n",
                          "empty": "", "naïve name.txt": "ü\n", "big.bin": os.urandom(3 << 20)})
    (src / "bin" / "tool").chmod(0o755)
    (src / "link").symlink_to("deep/a/b/c.txt")
    (src / "abs-link").symlink_to("/nonexistent/target")
    job_id = submit(home, src, "bash run.sh && bin/tool > tool.out")
    assert manage_until(home, [job_id], {"finished", "failed"})[job_id]["status"] == "finished"
    folder = home / "run" / "jobs" / str(job_id)
    assert (folder / "tool.out").read_text() == "tool\n"
    (folder / "tool.out").unlink()

    def tree(base: Path) -> dict[str, tuple[str, int, bytes | str]]:
        out: dict[str, tuple[str, int, bytes | str]] = {}
        for path in sorted(base.rglob("*")):
            rel = str(path.relative_to(base))
            if path.is_symlink():
                out[rel] = ("link", 0, os.readlink(path))
            elif path.is_file():
                out[rel] = ("file", 0o755 if path.stat().st_mode & 0o111 else 0o644, path.read_bytes())
        return out

    assert tree(folder) == tree(src)
    modes = {stat.S_IMODE(p.lstat().st_mode) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
    assert modes == {0o700, 0o600}  # the two recorded modes, cut to the owner's in a private home (design §4)


def test_an_unpack_cut_short_is_cleaned_up_by_a_later_launch_once_stale(tmp_path: Path) -> None:
    from jobtpu.decide.workers import LaunchSpec, WorkerRef
    from jobtpu.remote.scripts import claim_stale_minutes, launch_script, parse_launch
    from jobtpu.snapshot.archive import snapshot

    root = tmp_path / "root"
    snap = snapshot(_src(tmp_path, {"data.txt": "original\n"}), root / "archives")
    stale = write_tree(root / "jobs" / ".unpack.7.0.dead01", {"big.bin": "half written"})
    old = time.time() - 60 * (claim_stale_minutes() + 1)
    os.utime(stale, (old, old))
    fresh = write_tree(root / "jobs" / ".unpack.7.0.live01", {"big.bin": "being written now"})
    other = write_tree(root / "jobs" / ".unpack.8.0.dead02", {"big.bin": "another job's"})
    os.utime(other, (old, old))
    ref = WorkerRef(7, 0, 0)
    script = launch_script([LaunchSpec(ref, str(root), snap.name, "cat data.txt", {}, fresh=True)])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert parse_launch(done.stdout)[ref].outcome == "ok"
    assert not stale.exists()
    assert fresh.exists() and other.exists()  # an unpack may still be running; job 8 cleans its own
    assert sorted(p.name for p in (root / "jobs").iterdir()) == [".unpack.7.0.live01", ".unpack.8.0.dead02", "7"]

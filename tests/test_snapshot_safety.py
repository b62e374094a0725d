"""A snapshot holds exactly the folder, through the real CLI: never the home's own files, never content
reached through a symlinked folder, never a silently empty folder, never a stale hash; and an interrupted
snapshot stops at once and leaves nothing behind."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import helpers
from tests.accounts import Team
from tests.helpers import JOBTPU, jobtpu, make_home, status, wait_for, write_tree

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
PROJECT = {"train.py": "print('train')\n", "pkg/model.py": "W = 1\n"}
# What a home that has been used for a while holds besides machines.json (jobtpu writes all of it).
HOME_FILES = {"state.json": '{"jobs": []}', "state.json.bak": "{}", "last_id": "7\n", "home_id": "0123456789abcdef\n", "state.json.lock": "", "manage.lock": "", "history.jsonl": '{"id": 7}\n',
              "known_hosts": "host ssh-ed25519 AAAA\n", "known_hosts.lock": "", "secrets.json.lock": "",
              "logs/7/1.0.log": "old log\n", "results/7/out.txt": "result\n", "run/jobs/7/train.py": "old\n",
              "cache/status/tester": "cached\n", "archives/old.tar.gz": "not really an archive"}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def submit_json(home: Path, src: Path, *extra: str, use_home_flag: bool = True,
                cwd: Path | None = None) -> dict[str, object]:
    """A submit whose job carries a secret (it must never land in the snapshot)."""
    return helpers.submit_json(home, src, "true", "--env", "WANDB_API_KEY=s3cret-value", *extra,
                               use_home_flag=use_home_flag, cwd=cwd)


def size(path: Path) -> int:
    """Its size, 0 once it is gone (a temporary file renamed meanwhile)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def archive_members(home: Path, name: object) -> dict[str, bytes | str]:
    """Each member: its bytes, or "-> target" for a symlink."""
    with tarfile.open(home / "archives" / str(name)) as tf:
        out: dict[str, bytes | str] = {}
        for m in tf.getmembers():
            f = tf.extractfile(m) if m.isfile() else None
            out[m.name] = f.read() if f is not None else f"-> {m.linkname}"
        return out


@pytest.mark.parametrize("layout", ["folder-is-home", "found-by-machines-json", "home-in-subfolder",
                                    "git-tracked", "git-untracked", "local-root-configured"])
def test_submit_from_inside_the_home_packs_none_of_its_files(tmp_path: Path, layout: str) -> None:
    if layout == "home-in-subfolder":
        project = tmp_path / "project"
        home = make_home(project)  # project/home
    else:  # the project folder is the home: it holds the machines.json
        machines = {"local": {"kind": "local", "resources": {"slot": 4}, "root": "scratch"}} \
            if layout == "local-root-configured" else None
        project = home = make_home(tmp_path, machines)
    write_tree(project, PROJECT)
    write_tree(home, HOME_FILES)
    if layout == "local-root-configured":
        write_tree(home, {"scratch/jobs/7/train.py": "old\n"})
    if layout.startswith("git"):
        git(project, "init", "-q")
        if layout == "git-tracked":  # even files a user force-added are jobtpu's, not the job's
            git(project, "add", "-f", "-A")
            git(project, "commit", "-q", "-m", "everything")
    by_rule = layout == "found-by-machines-json"
    extra = ("--include", "*") if layout == "git-untracked" else ()  # naming everything takes none of them
    first = submit_json(home, project, *extra, use_home_flag=not by_rule, cwd=project)
    assert (home / "state.json").exists() and (home / "secrets.json").exists()
    second = submit_json(home, project, *extra, use_home_flag=not by_rule, cwd=project)
    in_home = "home/" if layout == "home-in-subfolder" else ""
    expected = {**PROJECT, f"{in_home}machines.json": (home / "machines.json").read_text()}
    members = archive_members(home, first["archive"])
    assert members == {k: v.encode() for k, v in expected.items()}
    assert second["archive"] == first["archive"]  # the first submit's state, secrets and archive stay out
    assert sorted(p.name for p in (home / "archives").glob("*.tar.gz")) == sorted(
        ["old.tar.gz", str(first["archive"])])
    assert not any(b"s3cret-value" in v for v in members.values() if isinstance(v, bytes))


def test_a_tracked_file_under_a_folder_now_a_symlink_out_brings_nothing_in(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    outside = write_tree(tmp_path / "outside", {"file": "OUTSIDE SECRET\n", "other": "OUTSIDE TOO\n"})
    src = write_tree(tmp_path / "src", {"a.py": "a\n", "d/file": "inside\n", "e/deep/f.py": "f\n",
                                        "lnk": "placeholder"})
    git(src, "init", "-q")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "tree")
    for folder in ("d", "e"):
        subprocess.run(["rm", "-rf", str(src / folder)], check=True)
    os.symlink(outside, src / "d")  # git still tracks d/file: it lists it, and reading it would follow d
    os.symlink("../outside", src / "e")
    (src / "lnk").unlink()
    os.symlink(outside / "file", src / "lnk")  # a symlinked *file* stays a symlink in the archive
    done = jobtpu(home, "submit", "--json", "--dir", str(src), "--cmd", "true")
    members = archive_members(home, json.loads(done.stdout)["archive"])
    assert not any(b"OUTSIDE" in v for v in members.values() if isinstance(v, bytes))
    assert members == {"a.py": b"a\n", "d": f"-> {outside}", "e": "-> ../outside", "lnk": f"-> {outside}/file"}
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "symlinked" in lines[0] and "d, e" in lines[0] and "2 files" in lines[0], lines


@pytest.mark.parametrize("folder", ["build", "build/sub"])
def test_a_dir_the_checkout_ignores_is_one_error_and_no_job(tmp_path: Path, folder: str) -> None:
    home = make_home(tmp_path)
    repo = write_tree(tmp_path / "repo", {".gitignore": "build/\n", "a.py": "a\n", "build/sub/train.py": "t\n"})
    git(repo, "init", "-q")
    done = jobtpu(home, "submit", "--dir", str(repo / folder), "--cmd", "true", check=False)
    assert done.returncode != 0 and done.stdout == ""
    error, *rest = done.stderr.splitlines()
    assert error.startswith("jobtpu: error: git ignores the folder to snapshot") and "Traceback" not in done.stderr
    assert len(rest) == 1 and rest[0].startswith("hint:") and "--include" in rest[0]
    assert status(home) == {} and not list((home / "archives").glob("*.tar.gz"))
    # taking its files on purpose still works
    done = jobtpu(home, "submit", "--json", "--dir", str(repo / folder), "--cmd", "true", "--include", "*")
    expected = {"build": {"sub/train.py": b"t\n"}, "build/sub": {"train.py": b"t\n"}}[folder]
    assert archive_members(home, json.loads(done.stdout)["archive"]) == expected


def test_a_same_size_edit_with_its_mtime_restored_makes_a_new_archive(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"config.py": "lr = 0.1\n", "other.py": "x\n"})
    old = 10**18  # long ago: the hash cache keeps it (a file modified within a second is never cached)
    for p in src.iterdir():
        os.utime(p, ns=(old, old))
    first = json.loads(jobtpu(home, "submit", "--json", "--dir", str(src), "--cmd", "true").stdout)
    assert (home / "archives" / ".hashcache.json").exists()
    with open(src / "config.py", "r+b") as f:  # in place: same inode, same size
        f.write(b"lr = 0.2\n")
    os.utime(src / "config.py", ns=(old, old))  # as `touch -r`, `rsync -t` or a checkout tool would
    second = json.loads(jobtpu(home, "submit", "--json", "--dir", str(src), "--cmd", "true").stdout)
    assert second["archive"] != first["archive"]
    assert archive_members(home, second["archive"])["config.py"] == b"lr = 0.2\n"


@pytest.fixture(scope="module")
def big_src(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with a 300 MB incompressible file: its snapshot takes seconds."""
    src = tmp_path_factory.mktemp("big") / "src"
    src.mkdir()
    chunk = os.urandom(8 << 20)  # deflate's window is 32 KiB, so a repeated 8 MiB chunk stays incompressible
    with open(src / "weights.bin", "wb") as f:
        for _ in range(300 >> 3):
            f.write(chunk)
    (src / "train.py").write_text("print()\n")
    yield src


@pytest.mark.parametrize(("sig", "code", "line"), [(signal.SIGINT, 130, "jobtpu: interrupted"),
                                                   (signal.SIGTERM, 143, "jobtpu: terminated")])
def test_an_interrupted_snapshot_stops_at_once_and_leaves_nothing(tmp_path: Path, big_src: Path,
                                                                  sig: signal.Signals, code: int, line: str) -> None:
    home = make_home(tmp_path)
    archives = home / "archives"
    proc = subprocess.Popen([*JOBTPU, "--home", str(home), "submit", "--dir", str(big_src), "--cmd", "true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "JOBTPU_USER": "tester"},
                            # as from a terminal, whatever the test runner's own SIGINT disposition
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def archiving() -> bool:  # mid-way through the big file: the archive being written has grown
        assert proc.poll() is None, proc.communicate()
        partial = [p for p in archives.iterdir() if not p.name.endswith(".tar.gz")] if archives.exists() else []
        return any(size(p) > (4 << 20) for p in partial if p.name != ".hashcache.json")

    wait_for(archiving, timeout=60, interval=0.02, what="the snapshot to be mid-way")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code and out == "" and err.splitlines() == [line], (proc.returncode, out, err)
    # At once: it stopped mid-way, so no archive was finished (one that ran on to the end would be
    # there), and the partial one is gone.
    assert sorted(p.name for p in archives.iterdir() if p.name != ".hashcache.json") == []
    assert status(home) == {}


def test_a_temporary_archive_left_by_a_dead_submit_is_removed_by_the_next(tmp_path: Path) -> None:
    # SIGKILL or a power cut leaves no chance to clean up: the next snapshot does it for the dead process
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", PROJECT)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    write_tree(home / "archives", {f".snapshot.{pid_max + 1}.0123abcd.tmp": b"\0" * 1000,  # no such process
                                   f".snapshot.{os.getpid()}.4567cdef.tmp": "still being written"})
    jobtpu(home, "submit", "--dir", str(src), "--cmd", "true")
    assert sorted(p.name for p in (home / "archives").glob("*.tmp")) == [f".snapshot.{os.getpid()}.4567cdef.tmp"]


PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n"


@pytest.mark.parametrize(("rel", "content", "exclude"), [
    (".ssh/id_ed25519", "key", ".ssh"), (".gnupg/pubring.kbx", "ring", ".gnupg"),
    (".aws/credentials", "[default]", ".aws"), (".config/gcloud/credentials.db", "db", ".config/gcloud"),
    ("deploy/id_rsa", "key", "deploy/id_rsa"), ("certs/server.pem", PEM_CERT + PEM_KEY, "certs/server.pem"),
    ("certs/deploy_key", PEM_KEY, "certs/deploy_key")])
def test_a_folder_holding_credentials_is_refused_in_one_line_unless_asked(
        tmp_path: Path, rel: str, content: str, exclude: str) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {**PROJECT, rel: content, "certs/ca.pem": PEM_CERT,
                                        "keys/id_rsa.pub": "ssh-rsa AAAA\n"})
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", check=False)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    error, hint = done.stderr.splitlines()
    assert error.startswith(f"jobtpu: error: the snapshot of {src} would carry {exclude} "), error
    assert "--allow-secrets" in hint and f"--exclude {exclude}" in hint, hint
    assert status(home) == {} and not list((home / "archives").glob("*.tar.gz"))
    kept = json.loads(jobtpu(home, "submit", "--json", "--dir", str(src), "--cmd", "true",
                             "--exclude", exclude).stdout)  # left out as the hint says
    assert rel not in archive_members(home, kept["archive"])
    sent = json.loads(jobtpu(home, "submit", "--json", "--dir", str(src), "--cmd", "true",
                             "--allow-secrets").stdout)  # meant: taken as it is
    assert archive_members(home, sent["archive"])[rel] == content.encode()
    assert "--allow-secrets" in jobtpu(home, "submit", "--help").stdout


def test_an_ignored_key_is_not_a_reason_to_refuse(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {**PROJECT, ".gitignore": ".ssh/\n*.pem\n", ".ssh/id_ed25519": "key",
                                        "server.pem": PEM_KEY})
    members = archive_members(home, submit_json(home, src)["archive"])
    assert set(members) == {*PROJECT, ".gitignore"}


def test_a_submit_from_the_login_home_folder_is_refused(team: Team) -> None:
    alice = team.accounts[0]
    home = team.private_folder(alice, "home")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local",
                                                                           "resources": {"slot": 1}}}}))
    os.chown(home / "machines.json", team.uid(alice), team.uid(alice))
    login = Path(pwd.getpwnam(alice).pw_dir)
    done = team.run(alice, "--home", str(home), "submit", "--cmd", "true", cwd=login, check=False)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    error, hint = done.stderr.splitlines()
    assert error == (f"jobtpu: error: the folder to snapshot is your login home folder {login}: its keys and "
                     "credentials would go to the team and to the machines"), error
    assert "--allow-secrets" in hint and "--dir" in hint
    assert not (home / "state.json").exists() or "jobs\": []" in (home / "state.json").read_text()
    assert not list((home / "archives").glob("*.tar.gz"))
    team.run(alice, "--home", str(home), "submit", "--cmd", "true", "--allow-secrets", cwd=login)

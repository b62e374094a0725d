"""`submit --dry-run` checks everything a real submit checks and changes nothing
(docs/reference/commands.md §2.2): a mistake is the very line the submit would say, with its exit
code, and no snapshot, id or state is written; a good request prints its options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home, write_tree

# (what is wrong, the words after `submit --dir SRC`): each one a real submit refuses
MISTAKES = [
    ("a request no machine has", ["--cmd", "true", "--req", "slot=lots"]),
    ("a request beyond every machine", ["--cmd", "true", "--req", "slot=99"]),
    ("an unknown machine", ["--cmd", "true", "--machine", "nosuch"]),
    ("a sweep without values", ["--cmd", "true", "--sweep", "lr="]),
    ("a sweep that is no KEY=V1,V2", ["--cmd", "true", "--sweep", "lr"]),
    ("a bad timeout", ["--cmd", "true", "--timeout", "soon"]),
    ("an empty command", ["--cmd", " "]),
    ("a dependency on no job", ["--cmd", "true", "--after", "77"]),
    ("a bad --progress", ["--cmd", "true", "--progress", "step (\\d+"]),
]


def _written(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")}


@pytest.mark.parametrize(("what", "words"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_dry_run_says_the_submits_own_line_for_a_mistake_and_writes_nothing(tmp_path: Path, what: str,
                                                                                words: list[str]) -> None:
    home = make_home(tmp_path, slots=2)
    src = write_tree(tmp_path / "src", {"train.py": "print(1)\n"})
    before = _written(home)
    dry = jobtpu(home, "submit", "--dir", str(src), *words, "--dry-run", check=False)
    assert _written(home) == before, f"{what}: a dry run wrote {_written(home) - before}"
    real = jobtpu(home, "submit", "--dir", str(src), *words, check=False)
    assert real.returncode != 0, f"{what}: the real submit took it"
    assert (dry.returncode, dry.stdout, dry.stderr) == (real.returncode, real.stdout, real.stderr), what
    assert len(dry.stderr.strip().splitlines()) <= 2 and "Traceback" not in dry.stderr, dry.stderr


def test_a_dry_run_refuses_a_folder_the_snapshot_would_refuse_and_writes_nothing_either_way(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=2)
    keyed = write_tree(tmp_path / "keyed", {"train.py": "print(1)\n",
                                            "id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n"})
    dry = jobtpu(home, "submit", "--dir", str(keyed), "--cmd", "true", "--dry-run", check=False)
    assert dry.returncode != 0 and "id_rsa" in dry.stderr, dry.stderr
    missing = jobtpu(home, "submit", "--dir", str(tmp_path / "gone"), "--cmd", "true", "--dry-run", check=False)
    assert missing.returncode != 0 and "does not exist" in missing.stderr, missing.stderr
    assert not (home / "archives").exists() and not (home / "state.json").exists()
    # a good one prints its options, and still writes nothing
    before = _written(home)
    src = write_tree(tmp_path / "src", {"train.py": "print(1)\n"})
    shown = jobtpu(home, "submit", "--dir", str(src), "--cmd", "python train.py", "--sweep", "lr=0.1,0.2",
                   "--dry-run").stdout.splitlines()
    assert shown == ["cmd: python train.py", f"dir: {src}", "sweep: lr=0.1,0.2"], shown
    assert _written(home) == before


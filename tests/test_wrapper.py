"""The wrapper's helpers (jobtpu/remote/sh/wrapper.sh) in a real bash: what they leave behind when the
job ends. The wrapper records the job's exit only once its --signal timer and its stop watcher are
gone, so nothing marked with the job may outlive that record (docs/reference/commands.md §2.2.6)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jobtpu.remote import scripts

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


@pytest.mark.parametrize("helper", [
    "JOBTPU_w_timer USR1 30 $$",  # --signal USR1 due in 30 s
    "JOBTPU_w_stopper \"$PWD/no-request\" 30 5 $$",  # a stop watcher polling every 30 s
])
def test_a_helper_ended_by_term_is_gone_with_its_sleep(helper: str, tmp_path: Path) -> None:
    """A `sleep` that takes half a second to die (as on a loaded machine) must be waited for: the
    helper's end is what the wrapper waits on before it records the job's exit."""
    real_sleep = shutil.which("sleep")
    fake = tmp_path / "bin" / "sleep"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/bash\ntrap \'kill "$c"; {real_sleep} 0.5; echo gone >> "$PWD/gone"; exit 0\' TERM\n'
                    f'{real_sleep} "$1" & c=$!; wait\n')
    fake.chmod(0o755)
    body = (f'PATH={tmp_path / "bin"}:$PATH\n'
            f'{helper} & helper=$!\n'
            f'{real_sleep} 0.3\n'  # the helper is in its sleep
            'kill "$helper"; wait "$helper"\n'
            '[ -s gone ] && echo "sleep gone" || echo "sleep left behind"\n')
    text = "\n".join(["set -u", scripts.script_file("common.sh"), scripts.script_file("wrapper.sh"), body])
    done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert done.stdout.strip() == "sleep gone", done.stdout + done.stderr

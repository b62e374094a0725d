"""Secret-looking --env values (API keys, tokens, passwords) kept out of state.json: they live in
the home's secrets.json, and state.json holds just their names. In a private home the file is its
owner's alone (0600); in a home a group shares it is the group's (0660), because whichever member
runs the next pass must read every job's secrets to launch it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home, is_shared, write_atomic
from jobtpu.home.safefs import CAP_LARGE, read_regular
from jobtpu.home.store import hold_lock
from jobtpu.schema.decode import read_file
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.secrets import Secrets, SecretsFile

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
MASK = "<secret>"  # what state.json and every listing show instead of the value


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(what state.json may hold, with secrets masked; the secret values)."""
    secret = {k: v for k, v in env.items() if is_secret(k)}
    return {k: (MASK if k in secret else v) for k, v in env.items()}, secret


class SecretStore:
    """secrets.json: {"<job id>": {"NAME": "value"}}. Every change is a read-modify-write under the
    file's own lock: `submit` (under the state lock) and `clean` (under the pass lock) may overlap."""

    def __init__(self, home: Home) -> None:
        self.root = home.root
        self.path: Path = home.root / "secrets.json"
        self.lock: Path = home.root / "secrets.json.lock"
        self.pass_lock: Path = home.pass_lock
        self.shared = is_shared(home.root)

    def check_keeper(self) -> None:
        """Whether this account may file secrets where every pass can read them. In a shared home any
        member may, once secrets.json is the group's (a private one left by an older jobtpu is
        refused until its owner shares it). In a private home secrets.json is readable by its owner
        alone and a pass reads it: only the account that runs `jobtpu manage` (the owner of
        manage.lock) may file secrets; a file written by another account would stop every pass."""
        if self.shared:
            self._check_group_readable()
            return
        me = os.geteuid()
        for path in (self.path, self.pass_lock):
            try:
                owner = os.stat(path, follow_symlinks=False).st_uid
            except FileNotFoundError:
                continue
            if owner != me:
                raise JobtpuError(
                    f"secret --env values in this home are kept by {_user_name(owner)}, who runs `jobtpu manage` "
                    f"({path.name} is theirs); secrets.json is readable by that account alone",
                    hint="ask them to submit this job, or have the job read the value from a file of yours")

    def _check_group_readable(self) -> None:
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return
        if st.st_uid != os.geteuid() and not st.st_mode & 0o040:
            raise JobtpuError(
                f"{self.path.name} in this shared home is readable by {_user_name(st.st_uid)} alone, so "
                "neither your secrets nor a pass of yours could use it",
                hint=f"ask {_user_name(st.st_uid)} to run `jobtpu init --shared GROUP` on this home, which "
                     "makes it the group's")

    def _read(self) -> Secrets:
        """The stored secrets. A damaged file is an error, not an empty one: the next write would
        otherwise drop every other job's secrets."""
        try:
            raw = read_regular(self.root, self.path, CAP_LARGE)
        except FileNotFoundError:
            return {}
        return decode_secrets(raw, self.path)

    def check(self) -> None:
        self._read()

    def _write(self, data: Secrets) -> None:
        # The owner's alone, except in a home of the old shared layout, where every member's pass read
        # it; in the one-writer layout only the runner's passes read it (docs/reference/home-files.md §1.5).
        write_atomic(self.path, msgspec.json.encode(data), mode=0o660 if self.shared else 0o600)

    def put(self, job_id: int, values: dict[str, str]) -> None:
        self.put_many([job_id], values)

    def put_many(self, job_ids: list[int], values: dict[str, str]) -> None:
        """The same values for each job (a sweep's), in one read and one write of secrets.json."""
        if values and job_ids:
            self.check_keeper()
            with hold_lock(self.lock, 30.0, "secrets.json"):
                data = self._read()
                for job_id in job_ids:
                    data[str(job_id)] = dict(values)
                self._write(data)

    def get(self, job_id: int) -> dict[str, str]:
        return dict(self._read().get(str(job_id), {}))

    def get_many(self, job_ids: list[int]) -> dict[int, dict[str, str]]:
        """Each job's, in one read of secrets.json (a sweep's thousand members)."""
        data = self._read()
        return {job_id: dict(data.get(str(job_id), {})) for job_id in job_ids}

    def keep_only(self, held: set[int]) -> None:
        """Drop the secrets of every id not in `held` (call it under the state lock)."""
        with hold_lock(self.lock, 30.0, "secrets.json"):
            data = self._read()
            kept = {k: v for k, v in data.items() if int(k) in held}
            if kept != data:
                self._write(kept)

    def drop(self, job_ids: list[int]) -> None:
        gone = {str(i) for i in job_ids}
        with hold_lock(self.lock, 30.0, "secrets.json"):
            data = self._read()
            if gone & data.keys():
                self._write({k: v for k, v in data.items() if k not in gone})


def decode_secrets(raw: bytes, path: Path) -> Secrets:
    hint = f"fix {path} by hand (or delete it: queued jobs then run without their secrets)"
    secrets: Secrets = read_file(raw, SecretsFile, path, path.name, hint)
    return secrets


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"

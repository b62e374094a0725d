"""Secret-looking --env values (API keys, tokens, passwords) kept out of state.json: they live in
the home's secrets.json, readable by its owner only, and state.json holds just their names."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson

from .home import Home
from .store import hold_lock

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
        self.path: Path = home.root / "secrets.json"
        self.lock: Path = home.root / "secrets.json.lock"

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            data = orjson.loads(self.path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, dict[str, str]]) -> None:
        tmp = self.path.with_name(".secrets.json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def put(self, job_id: int, values: dict[str, str]) -> None:
        if values:
            with hold_lock(self.lock, 30.0, "secrets.json"):
                data = self._read()
                data[str(job_id)] = values
                self._write(data)

    def get(self, job_id: int) -> dict[str, str]:
        return dict(self._read().get(str(job_id), {}))

    def drop(self, job_ids: list[int]) -> None:
        gone = {str(i) for i in job_ids}
        with hold_lock(self.lock, 30.0, "secrets.json"):
            data = self._read()
            if gone & data.keys():
                self._write({k: v for k, v in data.items() if k not in gone})

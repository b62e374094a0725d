"""The names of a job record's fields and status words, as plain constants: what a listing needs
without importing the model (model.py checks at import that they match its dataclasses)."""

import re

STATUSES = frozenset({"queued", "launching", "running", "killing", "finished", "failed", "killed"})

FIELDS = frozenset({
    "id", "user", "cmd", "archive", "created", "name", "req", "pin", "machine", "status", "reason",
    "exit_code", "attempt", "attempts", "tags", "rule", "env", "overrides", "log_stage", "max_recoveries",
    "recoveries", "timeout", "stall", "resume", "alloc", "log_size", "log_grew", "last_line", "ending", "dir",
})

# What every stored record carries, so `status --json` can print records as they are stored.
LISTED = frozenset({"id", "name", "user", "cmd", "req", "machine", "status", "reason", "exit_code", "attempt",
                    "attempts", "created", "tags", "rule", "last_line"})
ATTEMPT_LISTED = frozenset({"n", "machine", "outcome", "exit_code", "started", "ended"})

# What a user name may be (docs/reference.md §2.1); also the only names that get a listing file.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")

"""paramiko, loaded without invoke: paramiko imports invoke (when installed) only for ssh_config's
`Match exec`, which jobtpu never uses, and hiding it saves ~115 ms of every cold start (cron passes)."""

import sys

_hide_invoke = "invoke" not in sys.modules
if _hide_invoke:
    sys.modules["invoke"] = None  # type: ignore[assignment]
try:
    import paramiko
finally:
    if _hide_invoke:
        del sys.modules["invoke"]

__all__ = ["paramiko"]

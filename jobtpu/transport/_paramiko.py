"""paramiko, loaded without invoke: paramiko imports invoke (when installed) only for ssh_config's
`Match exec`, which jobtpu never uses, and hiding it saves ~115 ms of every cold start (cron passes)."""

import logging
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

# paramiko logs what it survives or reports to us anyway ("Exception (client): Error reading SSH
# protocol banner", then a traceback) through `logging`; with no handler configured, Python's
# last-resort handler prints those records on stderr, which floods the mail of every cron pass.
# jobtpu reports each failure itself, once, in its own words: paramiko's records go nowhere.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

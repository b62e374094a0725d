"""paramiko, loaded without invoke: paramiko imports invoke only for ssh_config's `Match exec`, which
jobtpu never uses. paramiko itself requires invoke (not only fabric, which jobtpu no longer declares),
so every install has it; hiding it takes `import paramiko` from ~140 ms to ~80 ms, paid by every cold
start that reaches a remote machine (cron passes, kill, doctor). Listings never load paramiko."""

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

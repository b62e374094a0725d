"""Working the fleet's machines: each kind's driver (drivers.py), the session that reaches their workers
(reach.py), and what is built on both: pulling logs and files home, doctor's look, the remote
operations of `tail`, `fetch`, `exec` and `clean --remote`."""

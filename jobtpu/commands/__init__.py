"""What each command does, between the parsed arguments and the files, fleet and screen: one module
per group (jobs, fleet, tpu, rules), each a set of typed functions that cli.py calls.

Read-only commands (status, tail, --help) import neither paramiko nor google-cloud: these modules
import at the top only what a listing needs, the rest inside the functions that use it."""

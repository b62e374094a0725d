"""What names and counts state.json and machines.json may hold: the patterns and bounds their
types and checks share (a hand edit must not make a pass spin or climb out of a folder)."""

import re

# Counts used in loops and paths: a hand edit must not make a pass spin (a machine offers at most this
# many of a resource; an attempt runs on at most this many workers).
MAX_COUNT = 1024
MAX_WORKERS = 1024
# An archive is named by its content (<sha256>.tar.gz) and used in paths on remote machines: a bare
# file name, nothing that could climb out of the archives folder or mean something to a shell.
ARCHIVE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,200}\.tar\.gz$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESOURCE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# What a user name may be (docs/reference/commands.md §2.1).
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM")  # what --signal may send
# Ceilings of the numbers a member sets (docs/reference/guarantees-and-numbers.md §10), checked where
# each is set (the command line, machines.json) and where it is read back (the Meta bounds of
# schema/records.py's types): an absurd value is one line, never a pass that waits a day for one host
# nor a state.json that no command of any member can read.
MAX_TRIES = 10_000  # --max-recoveries, --retries (and the recoveries and retries made)
MAX_PRIORITY = 1_000_000  # --priority, either way
MAX_ATTEMPTS = 1_000_000  # a job's attempt number (reruns by hand count on)
MAX_CONNECT_TIMEOUT = 120  # machines.json's connect_timeout, in seconds
MAX_SECONDS = 10 * 366 * 86400  # a length of time (--timeout, --stall, --grace, --signal): ten years
MAX_TIME = 10**10  # a moment, in seconds since 1970 (the year 2286)
# Integers jobtpu stores must fit 64 bits (what other JSON tools read back exactly).
INT_RANGE = (-2**63, 2**64 - 1)

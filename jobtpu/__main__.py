"""`python -m jobtpu` runs the command line."""

from jobtpu.cli import command_line

raise SystemExit(command_line())

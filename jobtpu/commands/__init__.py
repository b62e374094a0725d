"""What each command does, between the parsed arguments and the files, fleet and screen: one module
per command or small group, each with its `add_parser(subparsers)` beside the typed function it
runs (the parser's `func` default, which cli.py calls with the home and the parsed arguments).

Read-only commands (status, tail, --help) import neither paramiko nor google-cloud: these modules
import at the top only what a listing needs, the rest inside the functions that use it."""

"""The command line: parse (commands/parsing.py assembles the commands' parsers), call the function
the parser chose, turn errors into one line. The only place that prints an error or chooses the
exit status."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jobtpu import timing
from jobtpu.commands.common import error_text
from jobtpu.commands.front import as_member, open_home
from jobtpu.commands.parsing import (  # noqa: F401 - the command line's parts, named from here too
    build_parser,
    command_word,
    installed_version,
    parse_command_line,
)
from jobtpu.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, JobtpuError, Terminated
from jobtpu.home.layout import find_home
from jobtpu.render.text import printable


def run_command(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    home = open_home(args.home)
    relayed = as_member(home, args.command, argv, args)
    if relayed is not None:
        return relayed
    return int(args.func(home, args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    standard_streams()
    typed = list(sys.argv[1:] if argv is None else argv)
    args, words = parse_command_line(typed)  # a relayed act sends what this parse made
    try:
        timing.current()  # a bad $JOBTPU_TIMING is said before anything is done, not midway through a pass
        return run_command(args, words)
    except JobtpuError as e:
        sys.stdout.flush()
        sys.stderr.write(error_text(e) + "\n")
        return e.exit_code
    except Terminated:
        sys.stderr.write("jobtpu: terminated\n")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        sys.stderr.write("jobtpu: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `jobtpu status | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_ERROR
    except OSError as e:  # a full disk, a read-only or foreign home, a --to folder we cannot write
        where = f": {e.filename}" if e.filename else ""
        sys.stderr.write(printable(f"jobtpu: error: {e.strerror or e}{where}") + "\n")
        if e.filename is None or _in_home(args, str(e.filename)):
            sys.stderr.write("hint: check that the home (--home, $JOBTPU_HOME) is writable and has free space\n")
        return EXIT_ERROR


def standard_streams() -> None:
    """A process started with stdin, stdout or stderr closed (`jobtpu status >&-`, a daemon's child)
    gets /dev/null there, as a daemon does for itself. Python leaves such a stream None, so every
    write would raise; and the next file opened would take the free descriptor, so a child (rsync,
    ssh) would write its output into state.json."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:  # the process's own stream, for its whole life: never closed
            stream = open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)


def _in_home(args: argparse.Namespace, path: str) -> bool:
    home = find_home(args.home).root
    return Path(path).resolve().is_relative_to(home) or home.is_relative_to(Path(path).resolve())


def command_line() -> int:
    """The `jobtpu` program (its console script and `python -m jobtpu`): main, then the quickest exit
    that loses nothing (docs/design.md §9.4). main itself, which tests and the Python API call
    in-process, leaves the interpreter as it found it."""
    code = main()
    if nothing_left_but_memory():
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # None: started with that descriptor closed (`>&-`)
                    stream.flush()
        except (OSError, ValueError):  # a reader that left, a stream closed: the usual exit says so, as ever
            pass
        else:
            os._exit(code)
    gc.freeze()  # the last collections then skip what the command made: the OS frees it
    return code


def nothing_left_but_memory() -> bool:
    """Whether the interpreter's exit would only free memory, which the operating system takes back
    at once anyway: no atexit callback (a log handler's flush, a temporary folder's removal, a pool's
    join) and no thread but this one. Its exit would otherwise clear every module and object the
    command made: about 3 ms, a twentieth of a submit. Outside CPython, which counts the callbacks,
    the answer is no."""
    import atexit

    count = getattr(atexit, "_ncallbacks", None)
    threading = sys.modules.get("threading")
    return count is not None and count() == 0 and (threading is None or threading.active_count() == 1)


if __name__ == "__main__":
    raise SystemExit(command_line())

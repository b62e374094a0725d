"""`tag` and `note`: what people write on jobs and machines after the fact. Both change state.json
under the pass lock, as `kill` does: a pass commits its own view of the jobs it touched and of every
machine record, so a change made beside a pass could be written over by it."""

import argparse
from typing import NamedTuple

from jobtpu.commands import args
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.users import check_owner, check_owners, known_user
from jobtpu.limits import check_tags
from jobtpu.render.text import printable

# A note is one line a person reads in a table; a page of text belongs in a file of the job.
MAX_NOTE = 500


class TagChanges(NamedTuple):
    ids: list[int]
    add: list[str]
    remove: list[str]


def parse_tag_words(words: list[str]) -> TagChanges:
    """`5 7 +best -draft`: job ids, then +TAG to add and -TAG to remove (in any order)."""
    ids: list[int] = []
    add: list[str] = []
    remove: list[str] = []
    for word in words:
        if word == "--":  # the usual end of options: nothing to change
            continue
        if word.isascii() and word.isdigit():  # "²" is a digit to str.isdigit, and no number to int()
            ids.append(int(word))
        elif word.startswith("--"):
            raise JobtpuError(f"{word!r} after the job ids is not a tag change",
                              hint="put options before the ids (jobtpu tag --help); a tag starting with "
                                   "'-' is removed as -TAG, added as +TAG")
        elif word[:1] in "+-" and len(word) > 1:
            (add if word[0] == "+" else remove).append(word[1:])
        else:
            raise JobtpuError(f"{word!r} is neither a job id nor a tag change",
                              hint="add a tag with +TAG and remove one with -TAG, like `jobtpu tag 5 +best -draft`")
    if not ids or not (add or remove):
        raise JobtpuError("give one or more job ids and one or more tag changes",
                          hint="like `jobtpu tag 5 7 +best -draft`")
    both = sorted(set(add) & set(remove))
    if both:
        raise JobtpuError(f"tag {both[0]!r} is both added and removed", hint="give each tag once")
    return TagChanges(ids, add, remove)


def tag(home: Home, words: list[str], force: bool = False) -> int:
    """Add and remove tags of jobs (all the jobs named, or none when one is unknown); print each
    job's tags as they are now."""
    from jobtpu.passes.session import locked_session
    from jobtpu.views.listing import require_current

    changes = parse_tag_words(words)
    me = known_user(home, None)
    with locked_session(home) as session:
        jobs = [require_current(home, session.state.jobs, job_id, "tag") for job_id in dict.fromkeys(changes.ids)]
        check_owners(home, jobs, me, force, "tag")  # all allowed, or no tag changes
        for job in jobs:
            kept = [t for t in job.tags if t not in changes.remove]
            job.tags = kept + [t for t in dict.fromkeys(changes.add) if t not in kept]
            check_tags(job.tags)
    for job in jobs:
        print(printable(f"job {job.id}: tags {','.join(job.tags) or '(none)'}"))
    return 0


def note_text(words: list[str]) -> str:
    """The words of a note as one line (an empty one clears the note)."""
    text = " ".join(words).strip()
    if "\n" in text or "\r" in text:
        raise JobtpuError("a note is one line", hint="give the note without line breaks")
    if len(text) > MAX_NOTE:
        raise JobtpuError(f"a note is at most {MAX_NOTE} characters (this one has {len(text)})",
                          hint="keep the note short; longer text belongs in a file of the job")
    return text


def note(home: Home, machine: str | None, words: list[str], force: bool = False) -> int:
    """`note ID TEXT` sets a job's note; `note --machine NAME TEXT` a machine's. Empty TEXT clears it."""
    from jobtpu.passes.session import locked_session
    from jobtpu.views.listing import require_current

    if machine is None:
        if not words or not (words[0].isascii() and words[0].isdigit()):
            raise JobtpuError("give the job's id, then the note",
                              hint='like `jobtpu note 5 "lr too high"`, or `jobtpu note --machine NAME TEXT`')
        job_id, words = int(words[0]), words[1:]
    if not words:
        raise JobtpuError("give the note's text after the " + ("machine" if machine else "job id"),
                          hint='an empty text ("") clears the note')
    text = note_text(words)
    with locked_session(home) as session:
        if machine is None:
            job = require_current(home, session.state.jobs, job_id, "note")
            check_owner(home, job, known_user(home, None), force, "note")
            job.note = text
            what = f"job {job.id}"
        else:
            name = session.fleet.require(machine).name
            session.state.machine(name).note = text or None
            what = f"machine {name}"
    print(printable(f"{what}: note {text!r}" if text else f"{what}: note cleared"))
    return 0


def add_parser(subparsers: "args.Subparsers") -> None:
    p = args.add_command(subparsers, "tag")
    p.add_argument("--force", action="store_true", help="also another user's jobs (recorded in each); before the ids")
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="ID... +TAG -TAG",
                   help="the jobs, then the changes: +best adds the tag best, -draft removes draft")
    p.set_defaults(func=lambda home, a: tag(home, a.words, a.force))

    p = args.add_command(subparsers, "note")
    p.add_argument("--machine", metavar="NAME", help="the machine whose note to set, instead of a job's")
    p.add_argument("--force", action="store_true", help="also another user's job (recorded in the job)")
    p.add_argument("words", nargs="+", metavar="[ID] TEXT",
                   help='the job\'s id (without --machine), then the note; "" clears it')
    p.set_defaults(func=lambda home, a: note(home, a.machine, a.words, a.force))

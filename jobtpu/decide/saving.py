"""The last attempt that saved, and the checkpoints that follow a job (docs/reference/job-environment.md
§8.2.1): the checks a user's --saved-when, --saved-marker and --checkpoints get, each refusal one line;
which attempt last saved and so whether a resume resumes; what a resumed attempt is told; and the
copy its checkpoint needs when it resumes in another region. Pure."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.schema.saving import Saving

if TYPE_CHECKING:
    from jobtpu.schema.state import Attempt, Job

PATH_LIMIT = 1000  # characters of a --saved-marker path or a --checkpoints template
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_MARKER_HINT = "give a path relative to the job's folder, like --saved-marker ckpt/SAVED"
_TEMPLATE_HINT = "give a gs:// place with {region}, like --checkpoints gs://ckpt-{region}/run7"


def saving_of(when: str | None, marker: str | None, checkpoints: str | None) -> Saving | None:
    """The job's record of its options: None when none was given (today's behaviour)."""
    if when is None and marker is None and checkpoints is None:
        return None
    return Saving(when=when, marker=marker, checkpoints=checkpoints)


def check_saving(saving: Saving | None) -> None:
    """Refuse a way of saving jobtpu cannot use: one JobtpuError line, whatever holds the values
    (submit's options, a job file, the API, a member's submitted record)."""
    if saving is None:
        return
    if saving.when is not None:
        from jobtpu.decide.progress import compile_pattern

        try:
            compile_pattern(saving.when, "--saved-when")
        except ValueError as e:
            raise JobtpuError(str(e), hint="give an RE2 pattern a line of the job's log matches when it saved") from None
    if saving.marker is not None:
        check_marker(saving.marker)
    if saving.checkpoints is not None:
        check_checkpoints(saving.checkpoints)
        if saving.when is None and saving.marker is None:  # which attempt's checkpoint is the newest
            raise JobtpuError("--checkpoints needs --saved-when or --saved-marker: the checkpoint copied is the one "
                              "the attempt that last saved left", hint="say how a save shows, like --saved-marker ckpt/SAVED")


def check_marker(path: str) -> None:
    """A marker is a path inside the job's folder: relative, never climbing out of it."""
    if not path.strip() or len(path) > PATH_LIMIT or any(c in path for c in "\0\n\r"):
        raise JobtpuError(f"--saved-marker must be a path of 1 to {PATH_LIMIT} characters on one line",
                          hint=_MARKER_HINT)
    if path.startswith(("/", "~")):
        raise JobtpuError(f"--saved-marker {path[:80]!r} is absolute", hint=_MARKER_HINT)
    if ".." in PurePosixPath(path).parts:
        raise JobtpuError(f"--saved-marker {path[:80]!r} climbs out of the job's folder (..)", hint=_MARKER_HINT)


def check_checkpoints(template: str) -> None:
    """A gs:// place (a bucket, no spaces) that names {region} and no other placeholder."""
    bucket = template[len("gs://"):]
    if (not template.startswith("gs://") or not bucket or bucket.startswith("/") or len(template) > PATH_LIMIT
            or any(c.isspace() for c in template)):
        raise JobtpuError(f"--checkpoints {template[:80]!r} is not a gs:// place (gs://BUCKET/..., no spaces)",
                          hint=_TEMPLATE_HINT)
    named = _PLACEHOLDER.findall(template)
    unknown = [name for name in named if name != "region"]
    if unknown:
        raise JobtpuError(f"--checkpoints names unknown placeholder {{{unknown[0]}}}", hint=_TEMPLATE_HINT)
    if "region" not in named:
        raise JobtpuError(f"--checkpoints {template[:80]!r} lacks {{region}}: each region's copy needs a place of its own",
                          hint=_TEMPLATE_HINT)


def fill(template: str, region: str) -> str:
    """The template's place for one region."""
    return template.replace("{region}", region)


# ---- what follows from the saves an attempt made --------------------------------------------------

def watched(job: Job) -> bool:
    """Whether jobtpu can tell an attempt of the job that saved from one that did not."""
    return job.saving is not None and (job.saving.when is not None or job.saving.marker is not None)


def last_saved(job: Job) -> Attempt | None:
    """The newest attempt before the current one that saved, or None (none did, or the job says
    nothing of its saves)."""
    if not watched(job):
        return None
    return next((a for a in reversed(job.attempts) if a.n < job.attempt and a.saved is not None), None)


def resumes(job: Job, wanted: bool) -> bool:
    """Whether the job's next attempt resumes when its rule (or a person) wants it to: only when an
    attempt saved, for a job that says how a save shows; a job that says nothing resumes as asked."""
    return wanted and (not watched(job) or last_saved(job) is not None)


def unsaved_rerun(job: Job) -> bool:
    """A job queued to rerun from scratch because no attempt of it saved: its pass's note and its
    event say so."""
    return watched(job) and not job.resume and last_saved(job) is None


def job_folder(root: str, job_id: int) -> str:
    """The job's folder as its worker sees it: under a root relative to the login folder, `$HOME/…`,
    which the worker's wrapper expands at the start (any other `$` of the root kept as it is)."""
    rel = root[2:] if root.startswith("~/") else root
    folder = f"{rel.rstrip('/')}/jobs/{job_id}"
    return folder if folder.startswith("/") else "$HOME/" + folder.replace("\\", "\\\\").replace("$", "\\$")


def resume_env(job: Job, roots: dict[str, str]) -> dict[str, str]:
    """JOBTPU_RESUME_FROM_ATTEMPT and JOBTPU_RESUME_FROM_DIR of a resumed attempt (`roots`: each
    machine's root): the attempt that last saved and the job's folder on the machine it ran on."""
    saved = last_saved(job) if job.resume else None
    if saved is None:
        return {}
    root = roots.get(saved.machine)
    env = {"JOBTPU_RESUME_FROM_ATTEMPT": str(saved.n)}
    if root is not None:
        env["JOBTPU_RESUME_FROM_DIR"] = job_folder(root, job.id)
    return env


def checkpoint_copy(job: Job, region: str) -> tuple[str, str] | None:
    """(from, to): the places a resumed attempt's checkpoint is copied between before it starts in
    `region`, when the attempt that last saved ran in another one; None when there is nothing to copy
    (no --checkpoints, no save, the same region, or a region machines.json does not name)."""
    template = job.saving.checkpoints if job.saving is not None else None
    saved = last_saved(job) if job.resume else None
    if template is None or saved is None or saved.saved is None:
        return None
    was = saved.saved.region
    if not was or not region or was == region:
        return None
    return fill(template, was), fill(template, region)

"""jobtpu: run ML training jobs over SSH on TPU VMs, GPU boxes and the local machine, through preemptions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobtpu.api import Home, Job, JobRecord, as_completed
    from jobtpu.errors import JobFailed, JobtpuError
    from jobtpu.result import save_result

__all__ = ["Home", "Job", "JobFailed", "JobRecord", "JobtpuError", "as_completed", "save_result"]


def __getattr__(name: str) -> Any:
    """The Python API (docs/reference/python.md), imported when first used: `import jobtpu` loads
    nothing else, so the command line and a notebook's first cell start as fast as a bare interpreter."""
    # By name, not an import statement: every module's `from jobtpu import timing` names this package,
    # and would seem to reach the API and each command through it (tests/test_layers.py).
    from importlib import import_module

    if name in ("Home", "Job", "JobRecord", "as_completed"):
        return getattr(import_module("jobtpu.api"), name)
    if name in ("JobtpuError", "JobFailed"):
        return getattr(import_module("jobtpu.errors"), name)
    if name == "save_result":  # inside a job: the standard library's json and nothing of the command line
        return import_module("jobtpu.result").save_result
    raise AttributeError(f"module 'jobtpu' has no attribute {name!r}")

"""jobtpu: run ML training jobs over SSH on TPU VMs, GPU boxes and the local machine, through preemptions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobtpu.api import Home, Job, JobRecord
    from jobtpu.errors import JobtpuError

__all__ = ["Home", "Job", "JobRecord", "JobtpuError"]


def __getattr__(name: str) -> Any:
    """The Python API (docs/reference/python.md), imported when first used: `import jobtpu` loads
    nothing else, so the command line and a notebook's first cell start as fast as a bare interpreter."""
    # By name, not an import statement: every module's `from jobtpu import timing` names this package,
    # and would seem to reach the API and each command through it (tests/test_layers.py).
    from importlib import import_module

    if name in ("Home", "Job", "JobRecord"):
        return getattr(import_module("jobtpu.api"), name)
    if name == "JobtpuError":
        return import_module("jobtpu.errors").JobtpuError
    raise AttributeError(f"module 'jobtpu' has no attribute {name!r}")

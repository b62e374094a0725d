"""schema/accelerator.py: every TPU type name taken apart in one place (docs/design.md §5)."""

from __future__ import annotations

import pytest

from jobtpu.schema.accelerator import accelerator


@pytest.mark.parametrize(("name", "generation", "version", "count", "devices", "can_stop"), [
    ("v2-8", "v2", 2, 8, 8, False),
    ("v3-32", "v3", 3, 32, 32, False),
    ("v4-8", "v4", 4, 8, 4, True),
    ("v4-32", "v4", 4, 32, 16, True),
    ("v5p-8", "v5p", 5, 8, 4, True),
    ("v5litepod-16", "v5litepod", 5, 16, 16, True),
    ("v6e-8", "v6e", 6, 8, 8, True),
    ("v3", "v3", 3, None, None, False),
])
def test_a_type_s_parts(name: str, generation: str, version: int, count: int | None, devices: int | None,
                        can_stop: bool) -> None:
    found = accelerator(name)
    assert found is not None and (found.generation, found.version, found.count) == (generation, version, count)
    assert (found.devices, found.can_stop, found.text) == (devices, can_stop, name)


@pytest.mark.parametrize("name", [None, "", "gpu", "v", "3-8", "v3-", "v3-8-p1", "V3-8", "v3--8"])
def test_what_is_no_type(name: str | None) -> None:
    assert accelerator(name) is None


@pytest.mark.parametrize(("name", "pattern", "takes"), [
    ("v3-32", "v3-32", True), ("v3-32", "v3-8", False), ("v3-32", "v3", True), ("v3-32", "v4", False),
    ("v5p-8", "v5p", True), ("v5litepod-16", "v5p", False), ("v4-8", "v3+", True), ("v2-8", "v3+", False),
    ("v6e-8", "v5+", True), ("v5litepod-16", "v5+", True), ("v3-8", "v3+", True),
])
def test_which_patterns_take_a_type(name: str, pattern: str, takes: bool) -> None:
    found = accelerator(name)
    assert found is not None and found.matches(pattern) is takes

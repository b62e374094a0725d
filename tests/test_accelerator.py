"""schema/accelerator.py: every TPU type name taken apart in one place (docs/design.md §5)."""

from __future__ import annotations

import pytest

from jobtpu.decide.fit import parse_request
from jobtpu.errors import JobtpuError
from jobtpu.schema.accelerator import accelerator, in_name
from jobtpu.schema.nodespec import default_runtime


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


@pytest.mark.parametrize("name", [None, "", "gpu", "v", "3-8", "v3-", "v3-8-p1", "V3-8", "v3--8", "v3-8+", "v3++",
                                  "+", "v+", "v\u0663-32", "v3-\uff13\uff12", "v3-32\n", "v3\n", "v3+\n"])
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


@pytest.mark.parametrize(("text", "generation", "version", "count", "or_newer", "chips"), [
    ("v2-8", "v2", 2, 8, False, 4), ("v3-32", "v3", 3, 32, False, 16), ("v4-8", "v4", 4, 8, False, 4),
    ("v5p-8", "v5p", 5, 8, False, 4), ("v5litepod-16", "v5litepod", 5, 16, False, 16),
    ("v6e-8", "v6e", 6, 8, False, 8), ("v3", "v3", 3, None, False, None), ("v3+", "v3", 3, None, True, None),
    ("v5p+", "v5p", 5, None, True, None),
])
def test_one_parse_for_types_families_and_floors(text: str, generation: str, version: int, count: int | None,
                                                 or_newer: bool, chips: int | None) -> None:
    """A machine's type, a request's family and a request's floor (`v3+`) are taken apart by the same
    function; a floor has no count, so no devices, chips or restart rule reads one into it."""
    found = accelerator(text)
    assert found is not None and (found.generation, found.version, found.count) == (generation, version, count)
    assert (found.or_newer, found.chips, found.text) == (or_newer, chips, text)


@pytest.mark.parametrize(("name", "pattern"), [("v3+", "v3+"), ("v3+", "v3"), ("v3+", "v2+"), ("v3-8", "v3-8+")])
def test_a_floor_is_no_machine_s_type(name: str, pattern: str) -> None:
    """A machine whose accelerator reads `v3+` matches nothing, and a pattern with a size and a `+`
    takes nothing (the request refuses it, docs/reference/requests-and-rules.md §6.1)."""
    found = accelerator(name)
    assert found is not None and not found.matches(pattern)
    assert default_runtime("v3+") is None and default_runtime("v3") == default_runtime("v3-8")


@pytest.mark.parametrize(("tokens", "accelerators"), [
    (["v3-32"], (("v3-32",),)), (["v3"], (("v3",),)), (["v3+"], (("v3+",),)),
    (["v2-32, v3-32", "v4+"], (("v2-32", "v3-32"), ("v4+",))), (["v5litepod-16", "gpu=1"], (("v5litepod-16",),)),
])
def test_a_request_s_patterns(tokens: list[str], accelerators: tuple[tuple[str, ...], ...]) -> None:
    assert parse_request(tokens).accelerators == accelerators


@pytest.mark.parametrize("token", ["v3-8+", "v3++", "V3", "v5lite_pod", "v5lite_pod-16", "v3-", "tpu", "v3,", "3-8",
                                   "v3-32,gpu", "v\u0663", "v\u0663+"])
def test_what_no_request_s_pattern_is(token: str) -> None:
    with pytest.raises(JobtpuError, match="not a resource .gpu=2. nor an accelerator pattern"):
        parse_request([token])


def test_a_count_is_ascii_digits() -> None:
    with pytest.raises(JobtpuError, match="a resource request is NAME=COUNT"):
        parse_request(["gpu=\uff12"])


@pytest.mark.parametrize(("name", "type_"), [
    ("kmh-tpuvm-v3-32-1", "v3-32"), ("v2-8", "v2-8"), ("a-v7-8-v4-8", "v4-8"), ("a-v3-v4-8", "v4-8"),
    ("kmh-v5e-4", "v5e-4"), ("a_v3-32", None), ("v3-32.x", None), ("v3-x-8", None), ("kmh-v3+-8", None),
    ("kmh-v3-\uff13\uff12-1", None),
])
def test_the_type_a_tpu_s_name_holds(name: str, type_: str | None) -> None:
    found = in_name(name)
    assert (found.text if found else None) == type_

"""How tables name machines and keep rows apart (jobtpu/render/names.py, docs/reference/commands.md
§2.4): pure functions, one table each."""

from __future__ import annotations

import pytest

from jobtpu.render.names import apart_width, cut_apart, short_names, with_short_names
from jobtpu.views.listing import key_end, shown_overrides

pytestmark = pytest.mark.fast

TPU = "kmh-tpuvm-v3-32-preemptible-"


def test_a_machine_s_short_name_is_its_first_alias() -> None:
    assert short_names([(f"{TPU}1", ("v3-32-p1", "p1")), ("box", ())]) == {f"{TPU}1": "v3-32-p1"}


@pytest.mark.parametrize(("text", "said"), [
    (f"2 machines fit: 1 busy, {TPU}1 is being recreated; next in line",
     "2 machines fit: 1 busy, v3-32-p1 is being recreated; next in line"),
    (f"{TPU}1 fits, busy; 2 jobs ahead of it", "v3-32-p1 fits, busy; 2 jobs ahead of it"),
    (f"{TPU}11 fits, busy", f"{TPU}11 fits, busy"),  # another machine whose name starts the same
    (f"it is pinned to {TPU}1.", "it is pinned to v3-32-p1."),
    (f"it is pinned to {TPU}1.x", f"it is pinned to {TPU}1.x"),
    ("no machine offers v5p-8", "no machine offers v5p-8"),
])
def test_a_pending_reason_names_machines_by_their_short_names(text: str, said: str) -> None:
    assert with_short_names(text, {f"{TPU}1": "v3-32-p1"}) == said


@pytest.mark.parametrize(("values", "width", "cut"), [
    (["box", "local"], 10, ["box", "local"]),  # what fits stays whole
    ([f"{TPU}3", f"{TPU}4"], 10, ["kmh-t…le-3", "kmh-t…le-4"]),  # an even split that differs
    ([f"{TPU}3", f"{TPU}3"], 10, ["kmh-t…le-3", "kmh-t…le-3"]),  # one machine twice reads the same
    (["kmh-tpuvm-v3-32-a-1", "kmh-tpuvm-v4-32-a-1"], 10, ["k…3-32-a-1", "k…4-32-a-1"]),  # apart in the middle
    (["abcdefgh-1", "abcdefgh-2"], 1, ["…", "…"]),  # no split differs: cut at the end
])
def test_a_cut_keeps_different_names_different(values: list[str], width: int, cut: list[str]) -> None:
    got = cut_apart(values, width)
    assert got == cut and all(len(v) <= width for v in got)
    if width > 1:
        assert len(set(got)) == len(set(values))


@pytest.mark.parametrize(("values", "least", "width"), [
    ([f"{TPU}3", f"{TPU}4"], 3, 3),  # `k…3` and `k…4`
    (["kmh-tpuvm-v3-32-a-1", "kmh-tpuvm-v4-32-a-1"], 3, 9),  # they differ in the middle: room for it
    (["box", "local"], 10, 10),
    ([], 4, 4),
])
def test_the_narrowest_width_that_keeps_names_apart(values: list[str], least: int, width: int) -> None:
    assert apart_width(values, least) == width
    assert len(set(cut_apart(values, width))) == len(set(values))


@pytest.mark.parametrize(("key", "keys", "end"), [
    ("config.model.dropout", ["config.model.dropout", "config.training.learning_rate"], "dropout"),
    ("config.model.dropout", ["config.model.dropout", "config.data.dropout"], "model.dropout"),
    ("dropout", ["dropout", "config.dropout"], "dropout"),
])
def test_a_varying_key_reads_as_its_shortest_own_end(key: str, keys: list[str], end: str) -> None:
    assert key_end(key, keys) == end


def test_a_sweep_member_s_overrides_show_what_differs_first_and_short() -> None:
    overrides = ["--config.model.depth=50", "--config.training.learning_rate=0.01", "--config.model.dropout=0.2"]
    first = {"config.training.learning_rate", "config.model.dropout"}
    words = shown_overrides(overrides, {"lr": "config.training.learning_rate"}, first)
    assert words == ["lr=0.01", "dropout=0.2", "config.model.depth=50"]

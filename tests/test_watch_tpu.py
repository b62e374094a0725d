"""A job preempted twice on the fake TPU API, through the CLI: the event log tells the preemptions,
recreations and recoveries in order, a webhook hears "recovered", and `report` splits each
interruption and gives a goodput figure, also as an HTML page headless Chromium renders."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.helpers import allow_private_webhooks, jobtpu, submit, until
from tests.test_goodput import _rendered
from tests.test_tpu_gcloud import home_for
from tests.test_watch import set_top, webhook
from tests.tpufleet import ZONE, TpuFleet

NODE = "tpu-w"
# Reports progress at once; attempts 0 and 1 then wait to be preempted, attempt 2 finishes.
CMD = ('echo "JOBTPU_PROGRESS step=100 checkpoint=50"; if [ "$JOBTPU_ATTEMPT" -lt 2 ]; then sleep 300; fi; '
       'echo "JOBTPU_PROGRESS step=200 checkpoint=200"')


def preempt_when_reported(home: Path, tpus: TpuFleet, job_id: int, attempt: int) -> None:
    # The attempt's progress as a pass recorded it (a JOBTPU_PROGRESS line is never its last_line).
    until(home, job_id, lambda j: j["status"] == "running" and j["attempt"] == attempt
          and (j["attempts"][-1].get("progress") or {}).get("step") == 100,
          what=f"attempt {attempt} to run and report progress")
    tpus.api.preempt(ZONE, NODE)


def test_a_job_preempted_twice_tells_its_story_and_its_cost(tpus: TpuFleet, tmp_path: Path) -> None:
    tpus.add_node(NODE)
    home = home_for(tmp_path, tpus, NODE, preemptible=True)
    with webhook() as (url, received):
        allow_private_webhooks(home)  # the receiver is on 127.0.0.1
        set_top(home, notify=[{"webhook": url, "events": ["recovered", "finished", "failed"]}])
        job = submit(home, tmp_path / "src", CMD)
        preempt_when_reported(home, tpus, job, 0)
        preempt_when_reported(home, tpus, job, 1)
        done = until(home, job, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the end")
        assert (done["status"], done["attempt"]) == ("finished", 2), done
        heard = [(r["event"]["kind"], r["event"].get("attempt")) for r in received]
    assert heard == [("job_resumed", 1), ("job_resumed", 2), ("job_ended", 2)], heard

    log = [json.loads(line) for line in jobtpu(home, "events", "--json").stdout.splitlines()]
    mine = [(e["kind"], e.get("attempt")) for e in log if e.get("job") == job]
    assert mine == [("job_launched", 0), ("job_running", 0), ("preempted", 0), ("job_recovering", 0),
                    ("job_launched", 1), ("job_resumed", 1), ("job_running", 1), ("preempted", 1),
                    ("job_recovering", 1), ("job_launched", 2), ("job_resumed", 2), ("job_running", 2),
                    ("job_ended", 2)], mine
    order = [e["kind"] for e in log if e.get("job") == job or e.get("machine") == "tpu-m"]
    for i in (1, 2):  # each recovery: preempted, the node deleted and created, set up, then resumed
        at = _nth(order, "preempted", i)
        steps = ["tpu_delete_started", "tpu_delete_done", "tpu_create_started", "tpu_create_done",
                 "tpu_setup_done", "job_resumed"]
        found = [order.index(step, at) for step in steps]
        assert found == sorted(found), (steps, order)
    assert "STALE" not in jobtpu(home, "machines").stderr

    text = jobtpu(home, "report", str(job)).stdout
    assert re.search(rf"^job {job}: goodput \d+\.\d% \(productive \S+ of \S+\)$", text, re.MULTILINE), text
    splits = re.findall(r"interruption after attempt (\d) \(tpu-m -> tpu-m\): \S+ = detection \S+, "
                        r"delete\+create \S+, setup \S+, launch \S+; work redone \S+ \(50 steps\)", text)
    assert splits == ["0", "1"], text
    assert len(re.findall(r"^  attempt \d on tpu-m: wall \S+, accelerator (\d+\.\d\d?|<0\.01) chip-h", text, re.MULTILINE)) == 3

    page = tmp_path / "report.html"
    jobtpu(home, "report", str(job), "--html", str(page))
    (tmp_path / "chromium").mkdir()
    dom = _rendered(page.read_text(), tmp_path / "chromium")
    bars = {a["data-attempt"]: a["class"] for a in dom.having("data-attempt")}
    assert set(bars) == {f"job {job} attempt {n}" for n in (0, 1, 2)}, bars
    assert "finished" in bars[f"job {job} attempt 2"] and "interrupted" in bars[f"job {job} attempt 0"]
    marks = [a["data-mark"] for a in dom.having("data-mark")]
    assert marks.count("preempted") == 2 and marks.count("recreate") == 2 and "setup" in marks, marks


def _nth(items: list[str], item: str, n: int) -> int:
    at = -1
    for _ in range(n):
        at = items.index(item, at + 1)
    return at

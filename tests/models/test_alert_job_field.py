"""A job alert carries its jobs as data (``Alert.jobs``): its link is built from them, not
read from the message, which a job's name (or a rewording) can fool; stores keep them,
and an alert stored by a release before them still links as it did."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.registry import build
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.links import alert_jobs, alert_url
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.lprecords import alert_from, alert_line
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.recording import RecordingStore
from tests.models.helpers import busy, node
from tests.models.test_job_hang import STEP, gpu

BASE = "https://fleet.example.com"
# A job name (another producer's: fleetwatch's own agent refuses spaces) with the very words
# the job rules write around a job: "job X (and Y, Z) hung on NODE:".
TRICKY = "llm-eval (and 43)"


def hung_alert(job: str) -> Alert:
    """job_hung through the real Processor and default detectors, two nodes of one job."""
    store = RecordingStore()
    processor = Processor(store, build(DetectorsConfig()))
    for i in range(41):
        t = 1.7e9 + i * STEP
        processor.process([node(t, [gpu(t)] * 8, name=n, rack=r, job=job)
                           for n, r in (("n1", "r1"), ("n2", "r2"))])
    (a,) = {a.id: a for a in store.changes if a.state == "firing"}.values()
    return a


def test_a_hung_job_named_like_the_message_links_its_own_page() -> None:
    a = hung_alert(TRICKY)
    assert a.rule == "job_hung" and a.jobs == (TRICKY,)
    assert a.message.startswith(f"job {TRICKY} hung on n1:")
    assert alert_jobs(a) == (TRICKY,)
    assert alert_url(BASE, a) == f"{BASE}/job/llm-eval%20%28and%2043%29?cluster=c"
    # What the message alone gave: two jobs "llm-eval" and "43", so the node's page.
    assert alert_jobs(dataclasses.replace(a, jobs=())) == ("llm-eval", "43")


def test_a_reworded_message_keeps_the_link() -> None:
    a = dataclasses.replace(hung_alert("42"), message="n1: 8 GPUs blocked in a collective")
    assert alert_url(BASE, a) == f"{BASE}/job/42?cluster=c"


def test_gpu_alerts_carry_the_job_that_held_the_gpu() -> None:
    (f,) = XidEvents().update([node(1.8e9, [busy(60)] * 4, job="111,222", xids={2: (13,)})])
    assert f.jobs == ("111", "222")


def test_the_stores_keep_the_jobs_and_read_an_older_release_s_alert(tmp_path: Path) -> None:
    a = hung_alert(TRICKY)
    # InfluxDB: a string field of JSON text, read back as the tuple
    assert 'jobs="[\\"llm-eval (and 43)\\"]"' in alert_line(a, text=True)
    back = alert_from({"id": a.id, "rule": a.rule, "cluster": "c", "node": "n1",
                       "device": "host"}, {"state": 1.0}, {"jobs": json.dumps([TRICKY])})
    assert back.jobs == (TRICKY,)
    path = tmp_path / "fw.db"
    store = SqliteStore(str(path))
    store.write_alerts([a])
    (got,) = store.alerts(states=("firing",))
    assert got.jobs == (TRICKY,) and alert_url(BASE, got).startswith(f"{BASE}/job/llm-eval")
    store.close()
    # A file of the previous release: no jobs column. Its alerts read with none, and link
    # as that release did, from the message.
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE alert_states DROP COLUMN jobs")
        conn.execute("UPDATE alert_states SET message = 'job 42 hung on n1: its 8 GPUs'")
    (old,) = SqliteStore(str(path), read_only=True).alerts(states=("firing",))
    assert old.jobs == () and alert_url(BASE, old) == f"{BASE}/job/42?cluster=c"



def test_the_webhook_and_kafka_payload_name_the_jobs() -> None:
    from fleetwatch.pipeline.silences import Notice
    from fleetwatch.pipeline.sinks.base import change_json

    body = change_json(Notice(hung_alert(TRICKY)), BASE)
    assert body["jobs"] == [TRICKY]
    assert body["link"] == f"{BASE}/job/llm-eval%20%28and%2043%29?cluster=c"

"""Names of any printable text in alert evidence, events, annotations and notifications come
back exactly from every backend.

A node's name becomes a field key in ``rack_silent``'s evidence
(``last_frame_ts.<node>``) and a tag value in every record. VictoriaMetrics
takes a ``"`` in a line's fields as the start of a quoted value, so a node
named ``q"3`` lost its rack-mates' evidence (or the whole line, answered with
204), and a backslash in a field key did not come back as written. What the
server gives back is compared, and on VictoriaMetrics its own count of lines it
could not parse, not what was sent.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from fleetwatch.pipeline.store.base import (
    Alert,
    Annotation,
    Event,
    Notification,
    StoreRejected,
)
from fleetwatch.pipeline.store.lineproto import escape_tag, v1_unwritable
from fleetwatch.pipeline.store.lpcheck import misread
from fleetwatch.pipeline.store.lprecords import (
    alert_line,
    field_key,
    field_key_text,
)
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server
from tests.store.backends import Backend
from tests.store.helpers import cluster_name, counters, force_flush, minute_ago

# Node names as agents may send them: every character line protocol treats specially,
# a percent sign (the key encoding's own), and text beyond ASCII.
NAMES = ['q1', 'q2', 'q"3', '"', 'a""b', 'h\\bs', 'ends\\', '\\"', 'x\\"y', 'a,b', 'a=b',
         'a b', "it's", 'n.1.2', 'a\\,b', '%', '%22', '50%off', 'a:b', '#x', '温度-7', '🔥',
         'é\tx']
INVALID = 'vm_rows_invalid_total{type="influx"}'


def tag_names(b: Backend) -> list[str]:
    """The names a backend can carry as tag values (InfluxDB 1.x: not all, v1_unwritable)."""
    return [n for n in NAMES if n.isprintable() and not (b.v1 and v1_unwritable(n))]


def invalid(b: Backend) -> float:
    """VictoriaMetrics' count of lines it could not parse (0 elsewhere)."""
    return counters(b.victoria.address)[INVALID] if b.victoria else 0.0


def _settled_invalid(b: Backend, before: float) -> float:
    """Lines the server could not parse since ``before`` (its counter lags a write)."""
    if b.victoria is None:
        return 0.0
    time.sleep(1.5)
    return invalid(b) - before


def _rack_silent(cluster: str, rack: str, nodes: list[str], heard: float) -> Alert:
    evidence = {"silent_nodes": float(len(nodes)), "known_nodes": float(len(nodes)),
                "silent_s": 35.0, "keep_firing_s": 0.0}
    for i, n in enumerate(nodes):
        evidence[f"last_frame_ts.{n}"] = round(heard + i * 0.125, 3)
    return Alert(id=f"rack_silent/{cluster}/{rack}/1", rule="rack_silent",
                 severity="critical", cluster=cluster, rack=rack, node="", device="",
                 state="firing", started_ts=heard + 30, updated_ts=heard + 35,
                 value=float(len(nodes)), message="", fired_ts=heard + 30,
                 evidence=evidence, action="")


def test_rack_silent_evidence_names_every_node_exactly(backend: Backend) -> None:
    """The tester's rack (q1, q2, q"3) and every other hard name: each node's last frame
    time comes back under its own name, none lost, none 0."""
    cluster, heard = cluster_name(), minute_ago(0) / 1000 - 60
    alerts = [_rack_silent(cluster, "rq", NAMES[:3], heard),
              _rack_silent(cluster, 'r"k ,=', NAMES, heard)]
    before = invalid(backend)
    backend.store.write_alerts(alerts)
    backend.settle()
    got = {a.rack: a for a in backend.store.alerts() if a.cluster == cluster}
    assert sorted(got) == sorted(a.rack for a in alerts)
    for a in alerts:
        assert got[a.rack].evidence == a.evidence
        if isinstance(backend.store, VictoriaMetricsStore):  # its message is rendered
            message = got[a.rack].message
            assert all(f"last_frame_ts.{n}=20" in message for n in NAMES[:3]), message
    assert _settled_invalid(backend, before) == 0


def test_a_large_rack_with_a_quote_in_one_name_keeps_every_node(backend: Backend) -> None:
    """83 nodes, one of them ``h"quote``: the nodes after it were lost."""
    cluster, heard = cluster_name(), minute_ago(0) / 1000 - 60
    nodes = [f"h{i:02d}" for i in range(40)] + ['h"quote'] + [f"h{i:02d}" for i in range(40, 82)]
    alert = _rack_silent(cluster, "r83", nodes, heard)
    backend.store.write_alerts([alert])
    backend.settle()
    got = [a for a in backend.store.alerts() if a.cluster == cluster]
    assert [a.evidence for a in got] == [alert.evidence]


def test_events_annotations_and_notifications_keep_hard_names(backend: Backend) -> None:
    """Names as tag values of every other record a processor writes."""
    cluster, t = cluster_name(), minute_ago(10) / 1000
    names = tag_names(backend)
    events = [Event(ts=t + i, kind="node_state", cluster=cluster, rack=n, node=n,
                    device="host", value=n) for i, n in enumerate(names)]
    notes = [Notification(t + i, t + i + 0.5, "webhook", f"node_silent/{cluster}/{n}/1",
                          "node_silent", "critical", cluster, n, n, "", "firing", "sent",
                          f"ack:{n}") for i, n in enumerate(names)]
    annotations = [Annotation("maintenance", t + i, t + i + 60, f"{cluster}{n}", "host",
                              f"drain {n}", cluster) for i, n in enumerate(names)]
    before = invalid(backend)
    backend.store.write_events(events)
    backend.store.write_notifications(notes)  # type: ignore[attr-defined]
    backend.store.write_annotations(annotations)
    backend.settle()
    got = backend.store.events(t - 1, t + len(names) + 1)
    assert [e for e in got if e.cluster == cluster] == events
    read = backend.store.notifications(t - 1, t + len(names) + 1)  # type: ignore[attr-defined]
    assert [n for n in read if n.cluster == cluster] == notes
    kept = [a for a in backend.store.annotations(t - 1, t + len(names) + 1)
            if a.cluster == cluster]
    assert sorted(kept, key=lambda a: a.start_ts) == annotations
    assert _settled_invalid(backend, before) == 0


def _printable(rng: random.Random) -> str:
    pool = '"\\,= \'%.:#é温🔥abcXYZ019-_/'
    while True:
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 9)))
        if text.isprintable():
            return text


def test_evidence_keys_are_encoded_to_what_no_server_misreads_and_decoded_exactly() -> None:
    rng = random.Random(26)
    keys = [f"last_frame_ts.{n}" for n in NAMES] + [_printable(rng) for _ in range(2000)]
    for key in keys:
        stored = field_key(key)
        assert not set(stored) & set('"\\,= '), stored
        assert field_key_text(stored) == key
    # What has nothing to encode is stored as it is (and so read back from older releases).
    for key in ("silent_nodes", "last_frame_ts.node-07.a_b:c", "温度", "it's", "🔥"):
        assert field_key(key) == key
    assert field_key('last_frame_ts.q"3') == "last_frame_ts.q%223"
    # Every evidence field of a line, whatever the names, is one field key: no quote that
    # a parser could take as the start of a string value, nothing to unescape.
    line = alert_line(_rack_silent("c", "r", NAMES, 1.7e9))
    fields = line.split(" ")[-2]
    assert fields.count("evidence:") == len(NAMES) + 4 and '"' not in fields


def test_an_alert_with_no_evidence_and_one_with_text_still_round_trip(
        backend: Backend) -> None:
    """Keys with nothing to encode are as before (older rows read the same)."""
    cluster, now = cluster_name(), minute_ago(0) / 1000
    a = dataclasses.replace(_rack_silent(cluster, "r0", [], now - 60), evidence={})
    b = dataclasses.replace(_rack_silent(cluster, "r1", ["node-1"], now - 60))
    backend.store.write_alerts([a, b])
    backend.settle()
    got = {x.rack: x.evidence for x in backend.store.alerts() if x.cluster == cluster}
    assert got == {"r0": {}, "r1": b.evidence}


def _export(address: str, match: str) -> list[dict]:
    query = urllib.parse.urlencode({"match[]": match})
    with urllib.request.urlopen(f"http://{address}/api/v1/export?{query}", timeout=10) as r:
        return [json.loads(x) for x in r.read().splitlines() if x.strip()]


def test_the_line_check_agrees_with_victoriametrics(victoria: Server) -> None:
    """Lines with field keys escaped as tags (as evidence keys were): ``misread`` says
    exactly those the server does not store as written (dropped, split otherwise, a
    value read as 0, or a key with a backslash more)."""
    rng, run = random.Random(7), f"chk{uuid.uuid4().hex[:8]}"
    t_ms = minute_ago(5)
    lines, wanted = [], {}
    for i in range(300):
        keys = list(dict.fromkeys(_printable(rng) or "k" for _ in range(rng.randrange(1, 4))))
        fields = {k: float(j + 1) for j, k in enumerate(keys)}
        wanted[str(i)] = (fields, t_ms + i)
        lines.append(f"{run},i={i} " + ",".join(f"{escape_tag(k)}={v!r}"
                                                for k, v in fields.items()) + f" {t_ms + i}")
    request = urllib.request.Request(f"http://{victoria.address}/api/v2/write?precision=ms",
                                     data="\n".join(lines).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 204
    force_flush(victoria.address)
    stored: dict[str, tuple[dict[str, float], set[int]]] = {}
    for series in _export(victoria.address, f'{{__name__=~"{run}_.*"}}'):
        fields, stamps = stored.setdefault(series["metric"].get("i", ""), ({}, set()))
        fields[series["metric"]["__name__"][len(run) + 1:]] = series["values"][-1]
        stamps.update(series["timestamps"])
    as_written = {i: stored.get(i) == (f, {ts}) for i, (f, ts) in wanted.items()}
    predicted = {str(i): misread(line) is None for i, line in enumerate(lines)}
    assert predicted == as_written
    assert 20 < sum(as_written.values()) < 280  # both kinds were tried


def test_victoriametrics_refuses_a_record_it_would_misread_having_sent_nothing(
        victoria: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Evidence keys as they were escaped before: the write is refused (the processor
    counts and logs refused records), not answered 204 and lost."""
    import fleetwatch.pipeline.store.lprecords as lprecords

    monkeypatch.setattr(lprecords, "field_key", lambda key: key)
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    cluster, heard = cluster_name(), minute_ago(0) / 1000 - 60
    good = _rack_silent(cluster, "ok", ["n1", "n2"], heard)
    bad = _rack_silent(cluster, "rq", NAMES[:3], heard)
    with pytest.raises(StoreRejected, match='1 of 2 record line.*last_frame_ts.q"3') as info:
        store.write_alerts([good, bad])
    assert info.value.indices == (1,) and not info.value.about_frames
    force_flush(victoria.address)
    assert [a for a in store.alerts() if a.cluster == cluster] == []
    store.close()

"""What only the VictoriaMetrics backend has to show: its layout, its dedup, its outages."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fleetwatch.catalogue import catalogue
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.config import Secret, StoreConfig
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.influx import InfluxStore
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.lineproto import FrameEncoder, open_lineproto_store
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server, victoria_metrics
from tests.store.helpers import cluster_name, force_flush, frames, minute_ago


def export(address: str, selector: str) -> list[dict]:
    query = urllib.parse.urlencode({"match[]": selector})
    with urllib.request.urlopen(f"http://{address}/api/v1/export?{query}", timeout=10) as r:
        return [json.loads(line) for line in r.read().splitlines()]


def export_new(address: str, selector: str, timeout_s: float = 10.0) -> list[dict]:
    """``export`` of series just created: their index entries may take a moment to show."""
    deadline = time.monotonic() + timeout_s
    while not (found := export(address, selector)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def test_series_are_named_as_the_catalogue_with_four_labels(victoria: Server) -> None:
    sim = FleetSim(SimParams(nodes=2, gpus=8, cluster=cluster_name()), start_ts=time.time() - 60)
    sim.step()
    batch = sim.frames()
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    n = store.write(batch)
    force_flush(victoria.address)
    series = export(victoria.address, f'{{cluster="{sim.params.cluster}"}}')
    names = {s["metric"]["__name__"] for s in series}
    expected = {m for f in batch for g in f.gpus for m in g.metrics} | set(batch[0].host.metrics)
    assert names == expected and names <= {m.name for m in catalogue().metrics}
    assert {tuple(sorted(s["metric"])) for s in series} == {
        ("__name__", "cluster", "device", "node", "rack")}
    assert sum(len(s["values"]) for s in series) == n == 2 * (8 * 36 + 5)


def test_one_line_per_device_and_instant() -> None:
    encoded = FrameEncoder().encode(frames("c 1", 1_700_000_000_000, 1, nodes=1, gpus=1))
    assert (encoded.lines, encoded.points) == (3, 4)
    assert encoded.body.decode().split("\n") == [
        r"gpu,cluster=c\ 1,device=gpu0,node=node-0,rack=rack-0 temp_c=40.0,power_w=100.0"
        " 1700000000000",
        r"host,cluster=c\ 1,device=host,node=node-0,rack=rack-0 cpu_util_pct=0.0 1700000000000",
        r"nic,cluster=c\ 1,device=eth0,node=node-0,rack=rack-0 rx_bytes_per_s=1000000.0"
        " 1700000000000"]


def test_a_rewrite_is_one_sample_on_the_server(victoria: Server) -> None:
    """Needs -dedup.minScrapeInterval=1ms on the server (tests/servers.py sets it)."""
    cluster, t0 = cluster_name(), minute_ago(10)
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    batch = frames(cluster, t0, 20)
    for _ in range(3):
        store.write(batch)
        force_flush(victoria.address)
    [series] = export(victoria.address, f'gpu_temp_c{{cluster="{cluster}",node="node-0",'
                                        'device="gpu0"}')
    assert series["timestamps"] == [t0 + k * 1000 for k in range(20)]


def test_outage_raises_store_error_then_recovers_with_nothing_lost(tmp_path: Path) -> None:
    server = victoria_metrics(tmp_path).start()
    try:
        url = f"http://{server.address}"
        store = VictoriaMetricsStore(url, max_retries=2, timeout_s=2.0)
        cluster, t0 = cluster_name(), minute_ago(10)
        first, second = frames(cluster, t0, 30), frames(cluster, t0 + 30_000, 30)
        store.write(first)
        server.stop()
        started = time.monotonic()
        with pytest.raises(StoreError, match="after 3 attempts"):
            store.write(second)
        assert time.monotonic() - started < 5  # bounded: the processor pauses, not hangs
        with pytest.raises(StoreError):
            store.latest("gpu_temp_c", t0)
        server.start()
        store.write(second)  # what the processor does: the same batch again
        force_flush(server.address)
        got = store.range("gpu_temp_c", t0, t0 + 60_000, node="node-1", device="gpu0")
        assert [p[1] for p in got] == [t0 + k * 1000 for k in range(60)]
        store.close()
    finally:
        server.stop()


def test_config_picks_the_backend() -> None:
    vm = open_lineproto_store(StoreConfig(kind="victoriametrics", url="http://127.0.0.1:1"))
    influx = open_lineproto_store(StoreConfig(kind="influx", url="http://127.0.0.1:1",
                                              token=Secret("s3cret")))
    assert type(vm) is VictoriaMetricsStore and type(influx) is InfluxQLStore
    write_only = InfluxStore("http://127.0.0.1:1")
    assert write_only.alerts() == []  # a processor can start on it
    with pytest.raises(StoreError, match="writes only"):
        write_only.latest("gpu_temp_c", 0)


def test_alert_and_event_text_is_never_a_label(victoria: Server) -> None:
    """A message that changes through an alert's life used to make a new series each time."""
    import dataclasses

    from fleetwatch.pipeline.store.base import Alert, Event
    from fleetwatch.pipeline.store.lprecords import ALERT_TAGS, EVENT_TAGS

    cluster, now = cluster_name(), minute_ago(0) / 1000
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    alert = Alert("gpu_temp/node-0/gpu3/1", "gpu_temp", "critical", cluster, "rack-0", "node-0",
                  "gpu3", "firing", now - 60, now - 60, 91.0, "GPU 3 at 91 °C",
                  evidence={"gpu_temp_c": 91.0}, action="drain the node",
                  uuid="GPU-1f2e3d4c-0000-1111-2222-333344445555", serial="1650123456789",
                  pci_bus_id="00000000:31:00.0",  # the board: a tag, the same all its life
                  users=("ana",), teams=("llm-pretrain",))  # the team too (a route); user: text
    for k in range(3):
        store.write_alerts([dataclasses.replace(alert, updated_ts=now - 60 + k, value=91.0 + k,
                                                message=f"GPU 3 at {91 + k} °C")])
    store.write_events([Event(now - 30, "xid", cluster, "rack-0", "node-0", "gpu3", code=79,
                              text="NVRM: Xid 79, GPU has fallen off the bus")])
    force_flush(victoria.address)
    alerts = export(victoria.address, f'{{__name__=~"fleetwatch_alert_.+",cluster="{cluster}"}}')
    labels = {tuple(sorted(k for k in s["metric"] if k != "__name__")) for s in alerts}
    assert labels == {tuple(sorted(k for k in ALERT_TAGS))}  # one series per field, no text
    assert {s["metric"]["__name__"] for s in alerts} >= {
        "fleetwatch_alert_state", "fleetwatch_alert_value", "fleetwatch_alert_evidence:gpu_temp_c"}
    assert len(alerts) == len({s["metric"]["__name__"] for s in alerts})
    events = export(victoria.address, f'{{__name__=~"fleetwatch_event_.+",cluster="{cluster}"}}')
    assert [set(s["metric"]) - {"__name__"} for s in events] == [set(EVENT_TAGS) - {"value"}]
    [got] = [a for a in store.alerts() if a.cluster == cluster]
    assert (got.value, got.evidence, got.action) == (93.0, {"gpu_temp_c": 91.0}, "")
    assert got.message == "gpu_temp on node-0 gpu3: 93 (gpu_temp_c=91)"  # rendered on read
    store.close()


def test_a_silence_is_one_series_whose_comment_is_no_label(victoria: Server) -> None:
    """Expiring a silence writes its series again; the free-text comment is not a label."""
    import dataclasses

    from fleetwatch.pipeline.store.base import Silence

    tag, now = cluster_name(), minute_ago(0) / 1000
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    s = Silence(f"{tag}-s", (("cluster", "=", tag), ("node", "=~", r"n\d+")), now - 60,
                now + 3600, "alice", "comment that changes, with text", created_ts=now - 90)
    store.write_silences([s])
    store.write_silences([dataclasses.replace(s, end_ts=now, comment="ended early",
                                              expired_ts=now)])
    force_flush(victoria.address)
    series = export_new(victoria.address,
                        f'{{__name__=~"fleetwatch_silence_.+",id="{s.id}"}}')
    assert {s["metric"]["__name__"] for s in series} == {
        "fleetwatch_silence_start_ts", "fleetwatch_silence_end_ts",
        "fleetwatch_silence_written_ts", "fleetwatch_silence_created_ts",
        "fleetwatch_silence_expired_ts", "fleetwatch_silence_planned_end_ts"}
    assert len(series) == 6  # one series per field: the rewrite landed on the same series
    assert all(len(x["values"]) == 2 for x in series)
    assert {k for x in series for k in x["metric"]} == {"__name__", "id", "h", "by", "m00", "m01"}
    assert not any("comment" in v or "text" in v for x in series for v in x["metric"].values())
    [got] = [x for x in store.silences() if x.id == s.id]
    assert got == Silence(s.id, s.matchers, s.start_ts, now, "alice", "", now - 90, now)
    store.close()


def test_a_silence_victoriametrics_would_truncate_is_refused_before_it_is_sent(
        victoria: Server) -> None:
    """The server cuts a label value past -maxLabelValueLen and drops labels past
    -maxLabelsPerTimeseries without an error: such a silence would mute other alerts."""
    from fleetwatch.pipeline.store.base import Silence, StoreRejected
    from fleetwatch.pipeline.store.lpsilences import MAX_LABEL_CHARS, MAX_MATCHERS

    tag, now = cluster_name(), minute_ago(0) / 1000
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    many = Silence(f"{tag}-many", tuple(("node", "!=", f"n{i}") for i in range(MAX_MATCHERS + 1)),
                   now, now + 60)
    long = Silence(f"{tag}-long", (("node", "=~", "x" * MAX_LABEL_CHARS),), now, now + 60)
    fine = Silence(f"{tag}-fine", (("node", "=", "n1"),), now, now + 60)
    with pytest.raises(StoreRejected, match=f"at most {MAX_MATCHERS}"):
        store.write_silences([fine, many])
    with pytest.raises(StoreRejected, match="shorten it"):
        store.write_silences([long])
    force_flush(victoria.address)
    assert [x for x in store.silences() if x.id.startswith(tag)] == []  # nothing half-written
    store.close()


def test_a_silence_whose_matchers_do_not_read_back_exactly_is_not_applied(
        victoria: Server) -> None:
    """As a server with a smaller -maxLabelValueLen would leave it: a matcher cut short."""
    from fleetwatch.pipeline.store.base import Silence
    from fleetwatch.pipeline.store.lpsilences import silence_line

    tag, now = cluster_name(), minute_ago(0) / 1000
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    s = Silence(f"{tag}-cut", (("node", "=~", "node-00[1-3]"),), now - 60, now + 3600)
    line = silence_line(s, int(now * 1000))
    assert "node-00[1-3]" in line
    store._writer.write_lines([line.replace("node-00[1-3]", "node-00")])  # what a cut leaves
    force_flush(victoria.address)
    assert [x for x in store.silences() if x.id == s.id] == []
    store.close()


def test_fleetwatch_silence_and_ack_work_on_victoriametrics(
        victoria: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands a user runs, and the processor's notifier reading what they wrote."""
    from fleetwatch.cli import main
    from fleetwatch.config import load
    from fleetwatch.frame import Frame, GpuReading
    from fleetwatch.models.rules import GpuTemperatureLimit
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.wiring import open_notifier

    monkeypatch.setenv("FLEETWATCH_STORE_KIND", "victoriametrics")
    monkeypatch.setenv("FLEETWATCH_STORE_URL", f"http://{victoria.address}")
    tag = cluster_name()
    assert main(["silence", "add", f"cluster={tag}", r"node=~n\d+", "--for", "2h", "--by", "ops",
                 "--comment", "fan swap"]) == 0
    silence_id = capsys.readouterr().out.strip()
    assert main(["silence", "add", *(f"node!=n{i}" for i in range(17))]) == 2
    assert "at most 16" in capsys.readouterr().err
    force_flush(victoria.address)
    assert main(["silence", "list"]) == 0
    assert f"cluster={tag},node=~n\\d+" in capsys.readouterr().out

    store = VictoriaMetricsStore(f"http://{victoria.address}")
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)])
    processor.process([Frame(tag, "r1", "n1", time.time(), (
        GpuReading(0, "GPU-0", "H100", {"gpu_temp_c": 95.0}),))])
    force_flush(victoria.address)
    [alert] = [a for a in store.alerts() if a.cluster == tag]
    notifier = open_notifier(load(None), store)  # what `fleetwatch process` hears alerts with
    try:
        [notice] = notifier.send([alert])
    finally:
        notifier.close()
    assert notice.muted_by == f"silence:{silence_id}" and not notice.notify
    assert main(["ack", alert.id, "--by", "oncall"]) == 0
    force_flush(victoria.address)
    assert [(a.alert_id, a.by) for a in store.acks() if a.alert_id == alert.id] == [
        (alert.id, "oncall")]
    assert main(["silence", "expire", silence_id]) == 0
    force_flush(victoria.address)
    capsys.readouterr()
    assert main(["silence", "list"]) == 0
    assert silence_id not in capsys.readouterr().out
    store.close()


def test_an_xid_alert_read_back_has_the_detectors_message_action_and_utc_times(
        victoria: Server) -> None:
    """VictoriaMetrics keeps no text: an XID alert's message and action are rebuilt from its
    evidence and the XID table, with times in UTC, not ``1.8e+09``."""
    from fleetwatch.frame import Frame, GpuReading
    from fleetwatch.models.xid_events import XidEvents
    from fleetwatch.pipeline.alerts import AlertBook

    cluster, now = cluster_name(), minute_ago(0) / 1000
    store = VictoriaMetricsStore(f"http://{victoria.address}")

    def frame(ts: float, codes: tuple[int, ...]) -> Frame:
        return Frame(cluster, "r1", "n1", ts, (GpuReading(3, "GPU-3", "m", {}, None, "ok",
                                                          codes),))

    detector, book = XidEvents(), AlertBook()
    for ts, codes in ((now - 60, (48,)), (now - 50, (48, 64))):
        changes = book.observe([frame(ts, codes)], detector.update([frame(ts, codes)]))
        store.write_alerts(changes)
        book.apply(changes)
    (written,) = book.open
    force_flush(victoria.address)
    [got] = [a for a in store.alerts() if a.cluster == cluster]
    assert got.message == written.message and got.action == written.action
    assert "RMA" in got.action and "48 (Double-bit ECC error) 2x" in got.message
    assert "e+09" not in got.message
    store.close()


def test_a_silence_and_an_ack_are_listed_the_moment_they_are_written(victoria: Server) -> None:
    """`fleetwatch silence add` prints an id that `silence expire` must find at once: an
    operator who silenced the wrong node undoes it straight away (no force_flush here)."""
    from fleetwatch.pipeline.store.base import Acknowledgement, Silence

    tag, now = cluster_name(), time.time()
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    for i in range(3):
        s = Silence(f"{tag}-{i}", (("node", "=", f"{tag}-n{i}"),), now, now + 3600, "alice")
        store.write_silences([s])
        assert s.id in {x.id for x in store.silences()}
        a = Acknowledgement(f"{tag}-alert-{i}", now + i, "bob")
        store.write_acks([a])
        assert a.alert_id in {x.alert_id for x in store.acks()}
    store.close()


def test_an_instant_query_asked_again_after_a_write_sees_it(victoria: Server) -> None:
    """VictoriaMetrics caches instant-query answers: the same query asked before and after a
    write answered empty both times (a processor taking a node over reads its watermark so)."""
    tag = cluster_name()
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    query = f'last_over_time(gpu_temp_c{{cluster="{tag}"}}[5m])'
    at = int(time.time() * 1000)
    assert store.query(query, at) == []
    store.write(frames(tag, at - 2000, 1, nodes=1, gpus=1))
    force_flush(victoria.address)
    assert len(store.query(query, at)) == 1
    store.close()

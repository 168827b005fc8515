"""A processor that takes over firing alerts (a restart, an upgrade) keeps re-sending to
Alertmanager the ones its predecessor posted, and only those: an alert the same-GPU covers
(``SAME_GPU_COVERS``) kept from Alertmanager from its start was never posted, and posting
it at the takeover pages it (Alertmanager has no rule for those covers). Before, every
adopted firing alert was re-sent, muted or not: one hot GPU paged four times, not twice,
after every processor upgrade, while fleetwatch's record still said "muted"."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.notified import never_told
from fleetwatch.pipeline.store.base import Alert, Notification
from tests.servers import Server


def gpu(rule: str, cluster: str, at: float, severity: str = "critical") -> Alert:
    return Alert(f"{rule}/{cluster}/n1/gpu2/{at:.0f}", rule, severity, cluster, "r1", "n1",
                 "gpu2", "firing", at - 30, at, 95.0, f"{rule} on n1 gpu2", fired_ts=at,
                 evidence={"gpu_temp_c": 95.0})


def note(alert_id: str, outcome: str, ts: float, state: str = "firing",
         muted_by: str = "") -> Notification:
    return Notification(ts, ts, "alertmanager", alert_id, "r", "critical", "c", "r1", "n1",
                        "gpu2", state, outcome, muted_by)


def test_never_told_is_an_alert_only_ever_recorded_muted_at_that_sink() -> None:
    rows = [note("a", "muted", 1, muted_by="inhibited:x"),              # never posted
            note("b", "sent", 1), note("b", "muted", 2, muted_by="silence:s"),  # posted first
            note("c", "muted", 1, muted_by="inhibited:x"), note("c", "sent", 2)]
    assert never_told(["a", "b", "c", "d"], "alertmanager", rows) == {"a"}
    assert never_told(["a"], "webhook", rows) == set()  # (another sink's record)


class Adopting:
    """A notifying sink that keeps what it is handed at a takeover."""

    name, notify_only = "alertmanager", True

    def __init__(self) -> None:
        self.adopted: list[Notice] = []

    def send(self, changes: Sequence[Notice]) -> bool:
        return True

    def adopt(self, notices: Sequence[Notice]) -> None:
        self.adopted += notices

    def close(self) -> None:
        pass


def _hot_gpu(cluster: str, t0: float) -> list[list[Alert]]:
    """One hot GPU: far hotter than its peers first (the page), then at its slowdown
    temperature (joined to that page, muted), hotter than its peers (a warning its critical
    mutes) and high (muted by the critical, which its GPU's page mutes: still a cover)."""
    return [[gpu("gpu_hot_vs_peers_critical", cluster, t0)],
            [gpu("gpu_temp_critical", cluster, t0 + 30),
             gpu("gpu_hot_vs_peers", cluster, t0 + 30, "warning"),
             gpu("gpu_temp_high", cluster, t0 + 30, "warning")]]


def _record() -> tuple[list[Notification], object, object]:
    rows: list[Notification] = []

    def recorded(ids: Sequence[str]) -> Iterable[Notification]:
        return [r for r in rows if r.alert_id in set(ids)]
    return rows, rows.extend, recorded


def test_a_takeover_hands_alertmanager_only_what_was_posted() -> None:
    rows, record, recorded = _record()
    batches = _hot_gpu("c", time.time() - 600)
    first = Notifier([Adopting()], background=False, record=record)  # type: ignore[list-item]
    for batch in batches:
        first.send(batch)
    first.close()
    sink = Adopting()
    Notifier([sink], background=False, recorded=recorded).adopt(  # type: ignore[list-item]
        [a for b in batches for a in b])
    assert [n.alert.rule for n in sink.adopted] == ["gpu_hot_vs_peers_critical"]


def _in_am(server: Server, cluster: str) -> list[str]:
    url = f"http://{server.address}/api/v2/alerts?filter=" + urllib.parse.quote(
        f'cluster="{cluster}"')
    with urllib.request.urlopen(url, timeout=5) as r:
        return sorted(a["labels"]["alertname"] for a in json.load(r))


def test_a_restarted_processor_re_sends_to_alertmanager_what_the_one_before_posted(
        am: Server) -> None:
    rows, record, recorded = _record()
    cluster = f"takeover-{time.time_ns()}"
    batches = _hot_gpu(cluster, time.time() - 600)
    first = Notifier([AlertmanagerSink(f"http://{am.address}")], background=False,
                     record=record)  # type: ignore[arg-type]
    for batch in batches:
        first.send(batch)
    first.close()
    posted = ["gpu_hot_vs_peers_critical"]  # one hot GPU, one page
    assert _in_am(am, cluster) == posted
    # The next processor takes the four open alerts over and re-sends at its first tick.
    sink = AlertmanagerSink(f"http://{am.address}")
    second = Notifier([sink], background=False, recorded=recorded)  # type: ignore[arg-type]
    second.adopt([a for b in batches for a in b])
    assert sink.tick()
    second.close()
    assert _in_am(am, cluster) == posted

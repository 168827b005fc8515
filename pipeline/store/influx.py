"""Line-protocol writes to any server of the InfluxDB v2 write API, through influxdb-client.

VictoriaMetrics (``/api/v2/write``, tested here), InfluxDB 2.x and 3.x (same
API, untested here: no such server installs on our CI machines); InfluxDB
1.x through its v1 ``/write`` (``api="v1"``, tested with 1.6.7).

``api="auto"`` (``store.influx_api``'s default) asks the server once, at the first
request, which it is: ``GET /ping`` answers with ``X-Influxdb-Version`` (``1.6.7``,
``v2.7.4``); a 1.x is written through ``/write?db=`` (every 1.x has it;
``/api/v2/write`` came only with 1.8), anything else (2.x, 3.x, no version:
VictoriaMetrics, InfluxDB Cloud) through the v2 API. While ``/ping`` cannot be
reached that first request fails with a ``StoreError`` and the question is asked
again at the next one, so a processor started before its store still finds it.
On 1.x the bucket is the database (its default retention policy), the org is
not used and the token is ``username:password`` (HTTP basic auth, what every 1.x
takes; 1.8's v2-compatible API reads its token the same way), or the same in the URL
(``http://user:password@host:8086``, see ``lpwriter.ServerURL``).

The requests themselves are ``LineProtocolWriter``'s (``lpwriter``): synchronous,
batched, retried, and their answers told apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterator, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Alert,
    AlertState,
    Annotation,
    Event,
    Notification,
    Point,
    Silence,
    StoreError,
    StoreRejected,
)
from fleetwatch.pipeline.store.lineproto import EncodedLines, FrameEncoder, v1_unwritable
from fleetwatch.pipeline.store.lpcheck import misread
from fleetwatch.pipeline.store.lpnotify import notification_line
from fleetwatch.pipeline.store.lprecords import (
    alert_line,
    annotation_line,
    event_line,
    event_precision,
)
from fleetwatch.pipeline.store.lpsilences import ack_line, silence_line
from fleetwatch.pipeline.store.lpwriter import LineProtocolWriter
from fleetwatch.pipeline.store.window import AcceptWindow

log = logging.getLogger(__name__)

_FRAMES_PER_SLICE = 200
# How long a server's accepted window is trusted before it is read again.
_WINDOW_TTL_S = 300.0


class InfluxStore:
    """The write half of the Store protocol, for any server of the v2 write API, and for
    InfluxDB 1.x through its ``/write`` (``api``: see ``LineProtocolWriter``).

    The reads are the subclasses': ``VictoriaMetricsStore`` (Prometheus API)
    and ``InfluxQLStore`` (InfluxDB). Here ``latest``, ``range``,
    ``annotations`` and ``events`` raise ``StoreError`` and ``alerts``
    returns nothing, so that a write-only deployment still runs a processor
    (whose open alerts are then not reloaded after a restart).

    ``write`` may run in two threads at once (``concurrent_writes``): the
    processor then sends a batch while the previous one's last requests are
    still with the server. ``keeps_text``: whether string fields (alert
    messages, event text) are sent; a subclass whose server keeps only
    numbers leaves them out.
    """

    concurrent_writes = 2
    keeps_text = True
    # Whether record lines are checked before they are sent (``lpcheck``): where the server
    # answers 204 and drops, or stores otherwise, a line it misreads (VictoriaMetrics).
    checks_lines = False

    def __init__(self, url: str, *, org: str = "fleetwatch", bucket: str = "fleetwatch",
                 token: str = "", timeout_s: float = 10.0, batch_lines: int = 5000,
                 max_retries: int = 3, api: str | None = None) -> None:
        self.timeout_s = timeout_s
        self._writer = LineProtocolWriter(url, org=org, bucket=bucket, token=token,
                                          timeout_s=timeout_s, batch_lines=batch_lines,
                                          max_retries=max_retries, api=api)
        # Messages name self.url (a password masked); requests go to self.server.base.
        self.server = self._writer.server
        self.url = self.server.shown
        self._local = threading.local()  # a FrameEncoder per writing thread
        self._window: AcceptWindow | None = None
        self._window_read = -_WINDOW_TTL_S
        self._written_ms = 0
        self._written_lock = threading.Lock()

    @property
    def v1(self) -> bool:
        """Whether the server is InfluxDB 1.x, written through its /write; with
        ``api="auto"`` asked of it at the first use (``LineProtocolWriter.api``)."""
        return self._writer.v1

    # -- what the server keeps
    def accepted_window(self) -> AcceptWindow | None:
        """The timestamps the server keeps, read from it (subclasses); None: not known."""
        return None

    def _current_window(self) -> AcceptWindow | None:
        if time.monotonic() - self._window_read >= _WINDOW_TTL_S:
            self._window = self.accepted_window()
            self._window_read = time.monotonic()
        return self._window

    def refused(self, frames: Sequence[Frame]) -> StoreRejected | None:
        """The refusal of the frames this server would drop or could not read back, if any."""
        window = self._current_window()
        if window is not None:
            out = window.refused(frames)
            if out:
                return StoreRejected(window.reason(frames, out), out, about_frames=True)
        if self.v1:
            out = [i for i, f in enumerate(frames) if any(v1_unwritable(name) for name in (
                f.cluster, f.rack, f.node, *(p.name for p in f.host.ports)))]
            if out:
                f = frames[out[0]]
                return StoreRejected(
                    f"{len(out)} frame(s) name a place InfluxDB 1.x line protocol cannot "
                    f"carry (a name ending in a backslash, or one before ',', '=' or ' '), "
                    f"e.g. {f.cluster!r}/{f.rack!r}/{f.node!r}: rename it at the agent", out,
                    about_frames=True)
        return None

    # -- writes
    def write(self, frames: Sequence[Frame]) -> int:
        rejected = self.refused(frames)
        if rejected is not None:  # nothing sent: the caller stores the others again
            raise rejected
        encoder = getattr(self._local, "encoder", None)
        if encoder is None:
            encoder = self._local.encoder = FrameEncoder(v1=self.v1)
        points = 0

        def blocks() -> Iterator[EncodedLines]:
            # A slice at a time, so the first request leaves before the last frame is encoded.
            nonlocal points
            for i in range(0, len(frames), _FRAMES_PER_SLICE):
                block = encoder.encode(frames[i:i + _FRAMES_PER_SLICE])
                points += block.points
                yield block

        self._writer.write_blocks(blocks())
        return points

    def write_alerts(self, alerts: Sequence[Alert]) -> None:
        self._write_records([alert_line(a, self.keeps_text, self.v1) for a in alerts])

    def write_annotations(self, annotations: Sequence[Annotation]) -> None:
        self._write_records([annotation_line(a, self.v1) for a in annotations])

    def write_events(self, events: Sequence[Event]) -> None:
        # Not checked (``_write_records``): many a batch, and their names are tag values only,
        # escaped as the frames' are.
        self._write_records([event_line(e, self.keeps_text, self.v1) for e in events],
                            event_precision(self.keeps_text), check=False)

    def write_notifications(self, notes: Sequence[Notification]) -> None:
        """What was notified (``lpnotify``), at the stream's time of each."""
        self._write_records([notification_line(n, self.v1) for n in notes])

    def _write_records(self, lines: list[str], precision: str = "ms",
                       check: bool = True) -> None:
        """Send record lines; with ``checks_lines`` first refuse, having sent nothing, any the
        server would not store as written (``StoreRejected``: the processor counts and logs
        the records it refuses, ``pipeline.refusals``; a command says it). A check costs
        about as much as making the line (~1 ms for an alert naming 40 nodes)."""
        if check and self.checks_lines:
            bad = [(i, why) for i, line in enumerate(lines) if (why := misread(line))]
            if bad:
                i, why = bad[0]
                raise StoreRejected(
                    f"{len(bad)} of {len(lines)} record line(s) would not be stored as "
                    f"written by {self.url} ({why}), e.g. {lines[i][:300]!r}",
                    [i for i, _ in bad], about_frames=False)
        self._writer.write_lines(lines, precision)

    def _record_ms(self) -> int:
        """The time a silence or acknowledgement is written at: now, in ms, and after the
        last one this store wrote, so that a rewrite made within the same ms is newer."""
        with self._written_lock:
            self._written_ms = max(int(time.time() * 1000), self._written_ms + 1)
            return self._written_ms

    def write_silences(self, silences: Sequence[Silence]) -> None:
        """Add or replace (by id) silences; ``lpsilences.silence_line`` says the layout.
        Raises ``StoreRejected``, having sent nothing, for one this server cannot keep."""
        lines = [silence_line(s, self._record_ms(), self.keeps_text, self.v1) for s in silences]
        self._write_records(lines)

    def write_acks(self, acks: Sequence[Acknowledgement]) -> None:
        lines = [ack_line(a, self._record_ms(), self.keeps_text, self.v1) for a in acks]
        self._write_records(lines)

    def silences(self, active_at: float | None = None) -> list[Silence]:
        raise self._no_reads()

    def acks(self) -> list[Acknowledgement]:
        raise self._no_reads()

    def _no_reads(self) -> StoreError:
        return StoreError(f"{type(self).__name__} writes only; read {self.url} through "
                          "VictoriaMetricsStore or InfluxQLStore")

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        raise self._no_reads()

    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        raise self._no_reads()

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        raise self._no_reads()

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        log.warning("%s cannot read alerts back; open alerts are not reloaded",
                    type(self).__name__)
        return []

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        raise self._no_reads()

    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        raise self._no_reads()

    def maintain(self, now_ms: int) -> None:
        """Nothing to do: retention is the bucket's, downsampling the server's tasks."""

    def close(self) -> None:
        self._writer.close()

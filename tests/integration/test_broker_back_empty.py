"""A broker restarted empty while a processor runs (Tansu's memory storage; as a broker
whose disk was lost, or a topic deleted and made again).

Against the real Tansu broker: agents send, some nodes die and are paged silent, the
broker is restarted empty (the frames topic is made again with Tansu's own partition count,
as Tansu does when a consumer asks for it first), the dead nodes come back. Counted in the
store: every frame the agents counted delivered (acknowledged, sent at once or replayed
from the spool) is stored, although Tansu acknowledges the first writes after the restart
to a topic it does not have; and every node_silent alert resolves once its node reports
again. Frames the agents replay there may carry the new log past the processor's old
position before it fetches again (a busy machine): only the topic's new id shows it then.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

import pytest

from fleetwatch.agent_service import AgentService
from fleetwatch.config import (
    AgentConfig,
    AlertsConfig,
    BusConfig,
    Config,
    DetectorsConfig,
    NodeConfig,
    ProcessorConfig,
    StoreConfig,
)
from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.process_service import run_processor
from tests.bus.test_mixed_partitions import frames_stored
from tests.core.test_silent_takeover import silent_alerts
from tests.servers import Server, alertmanager, free_port, wait_for
from tests.sinks.test_alertmanager import am_alerts

pytestmark = pytest.mark.kafka
# Under 12 partitions node-0, node-1 and node-2 go to 11, 10 and 9: partitions that no
# longer exist once the broker has made the topic again with 4.
DEAD = ("node-0", "node-1", "node-2")
LIVE = ("node-3", "node-4", "node-5")


class Agent:
    def __init__(self, broker: Server, tmp_path: Path, node: str) -> None:
        # A rack of its own: three nodes of one rack dying together are one rack_silent
        # alert, their node alerts muted under it (tests/integration/test_rack_silent_kafka.py);
        # here each dead node's own page is what must survive the broker's restart.
        config = Config(node=NodeConfig("dc1", f"rack-{node}", node),
                        agent=AgentConfig(interval_s=0.5, spool_dir=str(tmp_path / node),
                                          metrics_port=0, kernel_log=""),
                        bus=BusConfig(kind="kafka", bootstrap=broker.address))
        self.service = AgentService(config, fake_gpus=1)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.service.run, args=(self.stop,),
                                       daemon=True)
        self.thread.start()

    def sent(self) -> int:
        """Frames the broker acknowledged and the producer counted delivered, sent at once
        or replayed from the spool."""
        producer = self.service.producer
        return 0 if producer is None else producer.sent + producer.replayed

    def end(self) -> None:
        self.stop.set()
        self.thread.join(30)


def firing(db: Path) -> set[str]:
    return {a.node for a in silent_alerts(db) if a.state == "firing"}


def paged(am: Server) -> set[str]:
    """The nodes Alertmanager holds an active node_silent alert of."""
    return {n for n in DEAD + LIVE for a in am_alerts(am, n)
            if a["labels"].get("alertname") == "node_silent"
            and a["status"]["state"] == "active"}


def test_a_broker_back_empty_loses_no_frame_and_resolves_every_alert(
        own_kafka: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "fw.db"
    am = alertmanager(tmp_path).start()
    config = Config(bus=BusConfig(kind="kafka", bootstrap=own_kafka.address),
                    store=StoreConfig(kind="sqlite", path=str(db)),
                    processor=ProcessorConfig(metrics_port=free_port()),
                    alerts=AlertsConfig(keep_firing_s=0.0, alertmanager_resend_s=1.0,
                                        alertmanager_url=f"http://{am.address}"),
                    detectors=DetectorsConfig(silent_min_s=4.0))
    stop_processor = threading.Event()
    processor = threading.Thread(target=run_processor, args=(config, stop_processor),
                                 daemon=True)
    agents: dict[str, Agent] = {}
    try:
        with caplog.at_level(logging.INFO, "fleetwatch"):
            processor.start()
            wait_for("the processor's partitions", lambda: "partitions assigned: "
                     f"{config.bus.topic}/0" in caplog.text, timeout_s=60)
            agents = {n: Agent(own_kafka, tmp_path, n) for n in DEAD + LIVE}
            wait_for("every node stored", lambda: all(
                frames_stored(db, n) >= 6 for n in agents), timeout_s=90)
            for n in DEAD:
                agents.pop(n).end()
            wait_for("the dead nodes paged", lambda: firing(db) == set(DEAD), timeout_s=60)
            # What the broker acknowledged and then lost with its memory, before the
            # processor read it, no agent can know of: the live agents count nothing
            # delivered (their spooling producers held) until the processor has read all
            # they counted, and the broker stops meanwhile. Held, the agents go on sampling.
            with contextlib.ExitStack() as held:
                for n in LIVE:
                    held.enter_context(agents[n].service.producer._lock)  # type: ignore[union-attr]
                wait_for("every delivered frame stored", lambda: all(
                    frames_stored(db, n) >= agents[n].sent() for n in LIVE), timeout_s=30)
                own_kafka.stop()
            time.sleep(2.0)
            own_kafka.start()  # memory storage: back empty
            # The topic made again with Tansu's own count (4, not bus.partitions), as Tansu
            # does for the processor's consumer when it asks first; an agent that checked
            # its topics first has made it with 12 (then this leaves it as it is).
            remade = ensure_topic(own_kafka.address, config.bus.topic, 4)
            assigned = caplog.text.count("partitions assigned: ")
            restarted = {n: agents[n].sent() for n in LIVE}
            wait_for("the live agents delivering again", lambda: all(
                agents[n].sent() >= restarted[n] + 20 for n in LIVE), timeout_s=90)
            # The processor's group took what there is now; the dead nodes return after.
            wait_for("the processor's partitions after the restart", lambda: (
                f"moved away: {config.bus.topic}/4" in caplog.text if remade == 4
                else caplog.text.count("partitions assigned: ") > assigned), timeout_s=90)
            # Alertmanager lets an alert that is not re-sent expire (endsAt: 4 resends
            # ahead) and tells the receivers it resolved: the dead nodes must stay paged.
            time.sleep(8.0)
            assert firing(db) >= set(DEAD)
            assert paged(am) >= set(DEAD), "Alertmanager let dead nodes' alerts expire"
            for n in DEAD:
                agents[n] = Agent(own_kafka, tmp_path, n)
            wait_for("the returned nodes delivering", lambda: all(
                agents[n].sent() >= 10 for n in DEAD), timeout_s=90)
            # Every node reports: no node_silent may stay firing (a few seconds to judge).
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and firing(db):
                time.sleep(1.0)
            still = firing(db)
            wait_for("Alertmanager told the nodes are back", lambda: not paged(am) & set(DEAD),
                     timeout_s=20)
            for agent in agents.values():
                agent.end()
            sent = {n: a.sent() for n, a in agents.items()}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                    frames_stored(db, n) < sent[n] for n in agents):
                time.sleep(1.0)
            time.sleep(3.0)
    finally:
        for agent in agents.values():
            agent.end()
        stop_processor.set()
        processor.join(60)
        am.stop()
    assert still == set(), "node_silent still firing for nodes that came back"
    stored = {n: frames_stored(db, n) for n in sent}
    # Right after the restart the agents' producers still write over 12 partitions, and
    # Tansu acknowledges writes to a topic and partitions it does not have: the producer
    # must see that (pipeline.bus.kafka_acks) and the spool send them again.
    lost = {n: sent[n] - stored[n] for n in sent if stored[n] < sent[n]}
    assert not lost, f"frames acknowledged but not stored: {lost}"

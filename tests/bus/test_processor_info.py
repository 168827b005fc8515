"""Each processor says on /metrics what its group's members must share.

``fleetwatch_processor_info{group, store_kind, store_target, detectors, alert_sinks}``: a real
``fleetwatch process`` against the real Tansu broker, scraped. Members of one group
with another store, other detectors or alert sinks settings differ in these labels, which the
rule FleetwatchGroupConfigMismatch (deploy/prometheus) watches.
"""

from __future__ import annotations

import threading
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch import __version__, commit
from fleetwatch.config import BusConfig, Config, ProcessorConfig, StoreConfig, load
from fleetwatch.process_service import run_processor
from fleetwatch.wiring import processor_info
from tests.servers import Server, free_port, wait_for

pytestmark = pytest.mark.kafka


def scrape(port: int) -> dict[str, list]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_a_processor_exports_its_group_store_and_detectors(kafka: Server,
                                                          tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    port = free_port()
    config = Config(bus=BusConfig(kind="kafka", bootstrap=kafka.address, topic=f"f-{run}",
                                  dead_letter_topic=f"f-{run}.dead", alert_topic="",
                                  group=f"g-{run}", partitions=2),
                    store=StoreConfig(kind="sqlite", path=str(tmp_path / "fw.db")),
                    processor=ProcessorConfig(metrics_port=port))
    stop = threading.Event()
    thread = threading.Thread(target=run_processor, args=(config, stop), daemon=True)
    thread.start()
    try:
        # Its info is exported from the start (while it waits for its broker, too); the
        # topics' partition counts once it has checked them.
        def checked() -> bool:
            families = scrape(port)
            return "fleetwatch_processor_info" in families and any(
                s.labels.get("topic") == f"f-{run}"
                for s in families.get("fleetwatch_processor_topic_partitions_missing", []))
        wait_for("fleetwatch_processor_info and the topics' partitions on /metrics", checked,
                 timeout_s=60)
        families = scrape(port)
    finally:
        stop.set()
        thread.join(60)
    (info,) = families["fleetwatch_processor_info"]
    assert info.value == 1
    assert info.labels == {"group": f"g-{run}", "store_kind": "sqlite",
                           "store_target": str(tmp_path / "fw.db"),
                           "detectors": processor_info(config)["detectors"],
                           "alert_sinks": processor_info(config)["alert_sinks"],
                           "version": __version__, "commit": commit()}
    missing = {s.labels["topic"]: s.value
               for s in families["fleetwatch_processor_topic_partitions_missing"]}
    assert missing[f"f-{run}"] == 0 and missing[f"f-{run}.dead"] == 0


def test_the_labels_tell_members_apart_and_never_show_a_password() -> None:
    base = load(None, {"FLEETWATCH_STORE_KIND": "victoriametrics",
                       "FLEETWATCH_STORE_URL": "http://admin:s3cretPW@vm:8428/"})
    info = processor_info(base)
    assert info["store_target"] == "http://admin:***@vm:8428"
    assert info["group"] == base.bus.group and info["store_kind"] == "victoriametrics"
    same = load(None, {"FLEETWATCH_STORE_KIND": "victoriametrics",
                       "FLEETWATCH_STORE_URL": "http://admin:s3cretPW@vm:8428"})
    assert processor_info(same) == info
    hotter = load(None, {"FLEETWATCH_STORE_KIND": "victoriametrics",
                         "FLEETWATCH_STORE_URL": "http://admin:s3cretPW@vm:8428",
                         "FLEETWATCH_DETECTORS_HIGH_MARGIN_C": "6"})
    assert processor_info(hotter)["detectors"] != info["detectors"]
    fewer = load(None, {"FLEETWATCH_STORE_KIND": "victoriametrics",
                        "FLEETWATCH_DETECTORS_ENABLED": "xid, node_silent"})
    assert processor_info(fewer)["detectors"] not in (info["detectors"],
                                                      processor_info(hotter)["detectors"])
    sqlite = load(None, {"FLEETWATCH_STORE_KIND": "sqlite"})
    assert processor_info(sqlite)["store_target"].startswith("/")
    assert processor_info(sqlite)["detectors"] == info["detectors"]
    hooked = load(None, {"FLEETWATCH_STORE_KIND": "victoriametrics",
                         "FLEETWATCH_STORE_URL": "http://admin:s3cretPW@vm:8428",
                         "FLEETWATCH_ALERTS_WEBHOOK_URL": "http://hook:9000/x?token=T0KEN"})
    assert processor_info(hooked)["alert_sinks"] != info["alert_sinks"]
    assert processor_info(hooked)["detectors"] == info["detectors"]
    assert "T0KEN" not in str(processor_info(hooked))

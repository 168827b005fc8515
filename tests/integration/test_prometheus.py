"""Prometheus, the real one, watching fleetwatch: deploy/prometheus's configuration and rules
checked and unit-tested by promtool, then a live Prometheus scraping a real agent and a real
processor with them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.collectors.agent_health import AgentHealth
from fleetwatch.pipeline.bus.kafka import KafkaProducer
from tests.servers import Server, free_port, http_ok, wait_for, wait_port

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
RULE_TESTS = ROOT / "tests" / "prometheus" / "fleetwatch-rules.test.yml"


def binary(name: str) -> str:
    path = shutil.which(name)
    assert path, f"no {name}: `apt-get install prometheus` (scripts/test does this)"
    return path


def promtool(*args: str) -> str:
    result = subprocess.run([binary("promtool"), *args], capture_output=True, text=True,
                            timeout=120)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    return said


def test_promtool_accepts_the_config_and_the_rules_and_their_tests_pass() -> None:
    assert "SUCCESS: 1 rule files found" in promtool("check", "config",
                                                     str(DEPLOY / "prometheus.yml"))
    assert "SUCCESS: 33 rules found" in promtool("check", "rules",
                                                 str(DEPLOY / "fleetwatch-rules.yml"))
    assert "SUCCESS" in promtool("test", "rules", str(RULE_TESTS))


def later_agents_frame() -> bytes:
    """A frame of an agent of a later release: a host metric id this one does not know."""
    import time

    import msgpack

    from fleetwatch.codec import encode
    from fleetwatch.frame import Frame

    body = msgpack.unpackb(encode(Frame("c1", "r1", "later", time.time(), ())),
                           strict_map_key=False)
    body[7][0][9106] = 1.0
    return msgpack.packb(body, use_bin_type=True)


def query(address: str, expr: str) -> list[dict]:
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]["result"]


def api(address: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return json.load(r)["data"]


def value(address: str, expr: str) -> float | None:
    result = query(address, expr)
    return float(result[0]["value"][1]) if result else None


def own_metric(address: str, name: str) -> float:
    """The sum of a counter in Prometheus's own /metrics (it does not scrape itself here)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        families = text_string_to_metric_families(r.read().decode())
    samples = [s.value for f in families for s in f.samples if s.name == name]
    assert samples, f"Prometheus has no {name}"
    return sum(samples)


def fleetwatch(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", *args],
                                env={**clean, **env}, cwd=log.parent, stdout=out,
                                stderr=subprocess.STDOUT)


def prometheus_config(tmp: Path, agent: str, processor: str) -> Path:
    """deploy/prometheus as shipped, with this test's two targets and one-second scrapes."""
    conf = tmp / "prometheus"
    shutil.copytree(DEPLOY, conf)
    (conf / "targets" / "agents.yml").write_text(f'- targets: ["{agent}"]\n')
    (conf / "targets" / "processors.yml").write_text(f'- targets: ["{processor}"]\n')
    main = conf / "prometheus.yml"
    text = main.read_text()
    text = text.replace("scrape_interval: 15s", "scrape_interval: 1s")
    text = text.replace("evaluation_interval: 15s", "evaluation_interval: 1s")
    main.write_text(text)
    return main


def families(address: str) -> set[str]:
    """The sample names a /metrics declares (``# TYPE`` lines: also a family with no
    series yet): a counter's with ``_total``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out.add(name + "_total" if kind == "counter" and not name.endswith("_total")
                    else name)
    return out


def rule_metric_names() -> set[str]:
    return set(re.findall(r"\bfleetwatch_[a-z0-9_]+\b",
                          (DEPLOY / "fleetwatch-rules.yml").read_text()))


def test_prometheus_scrapes_agent_and_processor_and_evaluates_the_rules(
        kafka: Server, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    agent_port, processor_port, prom_port = free_port(), free_port(), free_port()
    env = {"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
           "FLEETWATCH_BUS_TOPIC": f"frames-{run}", "FLEETWATCH_BUS_GROUP": f"prom-{run}",
           "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": f"frames-{run}.dead",
           "FLEETWATCH_BUS_ALERT_TOPIC": f"alerts-{run}", "FLEETWATCH_BUS_PARTITIONS": "1",
           "FLEETWATCH_NODE_NODE": f"gpu-{run}",
           "FLEETWATCH_AGENT_SPOOL_DIR": str(tmp_path / "spool"),
           "FLEETWATCH_AGENT_METRICS_PORT": str(agent_port),
           "FLEETWATCH_PROCESSOR_METRICS_PORT": str(processor_port),
           "FLEETWATCH_STORE_PATH": str(tmp_path / "fleetwatch.db")}
    logs = [tmp_path / n for n in ("agent.log", "process.log", "prometheus.log")]
    procs = [fleetwatch(["process"], env, logs[1]),
             fleetwatch(["agent", "--fake-gpus", "8", "--interval", "1s"], env, logs[0])]
    config = prometheus_config(tmp_path, f"127.0.0.1:{agent_port}",
                               f"127.0.0.1:{processor_port}")
    with open(logs[2], "ab") as out:
        procs.append(subprocess.Popen(
            [binary("prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=out, stderr=subprocess.STDOUT))
    prom = f"127.0.0.1:{prom_port}"
    try:
        wait_port(prom_port, 30)
        wait_for("Prometheus is not ready", lambda: http_ok(f"http://{prom}/-/ready"), 60, logs)
        wait_for("Prometheus does not see both targets up",
                 lambda: value(prom, 'sum(up{job=~"fleetwatch-.*"})') == 2.0, 90, logs)
        wait_for("the processor's lag is not scraped",
                 lambda: value(prom, "fleetwatch_processor_consumer_lag") is not None, 60, logs)

        # Every sample of the agent's /metrics is one Prometheus took: none refused. (The
        # two counts are read a moment apart, so they are compared until they agree.)
        def exposed() -> int:
            url = f"http://127.0.0.1:{agent_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
            return sum(len(f.samples) for f in text_string_to_metric_families(text))

        wait_for("Prometheus did not take every sample the agent exposed", lambda: value(
            prom, 'scrape_samples_post_metric_relabeling{job="fleetwatch-agent"}')
            == exposed() > 100, 30, logs)
        for problem in ("sample_duplicate_timestamp", "sample_out_of_order",
                        "sample_out_of_bounds", "exceeded_sample_limit"):
            assert own_metric(prom, f"prometheus_target_scrapes_{problem}_total") == 0.0
        temps = query(prom, 'DCGM_FI_DEV_GPU_TEMP{job="fleetwatch-agent"}')
        assert len(temps) == 8
        assert {"gpu", "UUID", "Hostname", "modelName", "instance"} <= set(temps[0]["metric"])

        # The rules load and evaluate without an error, quiet on a healthy fleetwatch.
        groups = api(prom, "/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == 33 and all(r["health"] == "ok" for r in rules), rules
        assert own_metric(prom, "prometheus_rule_evaluation_failures_total") == 0.0
        # (Before its first scrape of a processor, Prometheus holds FleetwatchProcessorsDown
        # pending for an evaluation or two: it pages only after 2 min.)
        wait_for("a Fleetwatch alert stays pending or firing on a healthy fleetwatch",
                 lambda: not query(prom, 'ALERTS{alertname=~"Fleetwatch.*"}'), 30, logs)

        # A message that is no frame: the processor dead-letters it, and Prometheus says so.
        producer = KafkaProducer(kafka.address)
        producer.send(f"frames-{run}", b"not a frame", b"stranger")
        producer.send(f"frames-{run}", later_agents_frame(), b"later")  # stored, counted
        producer.flush(30)
        producer.close()
        wait_for("FleetwatchDeadLetters does not fire", lambda: query(
            prom, 'ALERTS{alertname="FleetwatchDeadLetters", alertstate="firing"}'), 60, logs)
        # Every metric the rules read is one fleetwatch exports under that name: scraped by
        # Prometheus, or (a family whose series come with their first count: refusals,
        # NVML errors, clock offsets) declared in the agent's or the processor's /metrics.
        names = set(api(prom, "/api/v1/label/__name__/values"))
        declared = families(f"127.0.0.1:{agent_port}") | families(f"127.0.0.1:{processor_port}")
        declared |= {f.name + "_total" if f.type == "counter" else f.name
                     for f in AgentHealth().collect()}  # the agent shows no empty family
        missing = rule_metric_names() - names - declared
        assert not missing, sorted(missing)
        assert {"fleetwatch_alert_sink_oldest_held_seconds",
                "fleetwatch_agent_spool_write_errors_total"} <= names

        # The agent dies: Prometheus holds FleetwatchAgentDown pending (it fires after 5 min).
        procs[1].kill()
        wait_for("FleetwatchAgentDown is not pending", lambda: query(
            prom, 'ALERTS{alertname="FleetwatchAgentDown", alertstate="pending"}'), 60, logs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

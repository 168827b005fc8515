"""A frame compressed by another producer (zstd, snappy) on the processor's topic.

A real ``fleetwatch process`` subprocess against a real broker: the compressed frame is
stored with the plain frames behind it; where the codec's library is missing (here
``zstandard`` made unimportable), the batch is passed over with one line naming its topic,
partition and offsets, the frames behind it are stored, and SIGTERM stops the processor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer as ClientProducer

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.servers import Server
from tests.store.helpers import stored

pytestmark = pytest.mark.kafka


def frame(i: int) -> Frame:
    gpus = tuple(GpuReading(g, f"GPU-foreign-{g}", "NVIDIA H100 80GB HBM3",
                            {"gpu_temp_c": 40.0}, info={"serial": "S" * 100})
                 for g in range(8))
    return Frame("c1", "r1", "foreign-node", time.time() - 60 + i, gpus, seq=i)


def run_processor(kafka: Server, tmp_path: Path, codec: str, block: str | None,
                  ) -> tuple[int, str, int]:
    """One compressed frame then 5 plain ones; the processor's exit code, log, frames stored."""
    run = uuid.uuid4().hex[:8]
    topic = f"foreign-{codec}-{run}"
    ensure_topic(kafka.address, topic, 1)
    for comp, frames in ((codec, [frame(0)]), (None, [frame(i) for i in range(1, 6)])):
        p = ClientProducer(bootstrap_servers=kafka.address, compression_type=comp,
                           enable_idempotence=False)
        for f in frames:
            p.send(topic, encode(f), key=b"foreign-node")
        p.flush(10)
        p.close()
    db = tmp_path / f"{codec}.db"
    SqliteStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    if block:  # a module of that name that cannot be imported: the library is missing
        shim = tmp_path / "shim"
        shim.mkdir(exist_ok=True)
        (shim / f"{block}.py").write_text("raise ImportError('not installed (test)')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(shim), env.get("PYTHONPATH", "")])
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_DEAD_LETTER_TOPIC": topic + ".dead",
                "FLEETWATCH_BUS_ALERT_TOPIC": topic + ".alerts",
                "FLEETWATCH_BUS_GROUP": f"g-{run}", "FLEETWATCH_BUS_SESSION_TIMEOUT_S": "6",
                "FLEETWATCH_STORE_PATH": str(db), "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"})
    log = tmp_path / f"{codec}.log"
    expected = 5 if block else 6
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while stored(db) < expected * 8 and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, log.read_text(), stored(db) // 8  # one sample per GPU, 8 GPUs a frame


@pytest.mark.parametrize("codec", ["zstd", "snappy"])
def test_a_foreign_compressed_frame_is_stored(kafka: Server, tmp_path: Path, codec: str) -> None:
    code, text, frames = run_processor(kafka, tmp_path, codec, None)
    assert frames == 6, text[-3000:]
    assert code == 0 and "stopped on SIGTERM" in text, text[-3000:]


def test_a_batch_of_a_missing_codec_is_passed_over_and_sigterm_stops_the_processor(
        kafka: Server, tmp_path: Path) -> None:
    code, text, frames = run_processor(kafka, tmp_path, "zstd", "zstandard")
    assert frames == 5, text[-3000:]
    lines = [line for line in text.splitlines() if "passed over" in line]
    assert len(lines) == 1, text[-3000:]
    assert "partition 0: passed over offsets 0 to 0" in lines[0]
    assert "zstd compression codec not found" in lines[0]
    assert "bus unavailable" not in text, text[-3000:]
    assert code == 0 and "stopped on SIGTERM" in text, text[-3000:]

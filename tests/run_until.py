"""Run a processor over a real consumer in a thread until it has taken a number of frames,
then stop it as the service does: the set-up the store and pipeline tests share."""

from __future__ import annotations

import threading
import time

from fleetwatch.pipeline.bus.kafka import KafkaConsumer
from fleetwatch.pipeline.processor import Processor


def process_frames(processor: Processor, bootstrap: str, topic: str, group: str, frames: int,
                   timeout_s: float = 90.0) -> None:
    """Consume ``topic`` as ``group`` until ``frames`` frames were processed (the processor's
    own count), failing with the count reached if not within ``timeout_s`` or if the
    processor stops; the processor is stopped and the consumer closed in any case."""
    consumer = KafkaConsumer(bootstrap, topic, group, session_timeout_ms=6000,
                             heartbeat_interval_ms=2000)
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop, 100, 3600.0))
    worker.start()
    try:
        deadline = time.monotonic() + timeout_s
        while processor.stats.frames < frames:
            assert time.monotonic() < deadline, f"{processor.stats.frames} of {frames} frames"
            assert worker.is_alive(), "the processor stopped"
            time.sleep(0.1)
    finally:
        stop.set()
        worker.join(30)
        consumer.close()

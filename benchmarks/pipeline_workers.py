"""The workers part of ``benchmarks/pipeline.py``: ``fleetwatch process --workers N``
timed by its consumer group's committed offsets (it runs as child processes, so
it cannot be timed from inside as the one-process processor is).
"""

from __future__ import annotations

import threading
import time

import kafka

from fleetwatch.config import load
from fleetwatch.process_service import run_processor as run_fleetwatch_process


def run_workers(bootstrap: str, topic: str, url: str, n_frames: int, group: str,
                workers: int, partitions: int) -> tuple[float, float, int]:
    """``fleetwatch process`` with ``workers`` child processes, timed by the group's commits.

    Returns two frames/s figures: from the moment the group is stable with every
    worker in it to the last commit (start-up and group join are not throughput;
    everything after is, as for the one process's figure from its first message),
    and a steady-state one from the moment every partition has a commit (every
    worker has stored a batch), counting only the frames committed after it; and
    how many frames were committed by that moment. The steady figure credits work
    done before that moment (each worker's next batch is already decoded), so it
    is the optimistic one.
    """
    config = load(None, {
        "FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": bootstrap,
        "FLEETWATCH_BUS_TOPIC": topic, "FLEETWATCH_BUS_GROUP": group,
        "FLEETWATCH_BUS_PARTITIONS": str(partitions),
        "FLEETWATCH_STORE_KIND": "victoriametrics", "FLEETWATCH_STORE_URL": url,
        "FLEETWATCH_PROCESSOR_WORKERS": str(workers),
        "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"})
    stop = threading.Event()
    thread = threading.Thread(target=run_fleetwatch_process, args=(config, stop), daemon=True)
    thread.start()
    watcher = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                  enable_auto_commit=False)
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    # Tansu reports authorized-operation bits kafka-python 3.0 does not know (it raises).
    admin._process_acl_operations = lambda obj: obj
    parts = [kafka.TopicPartition(topic, p) for p in watcher.partitions_for_topic(topic)]
    try:
        joined, first, end = _watch_group(watcher, admin, parts, group, workers, n_frames, thread)
    finally:
        stop.set()
        thread.join()
        watcher.close()
        admin.close()
    joined = joined or first  # never seen stable (it was brief): fall back to the steady figure
    return ((n_frames - joined[1]) / (end - joined[0]), (n_frames - first[1]) / (end - first[0]),
            first[1])


def _watch_group(watcher: kafka.KafkaConsumer, admin: kafka.KafkaAdminClient,
                 parts: list[kafka.TopicPartition], group: str, workers: int, n_frames: int,
                 thread: threading.Thread
                 ) -> tuple[tuple[float, int] | None, tuple[float, int], float]:
    joined: tuple[float, int] | None = None
    first: tuple[float, int] | None = None
    done = 0
    deadline = time.monotonic() + 300
    while done < n_frames:
        time.sleep(0.05)
        committed = [watcher.committed(tp) or 0 for tp in parts]
        done = sum(committed)
        if joined is None:
            desc = admin.describe_groups([group]).get(group) or {}
            if (desc.get("group_state") or desc.get("state")) == "Stable" and \
                    len(desc.get("members") or ()) == workers:
                joined = (time.perf_counter(), done)
        if first is None and all(committed):
            first = (time.perf_counter(), done)
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"workers stopped early or stalled ({done} of {n_frames} frames)")
    assert first is not None
    return joined, first, time.perf_counter()

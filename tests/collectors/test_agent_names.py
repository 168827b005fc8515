"""An agent whose node, cluster or rack name every processor would refuse stops at start
(exit 2) naming the key and the rule, by the decoder's own check: it does not run saying
"frames sent" while each of its frames is dead-lettered."""

from __future__ import annotations

import dataclasses

import pytest

from fleetwatch.cli import main
from fleetwatch.codec import Decoder, Encoder, check_names
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.frame_checks import FrameError

BAD = {"a\nb": "must hold printable characters only",
       "N" * 257: "must be 1..256 characters, got 257",
       "..": "must not be '.' or '..'", ".": "must not be '.' or '..'"}


@pytest.mark.parametrize("name", list(BAD))
def test_the_check_is_the_decoders(name: str) -> None:
    frame = Frame("c", "r", "ok", 1.7e9, (GpuReading(0, "GPU-1", "m", {}),))
    for field in ("cluster", "rack", "node"):
        if field != "node" and name in (".", ".."):
            check_names(**{"cluster": "c", "rack": "r", "node": "n", field: name})
            continue  # only a node is a page's address
        with pytest.raises(FrameError) as decoded:
            Decoder().decode(Encoder().encode(dataclasses.replace(frame, **{field: name})))
        with pytest.raises(FrameError) as checked:
            check_names(**{"cluster": "c", "rack": "r", "node": "n", field: name})
        assert (checked.value.field, checked.value.reason) == (
            decoded.value.field, decoded.value.reason) == (field, checked.value.reason)
        assert BAD[name] in checked.value.reason


@pytest.mark.parametrize("name", list(BAD))
def test_the_agent_refuses_a_name_at_start(name: str, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FLEETWATCH_AGENT_KERNEL_LOG", "")
    monkeypatch.setenv("FLEETWATCH_NODE_NODE", name)
    assert main(["agent", "--fake-gpus", "1", "--once", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetwatch: configuration error: node.node = ")
    assert BAD[name] in err and "every processor refuses" in err
    assert err.count("\n") == 1  # the name's newline is quoted, not printed


def test_the_agent_refuses_a_bad_cluster_and_runs_with_a_good_name(monkeypatch,
                                                                  capsys) -> None:
    monkeypatch.setenv("FLEETWATCH_AGENT_KERNEL_LOG", "")
    monkeypatch.setenv("FLEETWATCH_NODE_CLUSTER", "c\tx")
    assert main(["agent", "--fake-gpus", "1", "--once", "--json"]) == 2
    assert "node.cluster = 'c\\tx': must hold printable characters only" in (
        capsys.readouterr().err)
    monkeypatch.setenv("FLEETWATCH_NODE_CLUSTER", "c")
    monkeypatch.setenv("FLEETWATCH_NODE_NODE", "ノード/1 'x'")
    assert main(["agent", "--fake-gpus", "1", "--once", "--json"]) == 0
    assert '"node": "\\u30ce\\u30fc\\u30c9/1 \'x\'"' in capsys.readouterr().out


def test_the_running_agent_on_kafka_stops_before_it_connects(tmp_path, monkeypatch,
                                                            capsys) -> None:
    """``fleetwatch agent`` (no --once), Kafka bus: exit 2 at once, no spool made."""
    toml = tmp_path / "fleetwatch.toml"
    toml.write_text(f"""
[node]
node = ".."
[agent]
spool_dir = "{tmp_path / 'spool'}"
kernel_log = ""
metrics_port = 0
[bus]
kind = "kafka"
bootstrap = "127.0.0.1:1"
""")
    assert main(["-c", str(toml), "agent", "--fake-gpus", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetwatch: configuration error: node.node = '..': must not be")
    assert "FLEETWATCH_NODE_NODE" in err and not (tmp_path / "spool").exists()

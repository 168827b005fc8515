"""``fleetwatch``'s command line: every command's arguments, their types and ranges, and
the help text (the alert commands' in ``fleetwatch.cli_args_alerts``, the flags' value
types in ``fleetwatch.cli_types``). Parsing only: ``fleetwatch.cli`` runs what was asked."""

from __future__ import annotations

import argparse
import os

from fleetwatch import version_text
from fleetwatch.cli_args_alerts import add_alert_commands
from fleetwatch.cli_types import bounded, duration, duration_within, fault, positive_int

# The simulated parts (collectors/sim/hardware.PARTS, which --help does not import; a test
# checks that the two agree, and with the config's sim.part).
PART_NAMES = ("a100", "h100")
PART_HELP = "the simulated GPU: a100 (A100-SXM4-80GB, 500 W) or h100 (H100 80GB HBM3, 700 W)"
# The simulator's fault kinds and spec (collectors/sim/faults.KINDS and SPEC_HELP; a test
# checks they agree) and its fleet limits (fleetwatch/simulate.MAX_NODES, MAX_GPUS).
FAULT_KINDS = ("cooling", "cooling_slow", "rack_cooling", "xid79", "ecc_dbe", "nvlink", "stuck",
               "straggler", "power_brake", "sensor", "node_silent", "pcie_replay", "job_hang")
FAULT_HELP = ("inject a fault (repeatable): KIND:NODE/GPU[@START][+DURATION][xSEVERITY][~MODE] "
              "(KIND:NODE for node faults, KIND:RACK for rack faults), e.g. "
              "cooling:node-001/3@2m+1h~drift, rack_cooling:rack-00@1h+2h, "
              "node_silent:node-002@3h30m+10m. KIND: " + ", ".join(FAULT_KINDS)
              + "; MODE: drift or sudden; START 1m and DURATION 1h by default")
MAX_NODES, MAX_GPUS = 1024, 8192


class _Version(argparse.Action):
    """``--version``: asks git for the commit only when it is given, not on every run."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"fleetwatch {version_text()}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetwatch",
        description="Real-time telemetry and failure observability for GPU datacenters.",
        epilog="Configuration: --config FILE (TOML) and FLEETWATCH_<SECTION>_<KEY> environment "
               "variables, e.g. FLEETWATCH_BUS_KIND=kafka. `fleetwatch config` shows the result.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=_Version, nargs=0,
                   help="show the version (and the commit of a git checkout) and exit")
    p.add_argument("-c", "--config", metavar="FILE", default=os.environ.get("FLEETWATCH_CONFIG"),
                   help="TOML config file (default: $FLEETWATCH_CONFIG, else built-in defaults)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def fleet_args(sp: argparse.ArgumentParser) -> None:
        g = sp.add_argument_group("simulated fleet")
        g.add_argument("--nodes", type=positive_int,
                       help=f"nodes, 1 to {MAX_NODES:,} (default 4)")
        g.add_argument("--gpus", type=positive_int,
                       help=f"GPUs per node, 1 to 64; at most {MAX_GPUS:,} GPUs in all (default 8)")
        g.add_argument("--seed", type=int,
                       help="random seed, 0 to 2^63-1; same seed, same fleet (default 0)")
        g.add_argument("--part", choices=PART_NAMES, help=PART_HELP + " (default: sim.part, a100)")
        g.add_argument("--cluster", help="the cluster the simulated fleet reports as "
                       "(default: sim.cluster, sim)")
        g.add_argument("--inlet-c", type=float, metavar="C",
                       help="the room's mean inlet air in °C, 5 to 45 (default: sim.inlet_c, "
                       "22); sim.warm_spell_c and sim.warm_spell_h ramp it")
        g.add_argument("--fault", type=fault, action="append", metavar="SPEC", default=None,
                       help=FAULT_HELP)
        g.add_argument("--no-faults", action="store_true", help="inject no fault")
        sp.add_argument("--store", metavar="PATH", help="embedded store file (default for a "
                        "simulated fleet: fleetwatch-sim.db, never the real store)")

    up = sub.add_parser("up", help="run everything on this machine: agent, bus, processor, "
                        "store, dashboard", description="Run the whole system in one process: "
                        "real NVML if an NVIDIA GPU is present, else a simulated fleet with an "
                        "injected cooling fault; in-process bus; embedded store; dashboard.")
    fleet_args(up)
    up.add_argument("--simulate", action=argparse.BooleanOptionalAction, default=None,
                    help="force the simulated fleet (or real NVML with --no-simulate)")
    up.add_argument("--interval", type=duration, metavar="DUR",
                    help="sample interval, 1s to 1h (default 5s)")
    up.add_argument("--speed", type=float,
                    help="how much faster than real time the simulation catches up, 1 to "
                    "100000 (default 30)")
    up.add_argument("--backfill", type=duration, metavar="DUR",
                    help="how far in the past the simulation starts, 0 to 7d, with its unit "
                    "(default 15m)")
    up.add_argument("--host", help="dashboard address (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="dashboard port (default 8050)")
    up.add_argument("--phases", action="store_true",
                    help="simulated jobs move through compute, communication, input, "
                    "checkpoint and evaluation phases (default: compute-bound throughout, so "
                    "the injected fault shows at once)")
    up.add_argument("--keep", action="store_true",
                    help="continue the simulated store from its newest sample (without it, "
                    "the store must be new: fleetwatch never deletes one)")
    up.add_argument("--into-live-store", action="store_true",
                    help="with --keep: write the simulated fleet even into a store that "
                    "another cluster's samples reached in the last 15 minutes (processors "
                    "of a real fleet write it); refused without it")

    sim = sub.add_parser("simulate", help="write hours or days of a simulated fleet's history "
                         "into the store", description="Write a simulated fleet's history, with "
                         "injected faults and their ground truth, into the store, fast.")
    fleet_args(sim)
    span = sim.add_mutually_exclusive_group()
    span.add_argument("--days", type=float, help="days of history, up to 366 (default 1)")
    span.add_argument("--duration", type=duration, metavar="DUR",
                      help="history span with its unit, e.g. 6h")
    sim.add_argument("--interval", type=duration, metavar="DUR",
                     help="sample interval, 1s to 1h (default 15s)")
    sim.add_argument("--end", type=float, metavar="EPOCH_S",
                     help="when the history ends (default now)")

    agent = sub.add_parser("agent", help="run the node agent, or print one frame",
                           description="Read this node's GPUs (NVML) and host, publish a frame "
                           "every interval to Kafka, serve Prometheus /metrics.")
    agent.add_argument("--once", action="store_true", help="read one frame, print it, exit")
    agent.add_argument("--json", action="store_true", help="with --once: print the frame as JSON")
    agent.add_argument("--fake-gpus", type=positive_int, metavar="N",
                       help="use N fake GPUs instead of NVML (the test fake)")
    agent.add_argument("--fake-faults", metavar="FILE",
                       help="with --fake-gpus: faults of the fake GPUs from a JSON file, read "
                       "again every tick, e.g. {\"temp\": {\"3\": 95}, \"xid\": [[4, 79]], "
                       "\"lost\": [2]}: GPU 3 at 95 °C, an XID 79 on GPU 4 (once each time "
                       "the file is written), GPU 2 fallen off the bus; {} heals them; "
                       "\"counters\" and \"per_min\" set or climb error counters (README)")
    agent.add_argument("--interval", type=duration, metavar="DUR",
                       help="sample interval with its unit, e.g. 5s (default agent.interval_s)")

    process = sub.add_parser("process", help="run a stream processor (one member of a consumer "
                             "group)", description="Consume frames from Kafka, write them to the "
                             "store, run the detectors and the alert lifecycle; commit offsets "
                             "after each stored batch.")
    process.add_argument("--workers", type=positive_int, metavar="N",
                         help="run N group members as child processes, about one core each "
                         "(default processor.workers, 1)")

    dash = sub.add_parser("dashboard", help="serve the dashboard over the store",
                          description="Serve the dashboard over the configured store (read only).")
    dash.add_argument("--host", help="address (default 127.0.0.1)")
    dash.add_argument("--port", type=int, help="port (default 8050)")
    dash.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")

    train = sub.add_parser("train", help="fit the learned detectors on the store's history",
                           description="Fit thermal health, the fleet anomaly model and lemon-"
                           "node scores on the store's history; write a versioned model file "
                           "to models.dir, which running processors load without a restart.")
    tspan = train.add_mutually_exclusive_group()
    tspan.add_argument("--days", type=float, help="days of history to train on (default 7)")
    tspan.add_argument("--duration", type=duration, metavar="DUR",
                       help="history span with its unit, e.g. 36h")
    train.add_argument("--end", type=float, metavar="EPOCH_S",
                       help="when the history ends (default now)")
    train.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    train.add_argument("--out", metavar="DIR", help="model directory (default models.dir)")

    report = sub.add_parser("report", help="write the monthly energy and carbon report",
                            description="Write the month's energy, carbon and cost, per job, "
                            "user, team, node and cluster: an HTML report, a CSV and a JSON "
                            "summary, from the energy ledger in the configured store.")
    report.add_argument("--month", required=True, metavar="YYYY-MM",
                        help="e.g. 2026-11; or previous (what a monthly timer runs on the 1st) "
                        "or current (month to date); months of --tz")
    report.add_argument("--out", default=".", metavar="DIR",
                        help="where the files go (default: here)")
    report.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    report.add_argument("--cluster", help="only this cluster's energy, in files named after "
                        "it (default, or empty: every cluster)")
    report.add_argument("--tz", metavar="NAME", help="IANA time zone whose calendar month "
                        "it is, e.g. Europe/Berlin (default: energy.timezone, UTC unless set)")

    bk = sub.add_parser("backup", help="copy the embedded store, whole, while it runs",
                        description="Copy the SQLite store to DEST through SQLite's online "
                        "backup API: the store as it is when the copy starts, every committed "
                        "write included (cp of a live store misses what its -wal holds); "
                        "safe while up or process writes it. DEST must not exist.")
    bk.add_argument("dest", metavar="DEST", help="the copy's path (a new file)")
    bk.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    bk.add_argument("--compact", action="store_true",
                    help="leave out the free pages retention left in the file (VACUUM INTO): "
                    "a smaller copy, e.g. on another disk, to put back with the writers "
                    "stopped; no progress is shown")

    sub.add_parser("config", help="print the effective configuration (secrets masked)",
                   description="Print the effective configuration: built-in defaults, then "
                   "the TOML file (--config or $FLEETWATCH_CONFIG), then "
                   "FLEETWATCH_<SECTION>_<KEY> variables; secrets masked.")

    rp = sub.add_parser("replay", help="run recorded telemetry through the detectors and print "
                        "each alert transition as a JSON line", description="Replay recorded "
                        "telemetry (long CSV timestamp,node,gpu,metric,value, AcmeTrace's "
                        "one-CSV-per-metric layout, one series timestamp,value with "
                        "--metric, or the agent's frames as JSON lines) through the processor, "
                        "detectors and alert lifecycle; alert "
                        "transitions go to stdout as JSON lines, a summary of what the data "
                        "held and what the detectors lacked to stderr. Exit status 0, or 1 "
                        "when no frame was replayed or a row is bad (file, line and column "
                        "named); the global --config sets the detectors.")
    rp.add_argument("files", nargs="+", metavar="FILE",
                    help="CSV or JSON-lines files, gzip-compressed or not (told by their first "
                         "bytes), or - for standard input; the layout is told by the first line")
    rp.add_argument("--speed", type=bounded(1e-6, 1e9), metavar="X",
                    help="replay at X times real time (default: as fast as possible)")
    rp.add_argument("--skip-bad", action="store_true",
                    help="skip bad rows and count them, instead of stopping at the first; "
                         "and exit 0 although rows out of time order were passed over "
                         "(without it: exit 1, after the replay)")
    rp.add_argument("--cluster", default="replay", help="cluster label (default replay)")
    rp.add_argument("--rack", default="unknown", help="rack label where the file has none")
    rp.add_argument("--store", metavar="PATH",
                    help="also keep the alerts in this embedded store (default: keep nothing)")
    rp.add_argument("--gpu-model", metavar="NAME", default="",
                    help="the GPUs' product name as nvidia-smi prints it, e.g. 'NVIDIA H100 "
                    "80GB HBM3', where the data has no model column: its slowdown and shutdown "
                    "temperatures stand in where the data has no NVML thresholds (default: "
                    "detectors.fallback_slowdown_c and fallback_shutdown_c, said in the summary)")
    rp.add_argument("--models", action="store_true",
                    help="also run the learned detectors (thermal health, fleet anomaly, lemon "
                    "nodes) with the newest model file in models.dir, as process does")
    one = rp.add_argument_group("one-series files (timestamp,value)")
    one.add_argument("--metric", metavar="NAME",
                     help="what the value column measures, in that metric's unit: a catalogue "
                     "name (e.g. gpu_temp_c, °C) or a DCGM field name (e.g. "
                     "DCGM_FI_DEV_GPU_TEMP); required where the header says only 'value'")
    one.add_argument("--node", metavar="NODE",
                     help="the node the series is from (default: the file's name)")
    one.add_argument("--gpu", type=bounded(0, 1023, integer=True), default=0, metavar="N",
                     help="the GPU index, for a GPU metric (default 0)")

    ev = sub.add_parser("evaluate", help="score every detector against a labelled simulated "
                        "fleet", description="Simulate a fleet with a labelled schedule of every "
                        "fault kind, and the same fleet with no fault; score each detector set "
                        "per fault kind (recall, precision, delay) and count false alarms per "
                        "1,000 GPU-days. Progress on stderr; with --json the last line of stdout "
                        "is the result.")
    ev.add_argument("--gpus", type=bounded(8, 200_000, integer=True), default=1000,
                    help="GPUs in the fleet, 8 to 200000 (default 1000)")
    ev.add_argument("--hours", type=bounded(1, 24 * 31), default=24.0,
                    help="simulated hours, 1 to 744 (default 24)")
    ev.add_argument("--per-kind", type=bounded(1, 1000, integer=True), default=10,
                    help="faults of each kind (default 10)")
    ev.add_argument("--kinds", help="comma-separated fault kinds (default: all the simulator has)")
    ev.add_argument("--interval", type=duration_within(1, 300), default=15.0, metavar="DUR",
                    help="time between a node's samples, 1s to 300s (default 15s; the agent's "
                         "own default is 5s: a shorter interval takes longer to run)")
    ev.add_argument("--seed", type=bounded(0, 2**63 - 1, integer=True), default=0,
                    help="random seed, 0 to 2^63-1: the same seed, the same fleet, faults and "
                         "scores (default 0)")
    ev.add_argument("--part", choices=PART_NAMES, default="a100",
                    help=PART_HELP + " (default a100)")
    ev.add_argument("--inlet-c", type=bounded(5, 45), default=22.0, metavar="C",
                    help="the room's inlet air of the faulty and the healthy run, 5 to 45 °C "
                         "(default 22)")
    ev.add_argument("--hot-inlet-c", type=bounded(5, 45), default=32.0, metavar="C",
                    help="a third run, the healthy fleet in a room this warm: its false alarms "
                         "and how many are notified (default 32 °C, the top of ASHRAE class "
                         "A1's allowable range)")
    ev.add_argument("--no-hot-room", action="store_true",
                    help="skip the hot-room run (a third of the time on two workers)")
    ev.add_argument("--models", action=argparse.BooleanOptionalAction, default=False,
                    help="add a column with the learned models on top of the rules")
    ev.add_argument("--json", action="store_true", help="print the result as one JSON line")
    ev.add_argument("--workers", type=bounded(1, 2, integer=True), default=2,
                    help="run the faulty and the healthy fleet side by side (2, default) or "
                         "one after the other (1)")

    add_alert_commands(sub)
    return p

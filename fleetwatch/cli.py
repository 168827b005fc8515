"""``fleetwatch``: one command per job; each parses, loads config, calls the library.

    fleetwatch up                      everything on this machine, dashboard on localhost
    fleetwatch simulate --days 7       write a simulated fleet's history into the store
    fleetwatch agent --once --json     print one frame of this node and exit
    fleetwatch agent                   run the node agent (Kafka, /metrics)
    fleetwatch process                 run a stream processor (Kafka consumer group)
    fleetwatch dashboard               serve the dashboard over the store
    fleetwatch config                  print the effective configuration
    fleetwatch replay FILE...          recorded telemetry through the detectors, alerts as JSON
    fleetwatch evaluate --json         score the detectors on a labelled simulated fleet
    fleetwatch silence add node=n7 --for 2h   mute matching alerts' notifications
    fleetwatch ack ALERT_ID --by NAME  acknowledge an open alert
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import ipaddress
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

from fleetwatch import __version__
from fleetwatch.cli_history import (  # the exit codes are defined there, once
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    cmd_ack,
    cmd_evaluate,
    cmd_replay,
    cmd_report,
    cmd_silence,
    cmd_train,
)
from fleetwatch.config import Config, ConfigError, load, options, override

log = logging.getLogger("fleetwatch")


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; write e.g. 90s, 15m, 2h or 7d") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def _bounded(lo: float, hi: float, integer: bool = False):  # -> an argparse type
    """A number within [lo, hi] (finite), or a usage error that says the range."""
    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if integer else 'a number'}") from None
        if not lo <= value <= hi:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"{text!r} must be between {lo:g} and {hi:g}")
        return value
    return parse


def _fault(text: str):  # -> Fault, imported lazily to keep --help fast
    from fleetwatch.collectors.sim import parse_fault

    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetwatch",
        description="Real-time telemetry and failure observability for GPU datacenters.",
        epilog="Configuration: --config FILE (TOML) and FLEETWATCH_<SECTION>_<KEY> environment "
               "variables, e.g. FLEETWATCH_BUS_KIND=kafka. `fleetwatch config` shows the result.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"fleetwatch {__version__}")
    p.add_argument("-c", "--config", metavar="FILE", default=os.environ.get("FLEETWATCH_CONFIG"),
                   help="TOML config file (default: $FLEETWATCH_CONFIG, else built-in defaults)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def fleet_args(sp: argparse.ArgumentParser) -> None:
        g = sp.add_argument_group("simulated fleet")
        g.add_argument("--nodes", type=_positive_int, help="nodes (default 4)")
        g.add_argument("--gpus", type=_positive_int, help="GPUs per node (default 8)")
        g.add_argument("--seed", type=int, help="random seed; same seed, same fleet (default 0)")
        g.add_argument("--fault", type=_fault, action="append", metavar="SPEC", default=None,
                       help="inject a fault: KIND:NODE/GPU[@START][+DURATION][xSEVERITY], e.g. "
                            "cooling:node-001/3@2m+2h (repeatable)")
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
    up.add_argument("--interval", type=_duration, metavar="DUR",
                    help="sample interval, 1s to 1h (default 5s)")
    up.add_argument("--speed", type=float,
                    help="how much faster than real time the simulation catches up, 1 to "
                    "100000 (default 30)")
    up.add_argument("--backfill", type=_duration, metavar="DUR",
                    help="how far in the past the simulation starts, 0 to 7d (default 15m)")
    up.add_argument("--host", help="dashboard address (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="dashboard port (default 8050)")
    up.add_argument("--phases", action="store_true",
                    help="simulated jobs move through compute, communication, input, "
                    "checkpoint and evaluation phases (default: compute-bound throughout, so "
                    "the injected fault shows at once)")
    up.add_argument("--keep", action="store_true",
                    help="continue the simulated store from its newest sample (without it, "
                    "the store must be new: fleetwatch never deletes one)")

    sim = sub.add_parser("simulate", help="write hours or days of a simulated fleet's history "
                         "into the store", description="Write a simulated fleet's history, with "
                         "injected faults and their ground truth, into the store, fast.")
    fleet_args(sim)
    span = sim.add_mutually_exclusive_group()
    span.add_argument("--days", type=float, help="days of history, up to 366 (default 1)")
    span.add_argument("--duration", type=_duration, metavar="DUR", help="history span, e.g. 6h")
    sim.add_argument("--interval", type=_duration, metavar="DUR",
                     help="sample interval, 1s to 1h (default 15s)")
    sim.add_argument("--end", type=float, metavar="EPOCH_S",
                     help="when the history ends (default now)")

    agent = sub.add_parser("agent", help="run the node agent, or print one frame",
                           description="Read this node's GPUs (NVML) and host, publish a frame "
                           "every interval to Kafka, serve Prometheus /metrics.")
    agent.add_argument("--once", action="store_true", help="read one frame, print it, exit")
    agent.add_argument("--json", action="store_true", help="with --once: print the frame as JSON")
    agent.add_argument("--fake-gpus", type=_positive_int, metavar="N",
                       help="use N fake GPUs instead of NVML (the test fake)")
    agent.add_argument("--interval", type=_duration, metavar="DUR",
                       help="sample interval (default agent.interval_s)")

    process = sub.add_parser("process", help="run a stream processor (one member of a consumer "
                             "group)", description="Consume frames from Kafka, write them to the "
                             "store, run the detectors and the alert lifecycle; commit offsets "
                             "after each stored batch.")
    process.add_argument("--workers", type=_positive_int, metavar="N",
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
    tspan.add_argument("--duration", type=_duration, metavar="DUR", help="history span, e.g. 36h")
    train.add_argument("--end", type=float, metavar="EPOCH_S",
                       help="when the history ends (default now)")
    train.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    train.add_argument("--out", metavar="DIR", help="model directory (default models.dir)")

    report = sub.add_parser("report", help="write the monthly energy and carbon report",
                            description="Write the month's energy, carbon and cost, per job, "
                            "user, team, node and cluster: an HTML report, a CSV and a JSON "
                            "summary, from the energy ledger in the configured store.")
    report.add_argument("--month", required=True, metavar="YYYY-MM", help="e.g. 2026-11")
    report.add_argument("--out", default=".", metavar="DIR",
                        help="where the files go (default: here)")
    report.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")

    sub.add_parser("config", help="print the effective configuration (secrets masked)")

    rp = sub.add_parser("replay", help="run recorded telemetry through the detectors and print "
                        "each alert transition as a JSON line", description="Replay recorded "
                        "telemetry (long CSV timestamp,node,gpu,metric,value, or AcmeTrace's "
                        "one-CSV-per-metric layout) through the processor, detectors and alert "
                        "lifecycle; alert transitions go to stdout as JSON lines, a summary of "
                        "what the data held and what the detectors lacked to stderr.")
    rp.add_argument("files", nargs="+", metavar="FILE", help="CSV files (layout told by header)")
    rp.add_argument("--speed", type=_bounded(1e-6, 1e9), metavar="X",
                    help="replay at X times real time (default: as fast as possible)")
    rp.add_argument("--skip-bad", action="store_true",
                    help="skip bad rows and count them, instead of stopping at the first")
    rp.add_argument("--cluster", default="replay", help="cluster label (default replay)")
    rp.add_argument("--rack", default="unknown", help="rack label where the file has none")
    rp.add_argument("--store", metavar="PATH",
                    help="also keep the alerts in this embedded store (default: keep nothing)")

    ev = sub.add_parser("evaluate", help="score every detector against a labelled simulated "
                        "fleet", description="Simulate a fleet with a labelled schedule of every "
                        "fault kind, and the same fleet with no fault; score each detector set "
                        "per fault kind (recall, precision, delay) and count false alarms per "
                        "1,000 GPU-days. Progress on stderr; with --json the last line of stdout "
                        "is the result.")
    ev.add_argument("--gpus", type=_bounded(8, 200_000, integer=True), default=1000,
                    help="GPUs in the fleet (default 1000)")
    ev.add_argument("--hours", type=_bounded(0.25, 24 * 31), default=24.0,
                    help="simulated hours (default 24)")
    ev.add_argument("--per-kind", type=_bounded(1, 1000, integer=True), default=10,
                    help="faults of each kind (default 10)")
    ev.add_argument("--kinds", help="comma-separated fault kinds (default: all the simulator has)")
    ev.add_argument("--seed", type=_bounded(0, 2**63 - 1, integer=True), default=0)
    ev.add_argument("--models", action=argparse.BooleanOptionalAction, default=False,
                    help="add a column with the learned models on top of the rules")
    ev.add_argument("--json", action="store_true", help="print the result as one JSON line")
    ev.add_argument("--workers", type=_bounded(1, 2, integer=True), default=2,
                    help="run the faulty and the healthy fleet side by side (2, default) or "
                         "one after the other (1)")

    si = sub.add_parser("silence", help="add, list or expire silences of alert notifications",
                        description="Silences mute the notifications (Alertmanager, webhook) of "
                        "the alerts they match, for a time; the alerts themselves are still "
                        "raised and stored. Kept in the store; processors read them every 30 s.")
    si.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    si_sub = si.add_subparsers(dest="action", required=True, metavar="ACTION")
    si_add = si_sub.add_parser("add", help="add a silence; prints its id")
    si_add.add_argument("matchers", nargs="+", metavar="MATCHER",
                        help="LABEL=VALUE, LABEL!=VALUE, LABEL=~REGEX or LABEL!~REGEX; labels: "
                             "rule, severity, cluster, rack, node, device, scope")
    si_add.add_argument("--for", dest="duration", type=_duration, default=3600.0, metavar="DUR",
                        help="how long (default 1h)")
    si_add.add_argument("--by", default=os.environ.get("USER", ""), help="who (default $USER)")
    si_add.add_argument("--comment", default="", help="why")
    si_list = si_sub.add_parser("list", help="silences in force now (--all: every one)")
    si_list.add_argument("--all", action="store_true")
    si_exp = si_sub.add_parser("expire", help="end a silence now")
    si_exp.add_argument("id")

    ack = sub.add_parser("ack", help="acknowledge an open alert: no repeat notifications until "
                         "it resolves")
    ack.add_argument("alert_id", metavar="ALERT_ID")
    ack.add_argument("--by", default=os.environ.get("USER", ""), help="who (default $USER)")
    ack.add_argument("--comment", default="")
    ack.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    return p


def _override(config: Config, section: str, **values: object) -> Config:
    """Command-line flags over the config, range-checked as the file's values are."""
    return override(config, section, **values)


def _check_bind(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ConfigError(f"dashboard host {host!r} is not a loopback address, and the dashboard "
                          "has no authentication: keep 127.0.0.1 and reach it through an SSH "
                          "tunnel or an authenticating reverse proxy")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load(args.config)
        if getattr(args, "store", None):
            config = _override(config, "store", path=args.store)
        return _COMMANDS[args.command](config, args)
    except ConfigError as exc:
        print(f"fleetwatch: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            print(f"fleetwatch: an address is already in use ({exc}): is another fleetwatch or "
                  "dcgm-exporter running? Choose another port (--port, or the *_port settings)",
                  file=sys.stderr)
            return EXIT_ERROR
        raise
    except KeyboardInterrupt:
        print("\nfleetwatch: stopped", file=sys.stderr)
        return EXIT_OK


def _sim_config(config: Config, args: argparse.Namespace) -> Config:
    return _override(config, "sim", nodes=args.nodes, gpus=args.gpus, seed=args.seed)


def _faults(config: Config, args: argparse.Namespace, default_start_s: float,
            default_duration_s: float) -> list:
    from fleetwatch.collectors.sim import Fault

    if args.no_faults:
        return []
    if args.fault:
        return list(args.fault)
    node = f"node-{min(1, config.sim.nodes - 1):03d}"
    return [Fault("cooling", node, min(3, config.sim.gpus - 1), default_start_s,
                  default_duration_s)]


_UP_FLAGS = {"interval_s": "--interval", "backfill_s": "--backfill"}


def cmd_up(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.up import run_up

    config = _override(_sim_config(config, args), "dashboard", host=args.host, port=args.port)
    _check_bind(config.dashboard.host)
    return run_up(config, _up_options(config, args))


def _up_options(config: Config, args: argparse.Namespace):  # -> UpOptions
    from fleetwatch.up import UpOptions

    checked = options(UpOptions, "up", _UP_FLAGS, interval_s=args.interval, speed=args.speed,
                      backfill_s=args.backfill)
    faults = _faults(config, args, default_start_s=120.0, default_duration_s=6 * 3600.0)
    return dataclasses.replace(checked, simulate=args.simulate, faults=tuple(faults),
                               keep=args.keep, store=args.store, steady_load=not args.phases)


def open_dashboard_store(config: Config):
    from fleetwatch.wiring import open_store

    return open_store(config.store, read_only=config.store.kind == "sqlite")


_SIMULATE_FLAGS = {"duration_s": "--duration", "interval_s": "--interval", "end_ts": "--end"}


def cmd_simulate(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.simulate import SimulateOptions, run_simulate

    config = _sim_config(config, args)
    checked = options(SimulateOptions, "simulate", _SIMULATE_FLAGS, days=args.days,
                      duration_s=args.duration, interval_s=args.interval,
                      end_ts=args.end if args.end is not None else time.time())
    duration = args.duration if args.duration is not None else checked.days * 86400
    faults = _faults(config, args, default_start_s=duration / 2, default_duration_s=2 * 3600.0)
    return run_simulate(config, checked, duration, faults, store=args.store)


def cmd_agent(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.agent_service import read_once, run_agent
    from fleetwatch.collectors.nvml import NvmlUnavailable

    if args.interval is not None:
        config = _override(config, "agent", interval_s=args.interval)
    try:
        if not args.once:
            return run_agent(config, args.fake_gpus)
        frame = read_once(config, args.fake_gpus)
    except NvmlUnavailable as exc:  # agent.nvml_policy = "error"
        print(f"fleetwatch agent: FATAL: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(dataclasses.asdict(frame), indent=2, sort_keys=True))
    else:
        _print_frame(frame)
    return EXIT_OK


_SUMMARY = [("temp", "gpu_temp_c", "{:.0f}°C"), ("mem", "gpu_mem_temp_c", "{:.0f}°C"),
            ("power", "gpu_power_w", "{:.0f}W"), ("util", "gpu_util_pct", "{:.0f}%"),
            ("sm", "gpu_sm_clock_mhz", "{:.0f}MHz"),
            ("fb", "gpu_fb_used_bytes", lambda v: f"{v / 2**30:.1f}GiB")]


def _print_frame(frame) -> None:
    """A short human view of a frame; --json has every field."""
    from fleetwatch.catalogue import throttle_flags

    print(f"{frame.node} ({frame.cluster}/{frame.rack}) at "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(frame.ts))}: "
          f"{len(frame.gpus)} GPUs")
    for g in frame.gpus:
        m = g.metrics
        cells = []
        for label, name, fmt in _SUMMARY:
            if name in m:
                cells.append(f"{label} {fmt(m[name]) if callable(fmt) else fmt.format(m[name])}")
        flags = throttle_flags(m.get("gpu_throttle_reasons", 0))
        extra = [f"throttled: {','.join(flags)}"] if set(flags) - {"gpu_idle"} else []
        extra += [f"XID {','.join(map(str, g.xids))}"] if g.xids else []
        print(f"  GPU {g.index} {g.model} [{g.state}] job {g.job or '-'}: "
              + "  ".join(cells + extra) + f"  (+{len(m) - len(cells)} more)")
    host = frame.host.metrics
    print("  host: " + "  ".join(f"{k.removeprefix('host_')} {v:g}"
                                 for k, v in sorted(host.items())))
    for p in frame.host.ports:
        print(f"  {p.kind} {p.name}: " + "  ".join(
            f"{k.split('_', 1)[1]} {v:g}" for k, v in sorted(p.metrics.items())))
    print("  (all metrics: fleetwatch agent --once --json)")


def cmd_process(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.process_service import run_processor

    return run_processor(_override(config, "processor", workers=args.workers))


def cmd_dashboard(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.dashboards import serve

    config = _override(config, "dashboard", host=args.host, port=args.port)
    _check_bind(config.dashboard.host)
    from fleetwatch.carbon import model_from_config

    serve(open_dashboard_store(config), config.dashboard.host, config.dashboard.port,
          config.dashboard.refresh_s, temp_limit_c=config.alerts.gpu_temp_limit_c,
          carbon=model_from_config(config.carbon, config.energy))
    return EXIT_OK


def cmd_config(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.config import public_view

    for section, values in public_view(config).items():
        print(f"[{section}]")
        for key, value in values.items():
            print(f"{key} = {json.dumps(value)}")
        print()
    return EXIT_OK


_COMMANDS = {"up": cmd_up, "simulate": cmd_simulate, "agent": cmd_agent, "process": cmd_process,
             "dashboard": cmd_dashboard, "config": cmd_config, "replay": cmd_replay,
             "evaluate": cmd_evaluate, "silence": cmd_silence, "ack": cmd_ack,
             "train": cmd_train, "report": cmd_report}

if __name__ == "__main__":
    raise SystemExit(main())

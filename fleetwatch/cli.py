"""``fleetwatch``: one command per job; each parses, loads config, calls the library.

    fleetwatch up                      everything on this machine, dashboard on localhost
    fleetwatch simulate --days 7       write a simulated fleet's history into the store
    fleetwatch agent --once --json     print one frame of this node and exit
    fleetwatch agent                   run the node agent (Kafka, /metrics)
    fleetwatch process                 run a stream processor (Kafka consumer group)
    fleetwatch dashboard               serve the dashboard over the store
    fleetwatch config                  print the effective configuration
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
from fleetwatch.config import Config, ConfigError, load, override

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
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
        sp.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")

    up = sub.add_parser("up", help="run everything on this machine: agent, bus, processor, "
                        "store, dashboard", description="Run the whole system in one process: "
                        "real NVML if an NVIDIA GPU is present, else a simulated fleet with an "
                        "injected cooling fault; in-process bus; embedded store; dashboard.")
    fleet_args(up)
    up.add_argument("--simulate", action=argparse.BooleanOptionalAction, default=None,
                    help="force the simulated fleet (or real NVML with --no-simulate)")
    up.add_argument("--interval", type=_duration, default=5.0, metavar="DUR",
                    help="sample interval (default 5s)")
    up.add_argument("--speed", type=float, default=30.0,
                    help="how much faster than real time the simulation catches up (default 30)")
    up.add_argument("--backfill", type=_duration, default=15 * 60.0, metavar="DUR",
                    help="how far in the past the simulation starts (default 15m)")
    up.add_argument("--host", help="dashboard address (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="dashboard port (default 8050)")
    up.add_argument("--keep", action="store_true",
                    help="keep the store's earlier data instead of starting the simulation fresh")

    sim = sub.add_parser("simulate", help="write hours or days of a simulated fleet's history "
                         "into the store", description="Write a simulated fleet's history, with "
                         "injected faults and their ground truth, into the store, fast.")
    fleet_args(sim)
    span = sim.add_mutually_exclusive_group()
    span.add_argument("--days", type=float, help="days of history (default 1)")
    span.add_argument("--duration", type=_duration, metavar="DUR", help="history span, e.g. 6h")
    sim.add_argument("--interval", type=_duration, default=15.0, metavar="DUR",
                     help="sample interval (default 15s)")
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

    sub.add_parser("config", help="print the effective configuration (secrets masked)")
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


def cmd_up(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.up import UpOptions, build

    config = _override(_sim_config(config, args), "dashboard", host=args.host, port=args.port)
    _check_bind(config.dashboard.host)
    faults = _faults(config, args, default_start_s=120.0, default_duration_s=6 * 3600.0)
    options = UpOptions(simulate=args.simulate, interval_s=args.interval, speed=args.speed,
                        backfill_s=args.backfill, faults=faults, fresh=not args.keep)
    system, what = build(config, options)
    config = system.config  # a simulated fleet gets a store file of its own
    url = f"http://{config.dashboard.host}:{config.dashboard.port}"
    print(f"fleetwatch up: {what}", file=sys.stderr)
    for f in faults:
        onset = time.localtime(time.time() - args.backfill + f.start_s)
        print(f"  injected fault: {f.kind} on {f.node} GPU {f.gpu}, from "
              f"{time.strftime('%H:%M:%S', onset)} for {f.duration_s / 3600:g} h",
              file=sys.stderr)
    print(f"  bus: in-process   store: {os.path.abspath(config.store.path)} (SQLite)",
          file=sys.stderr)
    print(f"  dashboard: {url}   (Ctrl-C to stop)", file=sys.stderr)
    system.start()
    system.report_every(30.0)
    try:
        from fleetwatch.dashboards import serve

        serve(open_dashboard_store(config), config.dashboard.host, config.dashboard.port,
              config.dashboard.refresh_s)
    finally:
        system.stop()
    return EXIT_OK


def open_dashboard_store(config: Config):
    from fleetwatch.wiring import open_store

    return open_store(config.store, read_only=config.store.kind == "sqlite")


def cmd_simulate(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.collectors.sim import SimParams
    from fleetwatch.simulate import simulate
    from fleetwatch.wiring import detectors, open_store

    config = _sim_config(config, args)
    duration = args.duration or (args.days if args.days is not None else 1.0) * 86400
    end = args.end if args.end is not None else time.time()
    s = config.sim
    params = SimParams(nodes=s.nodes, gpus=s.gpus, nodes_per_rack=s.nodes_per_rack, seed=s.seed,
                       interval_s=args.interval, job_mean_s=s.job_mean_s,
                       idle_mean_s=s.idle_mean_s)
    faults = _faults(config, args, default_start_s=duration / 2, default_duration_s=2 * 3600.0)
    store = open_store(config.store)
    print(f"simulating {duration / 86400:g} days of {s.nodes} nodes x {s.gpus} GPUs every "
          f"{args.interval:g} s into {config.store.path}", file=sys.stderr)
    last = [0.0]

    def progress(done: float, points: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done >= 1.0:
            last[0] = now
            print(f"\r  {done:6.1%}  {points:>14,} samples", end="", file=sys.stderr, flush=True)

    result = simulate(store, params, end - duration, duration, faults,
                      detectors(config.detectors), progress)
    store.close()
    print(f"\nwrote {result.points:,} samples ({result.frames:,} frames) in {result.seconds:.1f} s"
          f" ({result.points_per_s:,.0f} samples/s); {result.alerts_changed} alert changes",
          file=sys.stderr)
    for r in result.ground_truth:
        print(f"  ground truth: {r.kind} on {r.node} GPU {r.gpu} from "
              f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.onset_ts))} to "
              f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.end_ts))}", file=sys.stderr)
    return EXIT_OK


def cmd_agent(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.collectors.nvml import NvmlUnavailable
    from fleetwatch.collectors.run import read_once, run_agent

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
    from fleetwatch.pipeline.run import run_processor

    return run_processor(_override(config, "processor", workers=args.workers))


def cmd_dashboard(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.dashboards import serve

    config = _override(config, "dashboard", host=args.host, port=args.port)
    _check_bind(config.dashboard.host)
    serve(open_dashboard_store(config), config.dashboard.host, config.dashboard.port,
          config.dashboard.refresh_s)
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
             "dashboard": cmd_dashboard, "config": cmd_config}

if __name__ == "__main__":
    raise SystemExit(main())

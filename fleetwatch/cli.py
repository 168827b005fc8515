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

from fleetwatch.cli_args import parser
from fleetwatch.cli_history import (  # the exit codes are defined there, once
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    cmd_ack,
    cmd_alerts,
    cmd_evaluate,
    cmd_replay,
    cmd_report,
    cmd_silence,
    cmd_train,
)
from fleetwatch.config import Config, ConfigError, load, options, override

log = logging.getLogger("fleetwatch")


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
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load(args.config)
        if getattr(args, "store", None):
            config = _override(config, "store", path=args.store)
        code = _COMMANDS[args.command](config, args)
        sys.stdout.flush()  # here, where a closed pipe is caught below, not at exit
        return code
    except ConfigError as exc:
        print(f"fleetwatch: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`fleetwatch config | head`): stop without a traceback, and
        # keep Python's flush at exit from raising it again (the recipe of Python's docs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
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
    return _override(config, "sim", nodes=args.nodes, gpus=args.gpus, seed=args.seed,
                     part=args.part)


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
    from fleetwatch.service import stop_on_signals

    stop = stop_on_signals()  # SIGTERM (a service manager) or Ctrl-C
    serve(open_dashboard_store(config), config.dashboard.host, config.dashboard.port,
          config.dashboard.refresh_s, temp_limit_c=config.alerts.gpu_temp_limit_c,
          carbon=model_from_config(config.carbon, config.energy), until=stop)
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
             "alerts": cmd_alerts, "train": cmd_train, "report": cmd_report}

if __name__ == "__main__":
    raise SystemExit(main())

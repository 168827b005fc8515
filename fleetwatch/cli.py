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
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence

from fleetwatch.cli_alerts import cmd_ack, cmd_alerts, cmd_silence
from fleetwatch.cli_args import parser
from fleetwatch.cli_history import (  # the exit codes are defined there, once
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    cmd_evaluate,
    cmd_replay,
    cmd_report,
    cmd_train,
)
from fleetwatch.cli_store import cmd_backup
from fleetwatch.cli_timeline import cmd_timeline
from fleetwatch.collectors.spool import SpoolBusy
from fleetwatch.config import Config, ConfigError, T, load, options, override
from fleetwatch.service import PortInUse

log = logging.getLogger("fleetwatch")


EXIT_INTERRUPTED = 128 + 2  # a command Ctrl-C ended before its result was whole (as shells)


def _override(config: Config, section: str, flags: Mapping[str, str] | None = None,
              **values: object) -> Config:
    """Command-line flags over the config, range-checked as the file's values are.

    ``flags`` names the flag of a key whose name differs (``interval_s`` is
    ``--interval``): an error names what the user typed, not ``--interval-s``.
    """
    if flags:
        _options(type(getattr(config, section)), section, flags, **values)
    return override(config, section, **values)


# Numbers that are durations or times: out of range, they are shown as such ("at most
# 366 d", "between 2000-01-01 and 2100-01-01"), not as 3.16224e+07 seconds.
_DURATIONS = {"duration_s", "interval_s", "backfill_s"}
_TIMES = {"end_ts"}


def _options(cls: type[T], section: str, flags: Mapping[str, str], **values: object) -> T:
    """``config.options`` with durations and times that are out of range refused in words."""
    from fleetwatch.simulate import span_text

    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = values.get(f.name)
        if (f.name not in _DURATIONS | _TIMES or "range" not in f.metadata
                or not isinstance(value, int | float)):
            continue
        lo, hi, above = f.metadata["range"]
        if math.isfinite(value) and (lo is None or (value > lo if above else value >= lo)) and (
                hi is None or value <= hi):
            continue
        where = f"command line {flags.get(f.name, '--' + f.name.replace('_', '-'))}"
        if f.name in _TIMES:
            raise ConfigError(f"{where}: {section}.{f.name} = {value:g}{_when(value)}; must be "
                              f"a time between {_date(lo)} and {_date(hi)} (UTC), in seconds "
                              f"since 1970{_millis(value, lo, hi)}")
        low = f"above {span_text(lo)}" if above else f"at least {span_text(lo)}"
        bounds = (f"{low} and at most {span_text(hi)}" if lo is not None and hi is not None
                  else low if lo is not None else f"at most {span_text(hi)}")
        raise ConfigError(f"{where}: {section}.{f.name} = {span_text(value)}; must be {bounds}")
    return options(cls, section, flags, **values)


def _date(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def _when(ts: float) -> str:
    try:
        return f" ({_date(ts)})"
    except (OverflowError, OSError, ValueError):  # beyond what the C library dates
        return ""


def _millis(value: float, lo: float, hi: float) -> str:
    if lo <= value / 1000 <= hi:
        return f": {value:g} looks like milliseconds; {value / 1000:.0f} is {_date(value / 1000)}"
    return ""


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
        if getattr(args, "store", None):  # a file: SQLite, whatever store.kind says
            config = _override(config, "store", {"path": "--store"}, path=args.store,
                               kind="sqlite")
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
    except SpoolBusy as exc:  # another agent holds the spool: said as it is, exit 2
        print(f"fleetwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PortInUse as exc:  # names the address, the setting that chose it, its holder
        print(f"fleetwatch: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:  # a port taken by something not wrapped above
            print(f"fleetwatch: an address is already in use ({exc}): is another fleetwatch or "
                  "dcgm-exporter running? Choose another port (--port, or the *_port settings)",
                  file=sys.stderr)
            return EXIT_ERROR
        raise
    except KeyboardInterrupt:  # a command without a stop of its own: its result is not whole
        print("\nfleetwatch: interrupted (Ctrl-C) before it finished", file=sys.stderr)
        return EXIT_INTERRUPTED


def _sim_config(config: Config, args: argparse.Namespace) -> Config:
    """The simulated fleet: the flags over ``[sim]``, at most ``MAX_NODES`` nodes and
    ``MAX_GPUS`` GPUs in all (what one machine simulates; see ``fleetwatch.simulate``)."""
    from fleetwatch.simulate import MAX_GPUS, MAX_NODES, counted

    config = _override(config, "sim", nodes=args.nodes, gpus=args.gpus, seed=args.seed,
                       part=args.part, cluster=args.cluster,
                       inlet_c=getattr(args, "inlet_c", None))
    s = config.sim
    if s.nodes > MAX_NODES or s.nodes * s.gpus > MAX_GPUS:
        named = " and ".join(f for f, v in (("--nodes", args.nodes), ("--gpus", args.gpus))
                             if v is not None) or "sim.nodes and sim.gpus"
        raise ConfigError(f"command line {named}: a simulated fleet of "
                          f"{counted(s.nodes, 'node')} x {counted(s.gpus, 'GPU')} is more "
                          f"than one machine simulates: at most {MAX_NODES:,} nodes and "
                          f"{MAX_GPUS:,} GPUs in all (e.g. --nodes "
                          f"{min(MAX_NODES, MAX_GPUS // s.gpus)} --gpus {s.gpus})")
    return config


def _faults(config: Config, args: argparse.Namespace, default_start_s: float,
            default_duration_s: float) -> list:
    from fleetwatch.collectors.sim import Fault

    if args.no_faults and args.fault:
        raise ConfigError("command line --no-faults with --fault "
                          f"{' --fault '.join(f'{f.kind}:{f.subject}' for f in args.fault)}: "
                          "--no-faults injects no fault at all; give one or the other")
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
    return run_up(config, _up_options(config, args),
                  port_setting="--port" if args.port is not None else "dashboard.port")


def _up_options(config: Config, args: argparse.Namespace):  # -> UpOptions
    from fleetwatch.up import UpOptions

    checked = _options(UpOptions, "up", _UP_FLAGS, interval_s=args.interval, speed=args.speed,
                       backfill_s=args.backfill)
    faults = _faults(config, args, default_start_s=120.0, default_duration_s=6 * 3600.0)
    return dataclasses.replace(checked, simulate=args.simulate, faults=tuple(faults),
                               keep=args.keep, store=args.store, steady_load=not args.phases,
                               into_live_store=args.into_live_store)


def open_dashboard_store(config: Config):
    from fleetwatch.wiring import open_store

    return open_store(config.store, read_only=config.store.kind == "sqlite")


_SIMULATE_FLAGS = {"duration_s": "--duration", "interval_s": "--interval", "end_ts": "--end"}


def cmd_simulate(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.simulate import SimulateOptions, run_simulate, span_text

    config = _sim_config(config, args)
    checked = _options(SimulateOptions, "simulate", _SIMULATE_FLAGS, days=args.days,
                       duration_s=args.duration, interval_s=args.interval,
                       end_ts=args.end if args.end is not None else time.time())
    ahead, limit = (args.end or 0.0) - time.time(), config.processor.max_clock_ahead_s
    if args.end is not None and math.isfinite(args.end) and 0 < limit < ahead:  # 0: no bound
        # The processor refuses frames this far ahead of its clock; a store holding them shows
        # alerts "firing since" a time not yet come, and `up --keep` refuses to continue it.
        raise ConfigError(f"command line --end: {args.end:.0f}{_when(args.end)} is "
                          f"{span_text(ahead)} in the future (processor.max_clock_ahead_s is "
                          f"{span_text(limit)}): a simulated history "
                          "ends by now; leave --end out to end it now")
    duration = args.duration if args.duration is not None else checked.days * 86400
    faults = _faults(config, args, default_start_s=duration / 2, default_duration_s=2 * 3600.0)
    return run_simulate(config, checked, duration, faults, store=args.store)


def cmd_agent(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.agent_service import read_once, run_agent
    from fleetwatch.collectors.nvml import NvmlUnavailable

    if args.json and not args.once:  # else the long-running agent would start instead
        print("fleetwatch agent: --json prints the one frame of --once: add --once",
              file=sys.stderr)
        return EXIT_USAGE
    if args.fake_faults is not None and args.fake_gpus is None:
        print("fleetwatch agent: --fake-faults steers the fake GPUs of --fake-gpus N: add "
              "--fake-gpus", file=sys.stderr)
        return EXIT_USAGE
    if args.interval is not None:
        config = _override(config, "agent", {"interval_s": "--interval"},
                           interval_s=args.interval)
    try:
        if not args.once:
            return run_agent(config, args.fake_gpus, fake_faults=args.fake_faults)
        frame = read_once(config, args.fake_gpus, args.fake_faults)
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
          f"{len(frame.gpus)} GPU{'' if len(frame.gpus) == 1 else 's'}")
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
    from fleetwatch.process_stop import leave

    return leave(run_processor(_override(config, "processor", workers=args.workers)))


def cmd_dashboard(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.dashboards import serve

    config = _override(config, "dashboard", host=args.host, port=args.port)
    _check_bind(config.dashboard.host)
    from fleetwatch.carbon import model_or_unknown
    from fleetwatch.service import listen, stop_on_signals

    c = config.dashboard
    # The port first, as `up` takes it: a taken one stops here, naming its holder.
    sock = listen(c.host, c.port, "--port" if args.port is not None else "dashboard.port",
                  "--port (or dashboard.port)")
    try:
        stop = stop_on_signals()  # SIGTERM (a service manager) or Ctrl-C
        serve(open_dashboard_store(config), c.host, c.port, c.refresh_s, sock=sock,
              temp_limit_c=config.detectors.site_temp_limit_c,
              carbon=model_or_unknown(config.carbon, config.energy), until=stop,
              allowed_hosts=c.allowed_hosts, node_static_w=config.energy.node_static_w,
              max_gap_s=config.energy.max_gap_s,
              fallback_slowdown_c=config.detectors.fallback_slowdown_c)
    finally:
        sock.close()
    return EXIT_OK


def cmd_config(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.config_secrets import MASK, public_view
    from fleetwatch.wiring import detectors

    # What start-up checks beyond the file's keys and values, checked here too: users run
    # `fleetwatch config` to check a file before they deploy it (a ConfigError: exit 2).
    detectors(config.detectors)
    view = public_view(config)
    if any(MASK in str(v) for values in view.values() for v in values.values()):
        print(f"# Secrets are shown as {MASK}: fleetwatch refuses to load this as it is; put "
              "the real ones back, or in fleetwatch.env (FLEETWATCH_ variables).\n")
    for section, values in view.items():
        print(f"[{section}]")
        for key, value in values.items():
            print(f"{key} = {_toml_value(value)}")
        print()
    return EXIT_OK


def _toml_value(value: object) -> str:
    """``value`` as TOML: a table inline (``{ k = v }``: JSON's ``{"k": v}`` is not TOML,
    and `fleetwatch config`'s output is meant to be loaded back); the rest as JSON, whose
    strings, numbers, booleans and lists TOML reads alike."""
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    return json.dumps(value)


_COMMANDS = {"up": cmd_up, "simulate": cmd_simulate, "agent": cmd_agent, "process": cmd_process,
             "dashboard": cmd_dashboard, "config": cmd_config, "replay": cmd_replay,
             "evaluate": cmd_evaluate, "silence": cmd_silence, "ack": cmd_ack,
             "alerts": cmd_alerts, "train": cmd_train, "report": cmd_report,
             "backup": cmd_backup, "timeline": cmd_timeline}

if __name__ == "__main__":
    raise SystemExit(main())

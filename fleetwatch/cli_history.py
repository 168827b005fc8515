"""The commands that read, score or annotate history: ``train``, ``report``, ``replay``,
``evaluate``, ``silence`` and ``ack``. Each parses nothing (``fleetwatch.cli`` does), loads
nothing, calls one library function and returns an exit code."""

from __future__ import annotations

import argparse
import json
import sys
import time

from fleetwatch.config import Config, ConfigError

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def cmd_train(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.train import train
    from fleetwatch.wiring import open_store

    duration = args.duration or (args.days if args.days is not None else 7.0) * 86400
    if not 3600 <= duration <= 400 * 86400:
        raise ConfigError(f"training span of {duration:g} s: choose between 1 hour and 400 days")
    end = args.end if args.end is not None else time.time()
    out = args.out or config.models.dir
    store = open_store(config.store, read_only=config.store.kind == "sqlite")
    print(f"training on {duration / 86400:g} days of {config.store.kind} store history "
          f"ending {time.strftime('%Y-%m-%d %H:%M', time.localtime(end))}", file=sys.stderr)
    try:
        path, meta = train(store, end - duration, end, out,
                           lemon_half_life_d=config.models.lemon_half_life_d,
                           progress=lambda text: print(f"  {text}", file=sys.stderr))
    except ValueError as exc:
        print(f"fleetwatch train: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        store.close()
    print(f"wrote {path} in {meta['train_s']} s: {meta['gpus']} GPUs; thermal "
          f"{meta['thermal_regressor']} (held-out MAE {meta['thermal_heldout_mae_c']} °C, "
          f"spread {meta['thermal_spread_c']} °C); anomaly phases {meta['anomaly_phases']}; "
          f"{meta['lemon_nodes']} nodes with trouble", file=sys.stderr)
    return EXIT_OK


def cmd_report(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.report import ReportError, report_month

    try:
        print(report_month(config, args.month, args.out))
    except ReportError as exc:
        print(f"fleetwatch report: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def cmd_replay(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.replay import ReplayError, Series, replay
    from fleetwatch.wiring import detectors, open_store

    store = open_store(config.store) if args.store else None
    try:
        summary = replay(args.files, detectors(config.detectors), sys.stdout, args.speed,
                         args.skip_bad, store, args.cluster, args.rack,
                         keep_firing_s=config.alerts.keep_firing_s,
                         series=Series(args.metric, args.node, args.gpu))
    except ReplayError as exc:
        print(f"fleetwatch replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if store is not None:
            store.close()
    for line in summary.lines():
        print(line, file=sys.stderr)
    return EXIT_OK


def cmd_evaluate(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.evaluate import EvalOptions, detector_sets, evaluate, known_kinds, table

    kinds = tuple(k.strip() for k in args.kinds.split(",")) if args.kinds else ()
    unknown = set(kinds) - set(known_kinds())
    if unknown:
        print(f"fleetwatch evaluate: unknown fault kind(s) {', '.join(sorted(unknown))}; the "
              f"simulator has {', '.join(known_kinds())}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sets = detector_sets(config, args.models)
    except ValueError as exc:
        print(f"fleetwatch evaluate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    options = EvalOptions(gpus=args.gpus, hours=args.hours, seed=args.seed,
                          per_kind=args.per_kind, kinds=kinds, interval_s=args.interval,
                          part=args.part,
                          keep_firing_s=config.alerts.keep_firing_s)
    started = time.monotonic()
    shown = [-1.0]

    def progress(run: str, done: float) -> None:
        if time.monotonic() - shown[0] >= 2.0 or done >= 1.0:
            shown[0] = time.monotonic()
            print(f"evaluate: {run} run {done:6.1%} ({time.monotonic() - started:5.0f} s)",
                  file=sys.stderr, flush=True)

    try:
        result = evaluate(options, sets, progress, args.workers)
    except ValueError as exc:  # e.g. the fault schedule does not fit the fleet
        print(f"fleetwatch evaluate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(table(result), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return EXIT_OK


def cmd_silence(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.silencing import SilenceError, add_silence, describe, expire_silence
    from fleetwatch.wiring import open_store

    store = open_store(config.store)
    try:
        if args.action == "add":
            s = add_silence(store, args.matchers, args.duration, by=args.by, comment=args.comment)
            print(s.id)
        elif args.action == "expire":
            print(describe(expire_silence(store, args.id)))
        else:
            if not callable(getattr(store, "silences", None)):
                raise SilenceError("this store keeps no silences yet")
            for s in store.silences(None if args.all else time.time()):
                print(describe(s))
    except SilenceError as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    return EXIT_OK


def cmd_alerts(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.alert_view import headline, lines, record
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.wiring import open_store, store_name

    c = config.store
    name = store_name(c)
    now = time.time()
    try:
        store = open_store(c, read_only=c.kind == "sqlite")
    except StoreError as exc:
        print(f"fleetwatch alerts: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        alerts = store.alerts()
        if args.since is not None:  # those that fired: a pending one that cleared is no news
            alerts += [a for a in store.alerts(("resolved",), since_ts=now - args.since)
                       if a.fired_ts is not None]
        acks = {a.alert_id: a for a in store.acks()} if hasattr(store, "acks") else {}
        silences = store.silences(now) if hasattr(store, "silences") else []
    except StoreError as exc:
        print(f"fleetwatch alerts: cannot read {name}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        store.close()
    open_alerts = [a for a in alerts if a.state != "resolved"]
    if args.node:
        alerts = [a for a in alerts if a.node == args.node]
    if args.json:
        for a in alerts:
            print(json.dumps(record(a, open_alerts, silences, acks)))
        return EXIT_OK
    scope = f" of {args.node}" if args.node else ""
    if not alerts:
        recent = f" and none resolved in the last {args.since:g} s" if args.since else ""
        print(f"no open alerts{scope}{recent} in {name}")
        return EXIT_OK
    print(f"{headline(alerts)} alerts{scope} in {name} (times UTC)")
    for line in lines(alerts, silences, acks, now):
        print(line)
    return EXIT_OK


def cmd_ack(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.silencing import SilenceError, acknowledge
    from fleetwatch.wiring import open_store

    store = open_store(config.store)
    try:
        acknowledge(store, args.alert_id, args.by, args.comment)
    except SilenceError as exc:
        print(f"fleetwatch ack: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    print(f"acknowledged {args.alert_id} as {args.by}")
    return EXIT_OK

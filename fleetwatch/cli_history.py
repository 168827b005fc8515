"""The commands that read, score or annotate history: ``train``, ``report``, ``replay``,
``evaluate``, ``silence`` and ``ack``. Each parses nothing (``fleetwatch.cli`` does), loads
nothing, calls one library function and returns an exit code."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from fleetwatch.config import Config

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _missing_store(config: Config) -> str | None:
    """Why the store the commands that read or annotate it (``alerts``, ``ack``,
    ``silence``) would open is not there, or None.

    Opened for writing, a SQLite store that does not exist is created, empty: an
    ``ack`` or ``silence`` with a mistyped ``--store`` made one, and ``alerts`` on it
    then said "no open alerts", an all-clear nobody gave. So those commands refuse a
    missing file before opening anything, as ``alerts`` does. A server store (kind
    victoriametrics or influx) answers for itself.
    """
    c = config.store
    if c.kind != "sqlite":
        return None
    path = Path(c.path)
    if path.is_file():
        return None
    if path.is_dir():
        return f"store {path} is a folder; name the store file with --store PATH"
    from fleetwatch.simulate import SIM_STORE_PATH  # here: it imports the simulator

    sim = Path(SIM_STORE_PATH)
    if sim.is_file() and path.resolve() != sim.resolve():  # `up` ran here: that is the store
        return (f"no store at {path}; fleetwatch up writes {SIM_STORE_PATH} here: pass "
                f"--store {SIM_STORE_PATH}")
    return (f"no store at {path}: run `fleetwatch up` or `fleetwatch simulate` first, or "
            f"name the store with --store PATH (store.path)")


TRAIN_MIN_S, TRAIN_MAX_S = 3600.0, 400 * 86400.0


def cmd_train(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.simulate import span_text
    from fleetwatch.train import check_out_dir, train, written_warnings
    from fleetwatch.wiring import open_store

    if args.duration is not None:
        duration, typed = args.duration, f"--duration {span_text(args.duration)}"
    else:
        days = args.days if args.days is not None else 7.0
        duration, typed = days * 86400, f"--days {days:g}"
    if not TRAIN_MIN_S <= duration <= TRAIN_MAX_S:
        print(f"fleetwatch train: {typed}: train on 1 h to 400 d of history, e.g. "
              "--duration 36h or --days 7", file=sys.stderr)
        return EXIT_USAGE
    end = args.end if args.end is not None else time.time()
    out = args.out or config.models.dir
    cannot = check_out_dir(out)
    if cannot:
        print(f"fleetwatch train: {cannot}", file=sys.stderr)
        return EXIT_ERROR
    missing = _missing_store(config)
    if missing:
        print(f"fleetwatch train: {missing}", file=sys.stderr)
        return EXIT_ERROR
    try:
        store = open_store(config.store, read_only=config.store.kind == "sqlite")
    except StoreError as exc:
        print(f"fleetwatch train: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"training on {span_text(duration)} of {config.store.kind} store history ending "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(end))} UTC", file=sys.stderr)
    try:
        path, meta = train(store, end - duration, end, out,
                           lemon_half_life_d=config.models.lemon_half_life_d,
                           progress=lambda text: print(f"  {text}", file=sys.stderr))
    except (ValueError, StoreError) as exc:
        print(f"fleetwatch train: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # the directory went or changed while the models were fit
        print(f"fleetwatch train: cannot write the model file in {Path(out).absolute()} "
              f"({exc}): give --out (models.dir) a directory this user can write",
              file=sys.stderr)
        return EXIT_ERROR
    finally:
        store.close()
    print(f"wrote {path} in {meta['train_s']} s: {meta['gpus']} GPUs; thermal "
          f"{meta['thermal_regressor']} (held-out MAE {meta['thermal_heldout_mae_c']} °C, "
          f"spread {meta['thermal_spread_c']} °C); anomaly phases {meta['anomaly_phases']}; "
          f"{meta['lemon_nodes']} nodes with trouble", file=sys.stderr)
    unfitted = _phases_without_model(meta)
    if unfitted:
        from fleetwatch.models.anomaly import MIN_WINDOWS

        print(f"fleetwatch train: warning: the anomaly model has no model of {unfitted}: the "
              f"history held too few ten-minute windows of that work (fewer than {MIN_WINDOWS} "
              "a phase), so GPUs doing it are not scored; train on a longer span (e.g. --days "
              "7)", file=sys.stderr)
    for warning in written_warnings(path, meta):
        print(f"fleetwatch train: WARNING: {warning}", file=sys.stderr)
    return EXIT_OK


def _phases_without_model(meta: dict[str, Any]) -> str:
    """The phases of work the anomaly model has no model of, with their SM activity
    (``idle work (SM activity under 5%), light work (5%-30%)``), or ""."""
    from fleetwatch.models.anomaly import PHASE_NAMES, PHASES

    fitted = {int(k) for k in meta.get("anomaly_phases", {})}
    missing = meta.get("anomaly_phases_missing",
                       [n for i, n in enumerate(PHASE_NAMES) if i not in fitted])
    edges = [0.0, *PHASES, 1.0]
    named = []
    for i, name in enumerate(PHASE_NAMES):
        if name not in missing:
            continue
        lo, hi = edges[i], edges[i + 1]
        span = (f"under {hi:.0%}" if i == 0 else f"{lo:.0%} and over" if i == len(PHASES)
                else f"{lo:.0%}-{hi:.0%}")
        named.append(f"{name} work (SM activity {span})")
    return ", ".join(named)


def cmd_report(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.report_files import report_month
    from fleetwatch.report_month import ReportError

    try:
        # An empty --cluster (an unset variable) means every cluster, as in `alerts`.
        print(report_month(config, args.month, args.out, args.cluster or None, args.tz))
    except ReportError as exc:
        # A store that is not there says so as `alerts` and `train` do (with the store
        # `up` left here, if any), not as a failed read of the ledger.
        missing = _missing_store(config) if isinstance(exc.__cause__, StoreError) else None
        print(f"fleetwatch report: {missing or exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def cmd_replay(config: Config, args: argparse.Namespace) -> int:
    """Replay the files; with ``--store``, into that store under its lock.

    The lock is the one ``up`` and ``simulate`` take: replayed alerts written into a
    live store were never resolved by the live stream (the recording's nodes send
    nothing more) and stayed firing there for good.
    """
    from fleetwatch.replay import ReplayError, Series, replay
    from fleetwatch.storelock import StoreBusy, StoreLock, StorePathError, check_store_path
    from fleetwatch.wiring import detectors, learned_detectors, linked, open_store

    chosen = detectors(config.detectors)
    if args.models:
        if not config.models.enabled:
            print("fleetwatch replay: --models, but models.enabled is false in the "
                  "configuration: set it to true (or FLEETWATCH_MODELS_ENABLED=true), or "
                  "leave --models out", file=sys.stderr)
            return EXIT_USAGE
        chosen = linked([*chosen, *learned_detectors(config.models)])
    lock = None
    if args.store and config.store.kind == "sqlite":
        try:
            check_store_path(config.store.path)
            lock = StoreLock(config.store.path).acquire()
        except (StoreBusy, StorePathError) as exc:
            print(f"fleetwatch replay: {exc}", file=sys.stderr)
            return EXIT_ERROR if isinstance(exc, StoreBusy) else EXIT_USAGE
    try:
        store = open_store(config.store) if args.store else None
        try:
            summary = replay(args.files, chosen, sys.stdout, args.speed,
                             args.skip_bad, store, args.cluster, args.rack,
                             keep_firing_s=config.alerts.keep_firing_s,
                             series=Series(args.metric, args.node, args.gpu),
                             gpu_model=args.gpu_model,
                             lost_silent_s=config.detectors.gpu_lost_silent_s)
        except ReplayError as exc:
            print(f"fleetwatch replay: {exc}", file=sys.stderr)
            return EXIT_ERROR
        finally:
            if store is not None:
                store.close()
    finally:
        if lock is not None:
            lock.release()
    for line in summary.lines():
        print(line, file=sys.stderr)
    if not summary.frames:
        why = (f"every row was bad ({summary.bad_rows} skipped)" if summary.bad_rows
               else "the files hold no sample")
        print(f"fleetwatch replay: nothing replayed: {why}; check the files' layout and "
              "values (the lines above say what was read)", file=sys.stderr)
        return EXIT_ERROR
    if summary.late_rows and not args.skip_bad:
        # Like a bad row: data not judged is not a clean bill of health for a script.
        print(f"fleetwatch replay: {summary.late_rows:,} rows were passed over, not replayed "
              "(the file is not in time order, see above): sort it by time, or pass "
              "--skip-bad to accept rows passed over and exit 0", file=sys.stderr)
        return EXIT_ERROR
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
                          part=args.part, inlet_c=args.inlet_c,
                          hot_inlet_c=None if args.no_hot_room else args.hot_inlet_c,
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
    from fleetwatch.alert_view import age, utc
    from fleetwatch.pipeline.store.base import ACTIVE_STATES, StoreError
    from fleetwatch.silencing import (
        SilenceError,
        SilenceNotFound,
        add_silence,
        cluster_scope_warning,
        describe,
        expire_silence,
        mutes_now,
    )
    from fleetwatch.wiring import open_store, store_name

    missing = _missing_store(config)
    if missing:
        print(f"fleetwatch silence: {missing}", file=sys.stderr)
        return EXIT_ERROR
    try:  # listing only reads: a store on a read-only mount can be listed
        store = open_store(config.store,
                           read_only=config.store.kind == "sqlite" and args.action == "list")
    except StoreError as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.action == "add":
            refused = _check_node(store, args.matchers, args.force)
            if refused:
                print(f"fleetwatch silence: {refused}", file=sys.stderr)
                return EXIT_USAGE
            s = add_silence(store, args.matchers, args.duration, by=args.by, comment=args.comment)
            print(s.id)  # alone on stdout: ID=$(fleetwatch silence add ...) for a script
            matchers = ",".join(f"{n}{op}{v}" for n, op, v in s.matchers)
            print(f"silenced {matchers} from {utc(s.start_ts)} until {utc(s.end_ts)} UTC "
                  f"({age(s.end_ts - s.start_ts)}){' by ' + s.created_by if s.created_by else ''}"
                  f"; `fleetwatch silence expire {s.id}` ends it", file=sys.stderr)
            print(f"{mutes_now(s, store.alerts(ACTIVE_STATES))}", file=sys.stderr)
            warning = cluster_scope_warning(s.matchers, _clusters_of_node(store, s.matchers))
            if warning:
                print(warning.replace("expire it", f"`fleetwatch silence expire {s.id}`"),
                      file=sys.stderr)
        elif args.action == "import":
            from fleetwatch.cli_store import import_silences

            return import_silences(store, args.source, store_name(config.store))
        elif args.action == "expire":
            s, ended = expire_silence(store, args.id)
            print(describe(s))
            if not ended:
                print(f"fleetwatch silence: {s.id} had already ended at {utc(s.end_ts)} UTC; "
                      "nothing changed", file=sys.stderr)
        else:
            if not callable(getattr(store, "silences", None)):
                raise SilenceError("this store keeps no silences yet")
            for s in store.silences(None if args.all else time.time()):
                print(describe(s))
    except (SilenceNotFound, StoreError) as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SilenceError as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    return EXIT_OK


def cmd_alerts(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.alert_view import (
        age,
        data_end,
        fit,
        headline,
        lines,
        ordered,
        record,
        rule_summary,
        utc,
    )
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.wiring import open_store, store_name

    c = config.store
    name = store_name(c)
    now = time.time()
    missing = _missing_store(config)
    if missing:
        print(f"fleetwatch alerts: {missing}", file=sys.stderr)
        return EXIT_ERROR
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
        # A replay store's open alerts are open as its data left them, days ago.
        ended = data_end(store, now) if any(a.state != "resolved" for a in alerts) else None
        unknown = ""
        if args.node and not any(a.node == args.node for a in alerts):
            unknown = _unknown_node(store, args.node, now)
        if args.cluster and not any(a.cluster == args.cluster for a in alerts):
            unknown += _unknown_cluster(store, args.cluster, now)
        damage = store.damage() if callable(getattr(store, "damage", None)) else None
    except StoreError as exc:
        print(f"fleetwatch alerts: cannot read {name}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        store.close()
    if damage is not None:  # read, yet damaged: what is listed may not be all there is
        from fleetwatch.pipeline.store.sqlite_errors import recovery

        print(f"fleetwatch alerts: WARNING: the store {name} is damaged (quick_check: "
              f"{damage}); the alerts below may be incomplete: {recovery(c.path)}",
              file=sys.stderr)
    open_alerts = [a for a in alerts if a.state != "resolved"]
    if args.node:
        alerts = [a for a in alerts if a.node == args.node]
    if args.cluster:
        alerts = [a for a in alerts if a.cluster == args.cluster]
    if args.json:  # in the table's order, so that a script's first line is the table's first
        for a in ordered(alerts):
            print(json.dumps(record(a, open_alerts, silences, acks, now)))
        return EXIT_OK
    scope = (f" of {args.cluster + '/' if args.cluster else ''}{args.node}" if args.node else
             f" of cluster {args.cluster}" if args.cluster else "")
    if not alerts:
        since = getattr(args.since, "text", f"{args.since:g}s") if args.since else ""
        recent = f" and none resolved in the last {since}" if since else ""
        print(f"no open alerts{scope}{recent} in {name}{unknown}")
        return EXIT_OK
    # The terminal's width (COLUMNS, else the tty's); 0 when piped: lines kept whole for grep.
    width = shutil.get_terminal_size((0, 0)).columns
    print("\n".join(fit(f"{headline(alerts)} alerts{scope} in {name} (times UTC)", width)))
    summed = rule_summary(alerts)
    if len(summed) < len(alerts):  # a storm: its rules first, a line each
        for line in summed:
            print("\n".join(fit(line, width)))
    if ended is not None and any(a.state != "resolved" for a in alerts):
        print("\n".join(fit(
            f"no data since {utc(ended)} ({age(now - ended)} ago): the open alerts are as "
            "the data left them (a replay store, `fleetwatch up` still catching up, or the "
            "pipeline stopped)", width)))
    for line in lines(alerts, silences, acks, now, ended, width, args.short):
        print(line)
    return EXIT_OK


def _check_node(store: Any, matchers: Any, force: bool) -> str:
    """Why a silence of ``node=X`` is refused: X sent no data in the last week and has no
    open alert (a typo mutes nothing while the real node keeps paging); "" to go on. With
    ``force`` (a node not reporting yet) or a store that knows no node yet, said as a
    warning instead."""
    from fleetwatch.silencing import named_node, unknown_node

    node = named_node(matchers)
    if node is None or any(a.node == node for a in store.alerts()):
        return ""
    nodes = _nodes_seen(store, time.time())
    said = unknown_node(node, nodes)
    if not said:
        return ""
    said += "" if said.endswith("?") else "."
    if force or not nodes:
        print(f"warning: {said} Silenced anyway.", file=sys.stderr)
        return ""
    return (f"{said} Nothing silenced: name a node that reports, or add --force to "
            f"silence {node} before it reports.")


def _unknown_cluster(store: Any, cluster: str, now: float) -> str:
    """A hint when ``cluster`` sent nothing to the store in the last week, else ""."""
    from fleetwatch.pipeline.ownership import SEEN_METRICS

    seen = sorted({key.cluster for metric in SEEN_METRICS
                   for key, _, _ in store.latest(metric, int((now - 7 * 86400) * 1000))})
    if cluster in seen:
        return ""
    return (f" (no cluster {cluster!r} has sent data to it in the last 7 days; clusters "
            f"seen: {', '.join(seen) or 'none'})")


def _clusters_of_node(store: Any, matchers: Any) -> list[str]:
    """The clusters the silence's ``node=X`` reports in (the last week), for the warning of
    a silence that would mute X in several; [] when it names no single node."""
    from fleetwatch.silencing import node_clusters

    node = next((v for name, op, v in matchers if name == "node" and op == "="), None)
    if node is None or any(name == "cluster" for name, _, _ in matchers):
        return []
    return node_clusters(store, node, time.time() - 7 * 86400)


def _unknown_node(store: Any, node: str, now: float) -> str:
    """A hint when ``node`` sent nothing to the store in the last week (a typo, or a short
    name for a node the agents call by its full one), else "" (``unknown_node``)."""
    from fleetwatch.silencing import unknown_node

    said = unknown_node(node, _nodes_seen(store, now))
    return f" ({said})" if said else ""


def _nodes_seen(store: Any, now: float) -> list[str]:
    """The nodes that sent data to the store in the last week."""
    from fleetwatch.pipeline.ownership import last_seen

    return sorted({name for _, name in last_seen(store, now - 7 * 86400)})


def cmd_ack(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.silencing import SilenceError, SilenceNotFound, acknowledge
    from fleetwatch.wiring import open_store

    missing = _missing_store(config)
    if missing:
        print(f"fleetwatch ack: {missing}", file=sys.stderr)
        return EXIT_ERROR
    store = open_store(config.store)
    try:
        _ack, previous = acknowledge(store, args.alert_id, args.by, args.comment)
    except SilenceNotFound as exc:
        print(f"fleetwatch ack: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SilenceError as exc:
        print(f"fleetwatch ack: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    replaced = ""
    if previous is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(previous.ts))
        replaced = (f" (replacing {previous.by}'s acknowledgement of {when} UTC"
                    + (f": {previous.comment}" if previous.comment else "") + ")")
    print(f"acknowledged {args.alert_id} as {args.by}{replaced}")
    return EXIT_OK

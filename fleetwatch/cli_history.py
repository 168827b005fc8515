"""The commands that read or score history: ``train``, ``report``, ``replay`` and
``evaluate`` (the alert board's ``alerts``, ``silence`` and ``ack`` are in
``fleetwatch.cli_alerts``). Each parses nothing (``fleetwatch.cli`` does), loads nothing,
calls one library function and returns an exit code."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fleetwatch.config import Config

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def missing_store(config: Config) -> str | None:
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
    from fleetwatch.train import NotEnoughHistory, train
    from fleetwatch.train_files import check_out_dir, written_warnings
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
    missing = missing_store(config)
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
    except NotEnoughHistory as exc:  # a new install: the timer's or Job's run is no failure
        print(f"fleetwatch train: {exc}", file=sys.stderr)
        return EXIT_OK
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
    held = meta.get("data_range")
    if held and held[1] - held[0] < duration / 2:
        from fleetwatch.models.learned import trained_text

        print(f"fleetwatch train: warning: the store held only {trained_text(meta)}: the "
              "model knows the fleet only as it was then (an installation's first night); "
              "train again once more history is kept (fleetwatch-train.timer does, nightly)",
              file=sys.stderr)
    unfitted = _phases_without_model(meta)
    if unfitted:
        from fleetwatch.models.anomaly import MIN_WINDOWS

        print(f"fleetwatch train: warning: the anomaly model has no model of {unfitted}: the "
              f"history held too few ten-minute windows of that work (fewer than {MIN_WINDOWS} "
              "a phase), so GPUs doing it are not scored; train on a span of history in "
              "which the fleet did that kind of work" + (" (e.g. --days 7)" if duration
                                                          < 7 * 86400 else ""), file=sys.stderr)
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
    from fleetwatch.report_month import NothingToReport, ReportError, ZoneError

    try:
        # An empty --cluster (an unset variable) means every cluster, as in `alerts`.
        print(report_month(config, args.month, args.out, args.cluster or None, args.tz))
    except NothingToReport as exc:  # a new install: the timer's or Job's run is no failure
        print(f"fleetwatch report: {exc}", file=sys.stderr)
        return EXIT_OK
    except ReportError as exc:
        # A store that is not there says so as `alerts` and `train` do (with the store
        # `up` left here, if any), not as a failed read of the ledger.
        missing = missing_store(config) if isinstance(exc.__cause__, StoreError) else None
        print(f"fleetwatch report: {missing or exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ZoneError) else EXIT_ERROR
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
    from fleetwatch.evaluate import EvalOptions, detector_sets, evaluate, known_kinds
    from fleetwatch.evaluate_table import table

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

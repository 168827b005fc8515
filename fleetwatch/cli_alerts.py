"""The alert board's commands: ``alerts`` (the open and recent alerts), ``silence`` (add,
expire, list, import) and ``ack``. Each parses nothing (``fleetwatch.cli`` does), loads
nothing, opens the store, calls one library function and returns an exit code."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from typing import Any

from fleetwatch.cli_history import EXIT_ERROR, EXIT_OK, EXIT_USAGE, missing_store
from fleetwatch.config import Config


def cmd_silence(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.alert_view import age, utc
    from fleetwatch.pipeline.store.base import ACTIVE_STATES, StoreError
    from fleetwatch.silencing import (
        SilenceError,
        SilenceNotFound,
        add_silence,
        cluster_scope_warning,
        comment_dropped,
        describe,
        expire_silence,
        mutes_now,
    )
    from fleetwatch.wiring import open_store, store_name

    missing = missing_store(config)
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
            now = time.time()
            start, length = _window(args, now)
            unknown = _unknown_silenced_node(store, args.matchers)
            s = add_silence(store, args.matchers, length, start_ts=start, by=args.by,
                            comment=args.comment)
            print(s.id)  # alone on stdout: ID=$(fleetwatch silence add ...) for a script
            matchers = ",".join(f"{n}{op}{v}" for n, op, v in s.matchers)
            print(f"silenced {matchers} from {utc(s.start_ts)} until {utc(s.end_ts)} UTC "
                  f"({age(s.end_ts - s.start_ts)}){' by ' + s.created_by if s.created_by else ''}"
                  f"; `fleetwatch silence expire {s.id}` ends it", file=sys.stderr)
            print(mutes_now(s, store.alerts(ACTIVE_STATES), now), file=sys.stderr)
            dropped = comment_dropped(store, [args.comment], "silence")
            if dropped:
                print(f"fleetwatch silence: {dropped}", file=sys.stderr)
            if unknown:
                print(f"fleetwatch silence: WARNING: {unknown} Silenced anyway (a node not "
                      f"reporting yet); if it is a typo, `fleetwatch silence expire {s.id}` "
                      "and silence the right name.", file=sys.stderr)
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
            now = time.time()
            for s in store.silences():
                # In force, or pending (not started yet; one expired before its start ends
                # where it starts).
                if args.all or s.end_ts > max(now, s.start_ts):
                    print(describe(s, now))
    except (SilenceNotFound, StoreError) as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SilenceError as exc:
        print(f"fleetwatch silence: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    return EXIT_OK


def _window(args: argparse.Namespace, now: float) -> tuple[float, float]:
    """``silence add``'s (start, length) from --start, --until, --for and --tz."""
    from datetime import datetime

    from fleetwatch.alert_view import utc
    from fleetwatch.report_month import ZoneError, zone
    from fleetwatch.silencing import SilenceError, window

    try:
        tz = zone(args.tz)
    except ZoneError as exc:
        raise SilenceError(f"--tz: {exc}") from None
    start = _moment(args.start, "--start", tz) if args.start else None
    end = _moment(args.until, "--until", tz) if args.until else None
    def shown(ts: float) -> str:  # in the zone typed, and UTC
        utc_text = f"{utc(ts)} UTC"
        if tz.key == "UTC":
            return utc_text
        local = datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M:%S")
        return f"{local} {tz.key} ({utc_text})"

    return window(start, end, args.duration, now, shown)


def _moment(text: str, flag: str, tz: Any) -> float:
    """A date and time typed for ``flag``, in ``tz`` unless it carries its offset (as
    ``timeline --since`` reads one: ``fleetwatch.local_time``)."""
    from fleetwatch.local_time import LocalTimeError, moment
    from fleetwatch.silencing import SilenceError

    try:
        return moment(text, flag, tz)
    except LocalTimeError as exc:
        raise SilenceError(str(exc)) from None


def cmd_alerts(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.alert_view import (
        fit,
        headline,
        lag_text,
        lagging,
        lines,
        newest_data,
        newest_of_clusters,
        ordered,
        record,
        rule_summary,
        stopped_clusters,
        store_clusters,
    )
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.wiring import deployment_clusters, open_store, store_name

    c = config.store
    name = store_name(c)
    now = time.time()
    missing = missing_store(config)
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
        notified = _notified(store, alerts, now)
        # A replay store's open alerts are open as its data left them, days ago; a
        # processor that stopped leaves them as they were: said after a minute. Of the
        # cluster chosen, else of each cluster listed (one stopped while another is live),
        # and of every other cluster of the store whose data stopped (no alert open there).
        newest = newest_data(store, now, args.cluster)
        per = ({args.cluster: newest} if args.cluster else
               newest_of_clusters(store, now, (a.cluster for a in alerts)))
        if not args.cluster:
            # Of this deployment's clusters where its configuration names them (another
            # deployment's, sharing the store, is not its news), else of every cluster.
            mine = set(deployment_clusters(config))
            others = store_clusters(store, now) - set(per)
            per |= stopped_clusters(store, now, others & mine if mine else others)
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
    # Several clusters, or one whose data are not the store's newest: each said by name.
    named = not args.cluster and (len(per) > 1 or any(n != newest for n in per.values()))
    if not named:
        per = {}
    stale = lag_text(newest, now) if not named and lagging(newest, now) else ""
    stales = {c: lag_text(n, now) for c, n in per.items() if n is not None and lagging(n, now)}
    if args.json:  # in the table's order, so that a script's first line is the table's first
        for said in [stale] if stale else [f"{c}: {t}" for c, t in stales.items()]:
            print(f"fleetwatch alerts: WARNING: {said}", file=sys.stderr)
        for a in ordered(alerts):
            mine = per.get(a.cluster, newest)
            print(json.dumps({**record(a, open_alerts, silences, acks, now,
                                       notified.get(a.id, ())),
                              "data_newest_ts": mine, "data_stale": lagging(mine, now)}))
        return EXIT_OK
    scope = (f" of {args.cluster + '/' if args.cluster else ''}{args.node}" if args.node else
             f" of cluster {args.cluster}" if args.cluster else "")
    if not alerts:
        since = getattr(args.since, "text", f"{args.since:g}s") if args.since else ""
        recent = f" and none resolved in the last {since}" if since else ""
        print(f"no open alerts{scope}{recent} in {name}{unknown}")
        # "no open alerts" from a stopped processor, or cluster, is no all-clear
        for said in [stale] if stale else [f"{c}: {t}" for c, t in sorted(stales.items())]:
            print(said)
        return EXIT_OK
    # A pipe gets the previous release's lines, whole, which scripts grep and awk (`--json`
    # is the stable form); a terminal its width ($COLUMNS, else the tty's) and a storm's
    # per-rule summary. isatty first: COLUMNS is exported into many pipes.
    piped = not sys.stdout.isatty()
    width = 0 if piped else shutil.get_terminal_size((0, 0)).columns
    print("\n".join(fit(f"{headline(alerts)} alerts{scope} in {name} (times UTC)", width)))
    summed = [] if piped else rule_summary(alerts)
    if len(summed) < len(alerts):  # a storm: its rules first, a line each
        for line in summed:
            print("\n".join(fit(line, width)))
    said, ended = _stale_lines(alerts, newest, per, stale, stales, now)
    for line in said:
        print("\n".join(fit(line, width)))
    for line in lines(alerts, silences, acks, now, ended, width, args.short, piped, notified):
        print(line)
    return EXIT_OK


def _stale_lines(alerts: Any, newest: float | None, per: dict[str, float | None], stale: str,
                 stales: dict[str, str], now: float) -> tuple[list[str], Any]:
    """The lines over a table whose open alerts the data left (ended, or lagging), and
    when the data ended (``lines``' ``ended``): of the store or the cluster chosen, or per
    cluster named (``per``, empty where one is said for all)."""
    from fleetwatch.alert_view import age, ended_at, utc

    def text(end: float) -> str:
        return (f"no data since {utc(end)} ({age(now - end)} ago): the open alerts are as "
                "the data left them (a replay store, `fleetwatch up` still catching up, or "
                "the pipeline stopped)")

    open_of = {a.cluster for a in alerts if a.state != "resolved"}
    if not per:
        end = ended_at(newest, now) if open_of else None
        return ([text(end)] if end is not None else [stale] if stale and open_of else []), end
    ends = {c: e for c, e in ((c, ended_at(n, now)) for c, n in per.items())
            if c in open_of and e is not None}
    out = [f"{c}: {text(ends[c])}" if c in ends else f"{c}: {stales[c]}"
           for c in sorted(per) if c in ends or c in stales]
    return out, ends


def _notified(store: Any, alerts: Any, now: float) -> dict[str, list[Any]]:
    """Per alert id, what the processor recorded as notified up to ``now`` (and
    ``NOTIFIED_AHEAD_S`` past it; stores that keep it)."""
    from fleetwatch.alert_view import NOTIFIED_AHEAD_S
    from fleetwatch.pipeline.sinks.notified import settled

    read = getattr(store, "notifications", None)
    if not callable(read) or not alerts:
        return {}
    out: dict[str, list[Any]] = {}
    start, ids = min(a.started_ts for a in alerts), [a.id for a in alerts]
    for i in range(0, len(ids), 500):  # within SQLite's bound variables
        for n in settled(read(start, now + NOTIFIED_AHEAD_S, alert_ids=ids[i:i + 500])):
            out.setdefault(n.alert_id, []).append(n)
    return out


def _unknown_silenced_node(store: Any, matchers: Any) -> str:
    """The warning for a silence of ``node=X`` where X sent no data in the last week and
    has no open alert: a typo (it names the near ones) mutes nothing while the real node
    keeps pages coming; "" otherwise. Only a warning: a node not reporting yet (a new rack,
    back from RMA) is silenced before it joins, as automation does."""
    from fleetwatch.silencing import named_node, unknown_node

    node = named_node(matchers)
    if node is None or any(a.node == node for a in store.alerts()):
        return ""
    said = unknown_node(node, _nodes_seen(store, time.time()))
    return said + ("" if not said or said.endswith("?") else ".")


def _unknown_cluster(store: Any, cluster: str, now: float) -> str:
    """A hint when ``cluster`` sent nothing to the store in the last week, else ""."""
    from fleetwatch.pipeline.stored_nodes import SEEN_METRICS

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
    from fleetwatch.pipeline.stored_nodes import last_seen

    return sorted({name for _, name in last_seen(store, now - 7 * 86400)})


def cmd_ack(config: Config, args: argparse.Namespace) -> int:
    from fleetwatch.silencing import (
        SilenceError,
        SilenceNotFound,
        acknowledge,
        comment_dropped,
    )
    from fleetwatch.wiring import open_store

    missing = missing_store(config)
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
    dropped = comment_dropped(store, [args.comment], "acknowledgement")
    if dropped:
        print(f"fleetwatch ack: {dropped}", file=sys.stderr)
    return EXIT_OK

"""The arguments of the commands that handle alerts from the store: ``silence``,
``alerts``, ``timeline`` and ``ack`` (``fleetwatch.cli_args`` builds the rest of the
command line and adds these)."""

from __future__ import annotations

import argparse
import os

from fleetwatch.cli_types import duration, look_back


def add_alert_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``silence``, ``alerts``, ``timeline`` and ``ack`` to the subcommands ``sub``."""
    si = sub.add_parser("silence", help="add, list or expire silences of alert notifications",
                        description="Silences mute the notifications (Alertmanager, webhook) of "
                        "the alerts they match, for a time; the alerts themselves are still "
                        "raised and stored. Kept in the store; processors read them again "
                        "every alerts.silence_reload_s (5 s by default), so a silence added or "
                        "expired acts within that.")
    si.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")
    si_sub = si.add_subparsers(dest="action", required=True, metavar="ACTION")
    si_add = si_sub.add_parser("add", help="add a silence; prints its id (its matchers and "
                               "window on stderr)")
    si_add.add_argument("matchers", nargs="+", metavar="MATCHER",
                        help="LABEL=VALUE, LABEL!=VALUE, LABEL=~REGEX or LABEL!~REGEX; labels: "
                             "rule, severity, cluster, rack, node, device, scope; a value is "
                             "never empty (LABEL=~^$ matches an empty label)")
    si_add.add_argument("--for", dest="duration", type=duration, default=None, metavar="DUR",
                        help="how long, with its unit: 30m, 2h, 1d (default 1h; or --until)")
    si_add.add_argument("--start", metavar="WHEN",
                        help="when it starts, for a maintenance window ahead: a date and time "
                        "(2026-11-28 02:00, or ISO 8601 with an offset, 2026-11-28T02:00+01:00); "
                        "one without an offset is in --tz (UTC by default), as timeline "
                        "--since reads it. Default now; one up to a minute past is now, "
                        "further back is refused. Until it starts it is listed as pending and "
                        "mutes nothing; Alertmanager's copy starts then too")
    si_add.add_argument("--until", metavar="WHEN",
                        help="when it ends, as --start (instead of --for); after --start")
    si_add.add_argument("--tz", default="UTC", metavar="ZONE",
                        help="IANA time zone of a --start/--until without an offset, e.g. "
                        "Europe/Berlin (default UTC)")
    si_add.add_argument("--by", default=os.environ.get("USER", ""), help="who (default $USER)")
    si_add.add_argument("--comment", default="", help="why")
    si_list = si_sub.add_parser("list", help="silences in force now and those to come, "
                                "marked pending (--all: every one)")
    si_list.add_argument("--all", action="store_true",
                         help="every silence, expired ones too (default: those in force now "
                         "and those not started yet)")
    si_exp = si_sub.add_parser("expire", help="end a silence now")
    si_exp.add_argument("id", help="the silence's id, as silence add printed it and silence "
                        "list shows it")
    si_imp = si_sub.add_parser("import", help="carry the silences in force and the "
                               "acknowledgements of open alerts from another store (the SQLite "
                               "file used before store.kind changed)")
    si_imp.add_argument("--from", dest="source", required=True, metavar="OLD.db",
                        help="the SQLite store to read them from")
    for action in (si_add, si_list, si_exp, si_imp):
        # Also after the action, as `alerts --store` and `ack --store` take it. SUPPRESS: a
        # subparser's own default would overwrite a --store given before the action.
        action.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS,
                            help="embedded store file (store.path)")

    al = sub.add_parser("alerts", help="list the open alerts: where, since when, evidence, "
                        "action, and ids for ack",
                        description="The alerts the processors keep in the store: firing, then "
                        "pending; critical first; the oldest first. Each says where, since when, "
                        "what, the values that raised it, what to do, and why it is not being "
                        "notified (silenced, inhibited by a node or rack alert, acknowledged).")
    al.add_argument("--since", type=look_back, metavar="DUR",
                    help="also the alerts resolved in the last DUR, e.g. 24h")
    al.add_argument("--node", help="only this node's alerts (of every cluster, without "
                    "--cluster)")
    al.add_argument("--cluster", help="only this cluster's alerts (empty: every cluster)")
    al.add_argument("--json", action="store_true", help="one JSON object per alert and line")
    al.add_argument("--short", action="store_true",
                    help="a line per rule, then each alert's heading and id only")
    al.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")

    tl = sub.add_parser("timeline", help="what happened, in time order, for a postmortem: "
                        "alerts, notifications, acks, silences, events",
                        description="One time-ordered list over a window: each alert's "
                        "transitions (pending, firing, resolved), what was notified at each "
                        "sink (sent, or muted and by what, as recorded at the time), "
                        "acknowledgements and silences (who, when, why), the devices' events "
                        "(XIDs, a GPU lost or back, a node silent or back, jobs starting and "
                        "ending) and the faults a simulator injected.")
    tl.add_argument("--since", default="24h", metavar="WHEN",
                    help="from: a duration before now (2h, 7d) or a date and time "
                    "(2026-11-27 16:30, in --tz; or ISO 8601 with an offset); default 24h")
    tl.add_argument("--until", metavar="WHEN", help="to, as --since (default: now)")
    tl.add_argument("--cluster", help="only this cluster")
    tl.add_argument("--rack", help="only this rack")
    tl.add_argument("--node", help="only this node")
    tl.add_argument("--job", help="only this job: its GPUs and nodes while it ran (from the "
                    "store's job_start/job_end events)")
    tl.add_argument("--tz", default="UTC", metavar="ZONE",
                    help="IANA time zone the times are written in, e.g. Europe/Berlin "
                    "(default UTC)")
    tl.add_argument("--pending-cleared", action="store_true",
                    help="also the alerts that cleared while pending, never fired (shown as "
                    "pending, then pending cleared); left out by default, and counted")
    tl.add_argument("--fault-hours", action="store_true",
                    help="instead: the GPU-hours each job (and user) spent under firing fault "
                    "alerts (warning, critical), per rule and in all, from the store's job "
                    "events and energy ledger")
    fmt = tl.add_mutually_exclusive_group()
    fmt.add_argument("--json", dest="format", action="store_const", const="json",
                     help="one JSON object per entry and line")
    fmt.add_argument("--csv", dest="format", action="store_const", const="csv",
                     help="CSV with a header row")
    tl.set_defaults(format="text")
    tl.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")

    ack = sub.add_parser("ack", help="acknowledge an open alert: no repeat notifications until "
                         "it resolves",
                         description="Acknowledge an open alert: its notifications are not "
                         "repeated until it resolves; fleetwatch alerts still lists it, marked "
                         "acknowledged.")
    ack.add_argument("alert_id", metavar="ALERT_ID",
                     help="the alert's id, as fleetwatch alerts lists it")
    ack.add_argument("--by", default=os.environ.get("USER", ""), help="who (default $USER)")
    ack.add_argument("--comment", default="", help="why, kept with the acknowledgement")
    ack.add_argument("--store", metavar="PATH", help="embedded store file (store.path)")

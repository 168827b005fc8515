"""Environment variables that look like settings but are Kubernetes' service links.

Kubelet gives every pod, for each Service of its namespace (``enableServiceLinks``, true
by default), docker-link variables named after the Service: a Service
``fleetwatch-processor`` on port 9401 sets ``FLEETWATCH_PROCESSOR_SERVICE_HOST``,
``FLEETWATCH_PROCESSOR_PORT=tcp://10.96.0.7:9401`` and more. Read as settings, they
stopped every fleetwatch pod at its next start (unknown keys; ``FLEETWATCH_DASHBOARD_PORT``
even a real key given a URL). Only variables of that exact shape, name and value, are set
aside: a real setting of the same name (``FLEETWATCH_DASHBOARD_PORT=8050``) is still read.
Pure: no I/O.
"""

from __future__ import annotations

import re

_HOST = r"[0-9A-Fa-f.:]+"  # a ClusterIP: IPv4 or IPv6
_PROTO = r"(?:TCP|UDP|SCTP)"
_SHAPES = (  # (the name's ending after the Service's name, the value's shape)
    (re.compile(r"SERVICE_HOST"), re.compile(_HOST)),
    (re.compile(r"SERVICE_PORT(?:_[A-Z0-9_]+)?"), re.compile(r"\d{1,5}")),
    (re.compile(r"PORT"), re.compile(rf"(?i:tcp|udp|sctp)://\[?{_HOST}\]?:\d{{1,5}}")),
    (re.compile(rf"PORT_\d{{1,5}}_{_PROTO}"),
     re.compile(rf"(?i:tcp|udp|sctp)://\[?{_HOST}\]?:\d{{1,5}}")),
    (re.compile(rf"PORT_\d{{1,5}}_{_PROTO}_PROTO"), re.compile(r"(?i:tcp|udp|sctp)")),
    (re.compile(rf"PORT_\d{{1,5}}_{_PROTO}_PORT"), re.compile(r"\d{1,5}")),
    (re.compile(rf"PORT_\d{{1,5}}_{_PROTO}_ADDR"), re.compile(_HOST)),
)


def service_link(name: str, value: str, prefix: str) -> bool:
    """Whether ``name=value`` (``name`` starting with ``prefix``) is a variable kubelet sets
    for a Service named ``prefix`` or ``prefix`` and more (``fleetwatch``,
    ``fleetwatch-processor``), not a setting."""
    rest = name[len(prefix):]
    for ending, shape in _SHAPES:
        for start in _starts(rest):
            if ending.fullmatch(rest, start) and shape.fullmatch(value):
                return True
    return False


def _starts(rest: str) -> list[int]:
    """Where the part after the Service's name may start: at once (a Service named
    ``fleetwatch``), or after any ``_`` (``fleetwatch-processor``: ``PROCESSOR_``)."""
    return [0, *(i + 1 for i, c in enumerate(rest) if c == "_")]

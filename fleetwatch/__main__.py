"""``python -m fleetwatch``: the ``fleetwatch`` command, where its script is not on PATH."""

from fleetwatch.cli import main

raise SystemExit(main())

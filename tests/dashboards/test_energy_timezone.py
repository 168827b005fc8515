"""The energy page's Today, This month and projection in energy.timezone's calendar."""

from __future__ import annotations

import pytest

from fleetwatch.dashboards import energy
from fleetwatch.dashboards.energy_data import read_energy
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.test_data import text_of
from tests.energy.test_report_timezone import model, row, utc


def test_the_energy_page_today_month_and_projection_follow_the_zone(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    # 23:00, 00:00 and 01:00 in Berlin: February's last hour, then March's first two.
    store.write_energy([row(utc(2026, 2, 28, 22), 5.0), row(utc(2026, 2, 28, 23), 1.0),
                        row(utc(2026, 3, 1, 0), 2.0, 1800.0)], [])
    now = utc(2026, 3, 1, 0, 30)  # 01:30 on 1 March in Berlin
    berlin = read_energy(store, model("Europe/Berlin"), now - 86400, now, now)
    assert (berlin.today_kwh, berlin.month_kwh) == (pytest.approx(3.0), pytest.approx(3.0))
    # 3 kWh in the 1.5 h measured, over Berlin's 743-hour March.
    assert berlin.month_projection_kg == pytest.approx(3.0 * 0.4 / 1.5 * 743)
    tiles = {t.id: text_of(t) for t in energy.summary(berlin)}
    assert "since 00:00 Europe/Berlin" in tiles["energy-today"]
    plain = read_energy(store, model(), now - 86400, now, now)
    assert (plain.today_kwh, plain.month_kwh) == (pytest.approx(2.0), pytest.approx(2.0))
    assert "since 00:00 UTC" in {t.id: text_of(t) for t in energy.summary(plain)}[
        "energy-today"]

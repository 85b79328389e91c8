"""The overload profile's series: backlog and work per fire over time, against hand
counts on a synthetic run; the figure appears only for a run offered more than it achieved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from reports.load import Run
from reports.plots import figure_plan, overload_profile, overloaded

ORIGIN = 1000.0


def run(fires: pd.DataFrame, samples: pd.DataFrame, offered: float = 10.0, achieved: float = 10.0) -> Run:
    return Run(
        path=Path("/runs/20261130-000000-x"),
        config={"scheduler": "x", "window": {"measure_start": ORIGIN, "measure_end": ORIGIN + 10}},
        summary={"offered_rate": offered, "achieved_rate": achieved},
        fires=fires,
        samples=samples,
        label="x",
    )


def samples(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["t", "scope", "metric", "value"])
    return df.assign(elapsed_s=df["t"] - ORIGIN)


def test_backlog_counts_fires_due_and_not_yet_delivered():
    # due at 0.5, 1.5, 2.5 s; delivered at 3.2, 3.4 and never
    fires = pd.DataFrame(
        {
            "timer_id": ["a", "b", "c"],
            "tenant_id": "t",
            "due_at": ORIGIN + np.array([0.5, 1.5, 2.5]),
            "armed_at": ORIGIN - 60.0,
            "fired_at": [ORIGIN + 3.2, ORIGIN + 3.4, np.nan],
        }
    )
    fires["lag_s"] = fires["fired_at"] - fires["due_at"]
    smp = samples([(ORIGIN + i, "run", "fires_per_s", 1.0) for i in range(0, 6)])
    b = run(fires, smp).backlog().set_index("elapsed_s")["value"]
    assert list(b.loc[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]) == [0.0, 1.0, 2.0, 3.0, 1.0, 1.0]


def test_work_per_fire_is_the_writes_between_samples_over_the_fires_between_them():
    # 10 fires/s throughout; row writes (summed over metrics and tables) grow 20, then 50 per second
    rows = []
    writes = [0.0, 20.0, 40.0, 90.0, 140.0]
    for i, w in enumerate(writes):
        t = ORIGIN + i
        rows += [
            (t, "run", "fires_per_s", 10.0),
            (t, "s.trigger", "n_tup_upd", w * 0.5),
            (t, "s.trigger", "n_tup_ins", w * 0.25),
            (t, "s.index_only", "n_tup_del", w * 0.25),
        ]
    w = run(pd.DataFrame(), samples(rows)).work_per_fire(("n_tup_ins", "n_tup_upd", "n_tup_del"))
    assert list(np.round(w["value"], 6)) == [2.0, 2.0, 5.0, 5.0]


def test_the_overload_figure_only_for_an_overloaded_run():
    quiet = run(pd.DataFrame(), pd.DataFrame(), offered=100.0, achieved=99.0)
    busy = run(pd.DataFrame(), pd.DataFrame(), offered=100.0, achieved=60.0)
    assert not overloaded(quiet) and overloaded(busy)
    assert "overload" not in [key for _, key, *_ in figure_plan([quiet])]
    *_, (_, key, _, _, render) = figure_plan([quiet, busy])
    assert key == "overload" and render is overload_profile
    assert render([quiet, busy])[:8] == b"\x89PNG\r\n\x1a\n"  # it renders, even with nothing recorded

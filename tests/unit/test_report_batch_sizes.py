"""The batch-size histogram: window deltas of a backend's cumulative batch counters, and the
figure that appears only for runs that have them."""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd

from metrics import accounting
from reports.load import Run
from reports.plots import FIGURE_SPECS, figure_plan

PNG = b"\x89PNG\r\n\x1a\n"


def samples(rows: dict[float, dict[str, float]]) -> pd.DataFrame:
    """Long-form samples from {t: {gauge: value}} (run scope, as the sampler writes stats())."""
    out = [(t, t - 100.0, "run", f"backend.{name}", v) for t, gauges in rows.items() for name, v in gauges.items()]
    out += [(t, t - 100.0, "run", "fires_per_s", 1.0) for t in rows]
    return pd.DataFrame(out, columns=["t", "elapsed_s", "scope", "metric", "value"])


def run(label: str, df: pd.DataFrame, start: float = 102.5, end: float = 107.5) -> Run:
    return Run(
        path=Path(f"/runs/{label}"),
        config={"window": {"measure_start": start, "measure_end": end}},
        summary={"scheduler": label},
        fires=pd.DataFrame(),
        samples=df,
        label=label,
    )


COUNTS = {  # cumulative, as a backend's BatchSizes reports them
    101.0: {
        "batches": 1,
        "batched_timers": 240,
        "batch_size_bin_250": 1,
        "batches_closed_max_lag": 1,
        "batches_bin_width": 25,
    },
    102.0: {
        "batches": 2,
        "batched_timers": 480,
        "batch_size_bin_250": 2,
        "batches_closed_max_lag": 2,
        "batches_bin_width": 25,
    },
    104.0: {
        "batches": 4,
        "batched_timers": 1280,
        "batch_size_bin_250": 2,
        "batch_size_bin_800": 2,
        "batches_closed_max_lag": 2,
        "batches_closed_full": 2,
        "batches_bin_width": 25,
    },
    107.0: {
        "batches": 5,
        "batched_timers": 1490,
        "batch_size_bin_225": 1,
        "batch_size_bin_250": 2,
        "batch_size_bin_800": 2,
        "batches_closed_max_lag": 3,
        "batches_closed_full": 2,
        "batches_bin_width": 25,
    },
    109.0: {
        "batches": 9,
        "batched_timers": 2000,
        "batch_size_bin_225": 5,
        "batch_size_bin_250": 2,
        "batch_size_bin_800": 2,
        "batches_closed_max_lag": 7,
        "batches_closed_full": 2,
        "batches_bin_width": 25,
    },
}


def test_window_histogram_is_the_difference_of_the_samples_at_its_edges():
    b = accounting.batch_sizes_in_window(samples(COUNTS), 102.5, 107.5)
    # at 102.5 the last sample is t=102; at 107.5 it is t=107; a bin first seen later starts from 0
    assert b == {
        "batches": 3.0,
        "timers": 1010.0,
        "mean": 1010.0 / 3,
        "bins": {225: 1.0, 800: 2.0},
        "closed": {"full": 2.0, "max_lag": 1.0},
        "bin_width": 25.0,
    }


def test_runs_without_batch_counters_have_no_histogram():
    assert accounting.batch_sizes_in_window(samples({101.0: {"shards": 4}}), 100, 110) is None
    assert (
        accounting.batch_sizes_in_window(pd.DataFrame(columns=["t", "elapsed_s", "scope", "metric", "value"]), 0, 1)
        is None
    )


def test_the_figure_appears_after_the_fixed_ones_only_when_a_run_has_batches():
    plain = run("memory", samples({101.0: {"claimed_timers": 3}}))
    with_batches = run("temporal_shards", samples(COUNTS))
    assert [key for _, key, *_ in figure_plan([plain])] == [key for key, *_ in FIGURE_SPECS]
    plan = figure_plan([plain, with_batches])
    assert [key for _, key, *_ in plan] == [key for key, *_ in FIGURE_SPECS] + ["batch_sizes"]
    number, *_, render = plan[-1]
    png = render([plain, with_batches])
    assert number == len(FIGURE_SPECS) + 1 and png[:8] == PNG
    assert base64.b64encode(png)  # embeddable like the others

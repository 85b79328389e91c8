"""The harness's own ceiling on a workload: the memory scheduler, which has no store,
run on the same workload shape at a multiple of the rate being measured.

Every figure a report shows is the backend's and the harness's together: the load generator, the
simulated provider and the recorder share one Python process with the claim loops. A memory run
at ``factor`` times the rate says whether that process had room: if it holds ``factor`` x R, a
backend measured at R is measured, not the harness; if it does not, its achieved rate is the
harness's ceiling and any backend figure above a third of it may be the harness's
(:mod:`reports.harness_ceiling` flags it). The run is an ordinary ``bench run`` directory marked
``calibration`` in its ``config.json`` (``--calibrates R``), so a report finds it beside the runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.child import ChildRun, bench_run

FACTOR = 3.0  # the harness should stay at least 3x above the fastest backend it measures
DURATION_S = 30.0  # a short window: the question is "did it hold", not a precise figure
LABEL = "harness ceiling"


def calibration_args(rate_per_s: float, factor: float, duration_s: float) -> list[str]:
    """The ``bench run --scheduler memory`` arguments of a calibration for runs at ``rate_per_s``
    (after the workload's own arguments: the later flag wins)."""
    return [
        "--rate",
        f"{rate_per_s * factor:g}/s",
        "--duration",
        f"{duration_s:g}s",
        "--calibrates",
        f"{rate_per_s:g}",
        "--label",
        LABEL,
    ]


def calibrate(
    workload_args: list[str],
    rate_per_s: float,
    out_dir: Path,
    echo: Callable[[str], None],
    factor: float = FACTOR,
    duration_s: float = DURATION_S,
    label: str = "",
) -> ChildRun:
    """Run the calibration as a child ``bench run`` (its own process, like every compared run)."""
    return bench_run(
        "memory",
        out_dir,
        workload_args + calibration_args(rate_per_s, factor, duration_s),
        echo,
        label=label or "[harness ceiling] ",
    )

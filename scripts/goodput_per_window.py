"""Goodput of one run over fixed steps of its measured window and of the drain after it (the overload
targets: "goodput >= 90% of the maximum for the whole window", "drains at no less than that rate").

    .venv/bin/python scripts/goodput_per_window.py runs/<run dir> [--step 5]

Counts the fires delivered (``fired_at`` in ``fires.parquet``) in each ``--step`` seconds from the
window's start (``config.json`` ``window``) to its end, then on past it until the last fire, and
prints the lowest, mean and highest rate in the window and every step of the drain. The report's
overload profile plots the same goodput from the sampler's per-second rate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metrics import rundir  # noqa: E402


def rates(fired: np.ndarray, start: float, end: float, step: float) -> np.ndarray:
    edges = np.arange(start, end + 1e-9, step)
    if len(edges) < 2:
        return np.zeros(0)
    counts, _ = np.histogram(fired, edges)
    return counts / step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--step", type=float, default=5.0, help="seconds per step (default 5)")
    a = ap.parse_args()
    window = rundir.read_config(a.run_dir).get("window") or {}
    start, end = float(window["measure_start"]), float(window["measure_end"])
    fired = rundir.read_fires(a.run_dir).column("fired_at").to_numpy(zero_copy_only=False)
    fired = fired[~np.isnan(fired)]
    inside = rates(fired, start, end, a.step)
    print(
        f"window, per {a.step:g} s: lowest {inside.min():,.0f}/s, mean {inside.mean():,.0f}/s, "
        f"highest {inside.max():,.0f}/s"
    )
    after = fired[fired >= end]
    if len(after):
        drain = rates(after, end, float(after.max()) + a.step, a.step)
        print(f"drain, per {a.step:g} s: " + ", ".join(f"{r:,.0f}" for r in drain) + " /s")


if __name__ == "__main__":
    main()

"""Finding and reading run directories for a report.

Layering: a report reads run directories only; it never imports a scheduler. A run
directory is written by ``bench run`` (``metrics/``): ``config.json``, ``fires.parquet``,
``samples.parquet``, ``summary.json`` and, for a migration dry-run, ``migration.json``.
"""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from metrics import accounting, rundir
from metrics.rundir import TOAST_SUFFIX  # scope of a table's TOAST relation: "schema.table#toast"
from reports import fmt
from reports.errors import ReportError


@dataclass
class Run:
    """One run directory, read once. ``label`` is unique within a report (set by :func:`load_runs`)."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    fires: pd.DataFrame  # fires.parquet, every column
    samples: pd.DataFrame  # samples.parquet, long form: t, elapsed_s, scope, metric, value
    migration: dict[str, Any] | None = None  # migration.json of a dry-run, if present
    statements: pd.DataFrame | None = None  # statements.parquet (None: not recorded, see summary's unavailable)
    problems: list[str] = field(default_factory=list)  # files missing or unreadable
    label: str = ""
    # the harness's own ceiling on this run's workload (reports.harness_ceiling): the memory
    # calibration run that covers it, found beside the run; None when there is none
    calibration: Run | None = None

    @property
    def is_calibration(self) -> bool:
        """A memory run made by ``bench calibrate``: the harness's ceiling, not a design to compare."""
        return bool(self.config.get("calibration"))

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def given_label(self) -> str | None:
        """The name ``bench run --label`` gave the run (``pg_queue, tuned``), if any."""
        return self.config.get("label") or None

    @property
    def scheduler(self) -> str:
        return str(self.summary.get("scheduler") or self.config.get("scheduler") or self.path.name.rsplit("-", 1)[-1])

    @property
    def environment(self) -> dict[str, Any]:
        return self.config.get("environment") or {}

    @property
    def workload(self) -> dict[str, Any]:
        return self.config.get("workload") or {}

    @property
    def window(self) -> dict[str, Any]:
        return self.config.get("window") or {}

    @property
    def warmup_s(self) -> float:
        """Where the measured window starts, in the samples' ``elapsed_s`` (seconds since the
        sampler's origin), so figures can shade the warm-up."""
        s = self.samples
        start = self.window.get("measure_start")
        if start is not None and not s.empty:
            origin = float((s["t"] - s["elapsed_s"]).median())
            return max(0.0, float(start) - origin)
        return float(self.summary.get("warmup_s") or self.workload.get("warmup_s") or 0.0)

    @property
    def due_fires(self) -> pd.DataFrame:
        """One row per ``(timer_id, due_at)`` key of the whole run: its first delivery, or its
        undelivered row, with ``due_eff`` = max(due_at, armed_at), when it became due (the
        accounting of :func:`metrics.accounting.fire_accounting`)."""
        f = self.fires
        if f.empty or "due_at" not in f:
            return pd.DataFrame({"timer_id": [], "due_eff": [], "fired_at": [], "lag_s": []})
        return accounting.first_deliveries(f)

    @property
    def measured_lags_ms(self) -> pd.Series:
        """Lag of every fire due in the measured window, in milliseconds: the population of the
        summary's lag percentiles (a fire never delivered is ``inf``: infinitely late)."""
        d = self.due_fires
        start, end = self.window.get("measure_start"), self.window.get("measure_end")
        if d.empty or start is None or end is None:
            return pd.Series(dtype="float64")
        sel = (d["due_eff"] >= float(start)) & (d["due_eff"] < float(end))
        lag = d.loc[sel, "lag_s"].astype("float64") * 1000.0
        return lag.where(d.loc[sel, "fired_at"].notna(), np.inf)

    def offered_per_s(self) -> pd.DataFrame:
        """``elapsed_s, value``: fires that became due per second (the offered load), from the fire
        log, on the samples' clock; beside the sampled achieved rate in the fire-rate figure."""
        d = self.due_fires
        s = self.samples
        if d.empty or s.empty:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        origin = float((s["t"] - s["elapsed_s"]).median())
        second = np.floor(d["due_eff"].to_numpy() - origin)
        second = second[(second >= 0) & np.isfinite(second)]
        if second.size == 0:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        counts = np.bincount(second.astype(np.int64))
        return pd.DataFrame({"elapsed_s": np.arange(len(counts)) + 1.0, "value": counts.astype(float)})

    def backlog(self) -> pd.DataFrame:
        """``elapsed_s, value``: fires due and not yet delivered, each second (the backlog), from
        the fire log on the samples' clock; a fire never delivered stays in it."""
        d = self.due_fires
        s = self.samples
        if d.empty or s.empty:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        origin = float((s["t"] - s["elapsed_s"]).median())
        due = np.sort(d["due_eff"].to_numpy(float) - origin)
        fired = np.sort(d["fired_at"].dropna().to_numpy(float) - origin)
        end = float(s["elapsed_s"].max())
        t = np.arange(0.0, end + 1.0, 1.0)
        value = np.searchsorted(due, t, side="right") - np.searchsorted(fired, t, side="right")
        return pd.DataFrame({"elapsed_s": t, "value": np.maximum(value, 0).astype(float)})

    def work_per_fire(self, metrics: tuple[str, ...]) -> pd.DataFrame:
        """``elapsed_s, value``: the change of the summed relation ``metrics`` (e.g. row writes) per
        fire delivered, sample to sample: the work a fire costs as time goes on."""
        s = self.samples
        if s.empty:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        parts = [self.relation_metric(m, toast=False) for m in metrics]
        parts = [p.set_index("elapsed_s")["value"] for p in parts if len(p)]
        if not parts:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        total = pd.concat(parts, axis=1).sum(axis=1).sort_index()
        rate = self.run_metric("fires_per_s").set_index("elapsed_s")["value"].sort_index()
        work = total.diff()
        dt = pd.Series(total.index, index=total.index).diff()
        fires = (
            pd.Series(np.interp(total.index, rate.index, rate.to_numpy()), index=total.index) * dt
            if len(rate)
            else None
        )
        if fires is None:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        per = (work / fires.where(fires > 0)).dropna()
        return pd.DataFrame({"elapsed_s": per.index.to_numpy(float), "value": per.to_numpy(float)})

    def run_metric(self, metric: str) -> pd.DataFrame:
        """``elapsed_s, value`` of one run-scope metric (``fires_per_s``, ``lag_p99_ms``, ...)."""
        s = self.samples
        if s.empty:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        m = s[(s["scope"] == "run") & (s["metric"] == metric)]
        return m[["elapsed_s", "value"]].sort_values("elapsed_s")

    def relation_metric(self, metric: str, toast: bool) -> pd.DataFrame:
        """``elapsed_s, value``: one relation metric summed over the run's tables (``toast``
        False) or over their TOAST tables (True). Empty when the run has no tables (memory)."""
        s = self.samples
        if s.empty:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        rel = s[s["scope"].map(rundir.is_relation_scope) & (s["metric"] == metric)]
        is_toast = rel["scope"].str.endswith(TOAST_SUFFIX)
        rel = rel[is_toast] if toast else rel[~is_toast]
        if rel.empty:
            return pd.DataFrame({"elapsed_s": [], "value": []})
        # One sample per second per relation; t groups one sampling pass across relations.
        out = rel.groupby("t", as_index=False).agg(elapsed_s=("elapsed_s", "min"), value=("value", "sum"))
        return out[["elapsed_s", "value"]].sort_values("elapsed_s")

    def batch_sizes(self) -> dict[str, Any] | None:
        """The batches the backend handed to its processors in the measured window, from its
        batch-size gauges (:func:`metrics.accounting.batch_sizes_in_window`); None without them."""
        start, end = self.window.get("measure_start"), self.window.get("measure_end")
        if start is None or end is None or self.samples.empty:
            return None
        return accounting.batch_sizes_in_window(self.samples, float(start), float(end))

    def has_relations(self) -> bool:
        return not self.samples.empty and bool(self.samples["scope"].map(rundir.is_relation_scope).any())


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).exists() for f in (rundir.SUMMARY, rundir.CONFIG))


def expand_run_paths(args: list[str] | tuple[str, ...]) -> list[Path]:
    """Run directories from arguments that are run directories, parent directories or globs.

    Order is kept as given (a parent's or a glob's runs sorted by name, that is by start time),
    duplicates are dropped, and an argument that names no run is a usage error.
    """
    out: list[Path] = []
    for arg in args:
        matches = sorted(glob.glob(arg)) if any(c in arg for c in "*?[") else [arg]
        found: list[Path] = []
        for m in matches:
            p = Path(m)
            if _is_run_dir(p):
                found.append(p)
            elif p.is_dir():
                found.extend(sorted(c for c in p.iterdir() if _is_run_dir(c)))
        if not found:
            raise ReportError(
                f"no run directory at {arg!r}; give run directories (holding summary.json), "
                "a directory of runs such as runs/, or a glob such as 'runs/*-pg_*'"
            )
        out.extend(found)
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _read(what: str, reader, path: Path, problems: list[str], empty):
    """``reader(path)``, or ``empty`` with one short line in ``problems``: the same failure (a
    file that cannot be read makes everything recomputed from it fail too) is said once."""
    try:
        return reader(path)
    except FileNotFoundError:
        problems.append(f"{what} missing")
    except Exception as exc:  # a file damaged by something other than the run: say so, keep the rest
        cause = fmt.one_line(f"{type(exc).__name__}: {exc}".replace(f"{path}/", ""), limit=120)
        if not any(cause in p for p in problems):
            problems.append(f"{what} unreadable ({cause})")
    return empty


def _has_log(path: Path, name: str) -> bool:
    """The compacted file or, for a run that did not finish, any closed segment of it."""
    if (path / name).exists():
        return True
    dirs = [path / rundir.SEGMENTS_DIR] + ([path / rundir.NODES_DIR] if name == rundir.FIRES else [])
    stem = name.split(".")[0]
    return any(d.is_dir() and any(d.glob(f"{stem}*.parquet")) for d in dirs)


def read_run(path: Path) -> Run:
    """Read one run with ``metrics.rundir``'s readers. A run without ``summary.json`` (killed
    before it could write one, or still running) is read from the segments it closed, its
    summary recomputed and marked incomplete ("interrupted at T+xx s"), so its figures are shown
    rather than dropped."""
    problems: list[str] = []
    config = _read(rundir.CONFIG, rundir.read_config, path, problems, {})
    fires = pd.DataFrame()
    samples = pd.DataFrame()
    for name, reader in ((rundir.FIRES, rundir.read_fires), (rundir.SAMPLES, rundir.read_samples)):
        if not _has_log(path, name):
            problems.append(f"{name} missing")
            continue
        table = _read(name, lambda p, r=reader: r(p).to_pandas(), path, problems, pd.DataFrame())
        if name == rundir.FIRES:
            fires = table
        else:
            samples = table
    state = rundir.run_state(path)
    summary: dict[str, Any] = {}
    if state == "finished":
        summary = _read(rundir.SUMMARY, rundir.read_summary, path, problems, {})
    if not summary and config:

        def recompute(p: Path) -> dict[str, Any]:
            if state != "finished":
                return accounting.interrupted_summary(p, state)
            return accounting.compute_summary(
                p, complete=False, incomplete_reason=f"{rundir.SUMMARY} unreadable; recomputed from the run's files"
            )

        summary = _read("recomputed summary", recompute, path, problems, {})
    if not summary:
        summary = {"complete": False, "incomplete_reason": f"{state}: no readable {rundir.SUMMARY}"}
    statements = None
    if (path / rundir.STATEMENTS).exists():
        statements = _read(rundir.STATEMENTS, lambda p: rundir.read_statements(p).to_pandas(), path, problems, None)
    migration = None
    if (path / rundir.MIGRATION).exists():
        migration = _read(
            rundir.MIGRATION, lambda p: json.loads((p / rundir.MIGRATION).read_text()), path, problems, None
        )
    return Run(
        path=path,
        config=config,
        summary=summary,
        fires=fires,
        samples=samples,
        migration=migration,
        statements=statements,
        problems=problems,
    )


def load_runs(args: list[str] | tuple[str, ...]) -> list[Run]:
    """Read every run the arguments name and give each a label unique in the report: the
    scheduler name, plus the run's start time when one scheduler appears more than once."""
    runs = [read_run(p) for p in expand_run_paths(args)]
    counts: dict[str, int] = {}
    for r in runs:
        name = r.given_label or r.scheduler
        counts[name] = counts.get(name, 0) + 1
    used: set[str] = set()
    for r in runs:
        label = r.given_label or r.scheduler
        if counts[label] > 1:
            stamp = r.name.split("-")[1] if r.name.count("-") >= 2 else r.name
            label = f"{label} @{stamp}"
        base, n = label, 2
        while label in used:
            label, n = f"{base} ({n})", n + 1
        used.add(label)
        r.label = label
    return runs


def pick_baseline(runs: list[Run], baseline: str | None) -> int:
    """Index of the baseline run: the first by default, else the run whose directory, name or
    label matches ``baseline``."""
    if baseline is None:
        return 0
    want = Path(baseline)
    for i, r in enumerate(runs):
        if want.exists() and want.resolve() == r.path.resolve():
            return i
    for i, r in enumerate(runs):
        if baseline in (r.name, r.label):
            return i
    matches = [i for i, r in enumerate(runs) if r.scheduler == baseline]
    if len(matches) == 1:
        return matches[0]
    choices = ", ".join(r.label for r in runs)
    raise ReportError(f"--baseline {baseline!r} names none of the runs in this report; choose one of: {choices}")


def baseline_side(runs: list[Run], baseline: str) -> list[int]:
    """Every run ``baseline`` names, for the regression gate's baseline side: a run directory, a
    directory holding runs, a run's name or label, or a scheduler name (all its runs)."""
    want = Path(baseline)
    side = []
    for i, r in enumerate(runs):
        path = r.path.resolve()
        if want.exists() and (want.resolve() == path or want.resolve() in path.parents):
            side.append(i)
        elif baseline in (r.name, r.label, r.scheduler):
            side.append(i)
    if not side:
        choices = ", ".join(r.label for r in runs)
        raise ReportError(f"--baseline {baseline!r} names none of the runs in this report; choose one of: {choices}")
    return side

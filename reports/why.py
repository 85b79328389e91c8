"""The "why" section: when a comparison holds one of the Composio article's rejected alternatives
(``temporal_per_trigger``: a Temporal workflow per trigger; ``pg_partitioned``: the table split
in one database), what each design costs per fire beside the design the article chose, citing the
figures. The article's two arguments, as figures a team can check:

* per trigger, every fire is a workflow task, a timer and an activity dispatch of its own;
  timer shards fire a batch per poller workflow (workflow starts, activities and signals per
  fire from the backends' own counters, Temporal's persistence requests per fire from the
  server's metrics when they were scraped);
* smaller tables scan faster, but share one vacuum horizon: dead tuples under a held snapshot
  (``--fault hold-snapshot``) climb in every partition at once.

Shown only when an alternative is in the report; it reads run directories, never a scheduler.
"""

from __future__ import annotations

from typing import Any

from reports.decide import Block
from reports.load import Run

ALTERNATIVES = {
    "temporal_per_trigger": ("temporal_shards", "one Temporal workflow per trigger"),
    "pg_partitioned": ("pg_leased", "pg_leased's design split over partitions in one database"),
}


def _gauge_in_window(run: Run, name: str) -> float | None:
    """The last value of a ``backend.<name>`` gauge in the measured window."""
    s = run.samples
    if s.empty:
        return None
    m = s[(s["scope"] == "run") & (s["metric"] == f"backend.{name}")]
    end = run.window.get("measure_end")
    if end is not None:
        m = m[m["t"] <= float(end)]
    return None if m.empty else float(m.sort_values("t")["value"].iloc[-1])


def per_fire_figures(run: Run) -> dict[str, float | None]:
    s = run.summary
    pf = s.get("per_fire") or {}
    temporal = ((s.get("servers") or {}).get("temporal") or {}).get("per_fire") or {}
    out: dict[str, float | None] = {
        "Postgres row writes (heap + TOAST)": pf.get("row_writes"),
        "WAL bytes": pf.get("wal_bytes"),
        "Temporal persistence requests": temporal.get("persistence_requests"),
        "workflows started": _gauge_in_window(run, "workflows_started_per_fire"),
        "activities": _gauge_in_window(run, "activities_per_fire"),
        "signals": _gauge_in_window(run, "signals_per_fire"),
    }
    batches = run.batch_sizes()
    if batches and batches.get("timers"):
        # timer shards: one poller workflow and one activity per batch
        out["workflows started"] = out["workflows started"] or batches["batches"] / batches["timers"]
        out["activities"] = out["activities"] or batches["batches"] / batches["timers"]
    return out


def _hold_snapshot(run: Run) -> str | None:
    for f in run.summary.get("faults") or []:
        if f.get("kind") == "hold-snapshot":
            dead = f.get("dead_tuples_by_relation") or f.get("dead_tuples") or {}
            if isinstance(dead, dict) and dead:
                grew = sum(1 for v in dead.values() if (v or 0) > 0)
                return f"under hold-snapshot, dead tuples grew in {grew} of {len(dead)} relations"
            return "a hold-snapshot fault ran (see the dead-tuple figure)"
    return None


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def why_blocks(runs: list[Run]) -> list[Block]:
    present = {r.scheduler for r in runs}
    alternatives = [a for a in ALTERNATIVES if a in present]
    if not alternatives:
        return []
    figures = {r.label: per_fire_figures(r) for r in runs}
    names: list[str] = []
    for f in figures.values():
        names += [k for k, v in f.items() if k not in names and v is not None]
    out = [
        Block("h2", "Why the Composio article chose what it chose"),
        Block(
            "p",
            "The Composio article rejected a Temporal workflow per trigger and splitting the table within one "
            "database. What each design did per fire in these runs, beside the design the article chose:",
        ),
    ]
    if names:
        out.append(
            Block(
                "table",
                header=["per fire"] + [r.label for r in runs],
                rows=[[n] + [_fmt(figures[r.label].get(n)) for r in runs] for n in names],
            )
        )
    said = []
    by_name = {r.scheduler: r for r in runs}
    for alt in alternatives:
        chosen, what = ALTERNATIVES[alt]
        a = figures[by_name[alt].label]
        if chosen not in by_name:
            said.append(f"{alt} ({what}) ran without {chosen}, the design the article chose: add it to compare.")
            continue
        c = figures[by_name[chosen].label]
        parts = []
        for key in (
            "workflows started",
            "activities",
            "Temporal persistence requests",
            "Postgres row writes (heap + TOAST)",
            "WAL bytes",
        ):
            if a.get(key) and c.get(key):
                parts.append(f"{key} {_fmt(a[key])} against {_fmt(c[key])} ({a[key] / c[key]:.1f}x)")
        line = f"{alt} ({what}) per fire: " + ("; ".join(parts) if parts else "no figure both runs recorded") + "."
        ar, cr = by_name[alt].summary.get("achieved_rate"), by_name[chosen].summary.get("achieved_rate")
        if ar and cr:
            line += f" Achieved {ar:,.0f} against {cr:,.0f} fires/s."
        hold = _hold_snapshot(by_name[alt])
        if hold:
            line += f" {hold[0].upper()}{hold[1:]}: the shared vacuum horizon."
        said.append(line)
    out.append(Block("list", items=said))
    return out

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


def hold_snapshot_sentence(run: Run) -> str | None:
    """What the hold-snapshot faults of this run did to dead tuples, from the counts each fault
    read when it took and released its snapshot and the sampler's lowest count after the release
    (:mod:`metrics.faults`), one clause per fault; None for a run without one."""
    said = [_one_hold(f) for f in run.summary.get("faults") or [] if f.get("kind") == "hold-snapshot"]
    return "; ".join(said) if said else None


def _one_hold(f: dict[str, Any]) -> str:
    spec = f.get("spec", "hold-snapshot")
    if not f.get("fired"):
        return f"--fault {spec} did not fire ({f.get('note') or 'no reason recorded'}), so nothing was held"
    dead = f.get("dead_tuples")
    if not dead:
        return f"--fault {spec} held a snapshot, but recorded no dead-tuple counts to judge it by"
    grew = {r: (d["release"] or 0) - (d["start"] or 0) for r, d in dead.items() if d.get("release") is not None}
    up = {r: g for r, g in grew.items() if g > 0}
    held = (f.get("end") or 0) - (f.get("start") or 0)
    head = f"while --fault {spec} held a snapshot for {held:.1f} s"
    if not up:
        return f"{head}, dead tuples grew in none of {len(dead)} relations"
    total = sum(up.values())
    biggest = sorted(up, key=up.get, reverse=True)[:3]
    each = ", ".join(f"{r} {_count(dead[r]['start'])} to {_count(dead[r]['release'])}" for r in biggest)
    more = f" and {len(up) - len(biggest)} more" if len(up) > len(biggest) else ""
    out = f"{head}, dead tuples grew in {len(up)} of {len(dead)} relations, by {_count(total)} ({each}{more})"
    if len(up) == len(dead) > 1:
        out += ", every one at once: one vacuum horizon for them all"
    seen = {r: dead[r] for r in up if dead[r].get("lowest_after") is not None}
    if not seen:
        return out + "; no sample after the release shows whether vacuum removed them"
    removed = sum(max(0.0, dead[r]["release"] - d["lowest_after"]) for r, d in seen.items())
    when = max(d["lowest_after_s"] for d in seen.values())
    if removed <= 0:
        return out + "; vacuum removed none of them by the end of the run"
    growth = sum(up[r] for r in seen)
    share = "all of the growth" if removed >= growth else f"{removed / growth:.0%} of the growth"
    return (
        out + f"; after the release vacuum and pruning removed {share} (down by {_count(removed)}) within {when:.1f} s"
    )


def _count(v: Any) -> str:
    return "?" if v is None else f"{v:,.0f}"


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
        hold = hold_snapshot_sentence(by_name[alt])
        if hold:
            line += f" {hold[0].upper()}{hold[1:]}."
        said.append(line)
    out.append(Block("list", items=said))
    return out

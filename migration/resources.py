"""The resource side of a rehearsal: what each store paid, from the samples of its own relations."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def side_resources(run_dir: Path, scheduler) -> dict[str, Any]:
    """Per side, from the samples of its own relations: writes per fire, dead-tuple peaks.
    WAL is server-wide, so it cannot be split per side and is left out here."""
    from metrics import rundir
    from migration.dual import PRIMARY, SHADOW

    try:
        samples = rundir.read_samples(run_dir).to_pandas()
    except Exception:
        return {}
    out: dict[str, Any] = {}
    for side, sched in ((PRIMARY, scheduler.primary), (SHADOW, scheduler.shadow)):
        rels = set(sched.relations())
        if not rels:
            out[side] = {}
            continue
        fires = scheduler.dual.fires[side].count
        mine = samples[samples["scope"].str.replace(rundir.TOAST_SUFFIX, "", regex=False).isin(rels)]
        last = mine.sort_values("t").groupby(["scope", "metric"]).last()["value"]
        writes = sum(
            float(last.get((scope, m), 0.0))
            for scope in mine["scope"].unique()
            for m in ("n_tup_ins", "n_tup_upd", "n_tup_del")
        )
        dead = mine[mine["metric"] == "n_dead_tup"]
        heap = dead[~dead["scope"].str.endswith(rundir.TOAST_SUFFIX)].groupby("t")["value"].sum()
        toast = dead[dead["scope"].str.endswith(rundir.TOAST_SUFFIX)].groupby("t")["value"].sum()
        out[side] = {
            "scheduler": sched.name,
            "fires_seen": fires,
            "writes_per_fire": writes / fires if fires else None,
            "dead_peak": float(heap.max()) if len(heap) else None,
            "toast_dead_peak": float(toast.max()) if len(toast) else None,
        }
    return out

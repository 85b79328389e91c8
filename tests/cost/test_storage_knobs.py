"""Tuning parity: every Postgres design accepts the same storage and vacuum knobs
(schedulers.pg.STORAGE_OPTIONS) and they reach its tables' storage parameters."""

from __future__ import annotations

import psycopg
import pytest

from schedulers.base import REGISTRY, create, scheduler_class
from schedulers.pg import STORAGE_OPTIONS

PG_DESIGNS = sorted(n for n in REGISTRY if getattr(scheduler_class(n), "needs_postgres", False))
TUNED = {
    "fillfactor_pct": 70,
    "autovacuum_tuned": True,
    "autovacuum_scale_factor": 0.05,
    "autovacuum_threshold_rows": 321,
    "autovacuum_cost_delay_ms": 1,
}


def reloptions(dsn: str, schema: str) -> dict[str, dict[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchall()
    return {name: dict(o.split("=", 1) for o in (opts or [])) for name, opts in rows}


@pytest.mark.parametrize("name", PG_DESIGNS)
def test_every_postgres_design_accepts_the_storage_knobs(name):
    defaults = scheduler_class(name).default_options
    assert set(STORAGE_OPTIONS) <= set(defaults), f"{name} lacks {set(STORAGE_OPTIONS) - set(defaults)}"


@pytest.mark.parametrize("name", PG_DESIGNS)
async def test_the_knobs_reach_the_tables_and_untuned_means_the_servers_settings(name, make_ctx):
    cls = scheduler_class(name)
    ctx = make_ctx(cls)
    tuned = create(name, ctx, **{**cls.conformance_options, **TUNED})
    await tuned.setup()
    try:
        opts = reloptions(ctx.dsn, ctx.schema)
        churning = {t: o for t, o in opts.items() if "autovacuum_vacuum_scale_factor" in o}
        assert churning, f"{name}: no table got the autovacuum settings: {opts}"
        for table, o in churning.items():
            assert float(o["autovacuum_vacuum_scale_factor"]) == 0.05, (table, o)
            assert int(o["autovacuum_vacuum_threshold"]) == 321, (table, o)
            assert float(o["autovacuum_vacuum_cost_delay"]) == 1.0, (table, o)
        assert any(o.get("fillfactor") == "70" for o in churning.values()), opts
        # the same schema set up again untuned: the per-table settings go, the server's apply
        untuned = create(name, ctx, **{**cls.conformance_options, "autovacuum_tuned": False})
        await untuned.setup()
        await untuned.teardown(drop=False)
        assert not any("autovacuum_vacuum_scale_factor" in o for o in reloptions(ctx.dsn, ctx.schema).values())
    finally:
        await tuned.teardown(drop=True)

"""``bench migrate dry-run`` and ``bench migrate reconcile`` end to end: the CLI in a subprocess
against the real stores, judged from ``migration.json`` and the stores themselves."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import zlib
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from schedulers.base import StoreContext, Timer, create
from tests.conformance.helpers import RecordingProcessor, Runner

SHORT = ["--workload", "smoke", "--duration", "12s", "--warmup", "3s"]
STEPS = "dual-write,backfill,switch-execution@10s,stop-old-writes@16s,rollback@22s"
ALL_STEPS = ["--workload", "smoke", "--duration", "27s", "--warmup", "3s", "--steps", STEPS]
DAY_S = 86400.0


def dry_run(
    bench,
    tmp_path: Path,
    *args: str,
    register: str | None = None,
    env: dict | None = None,
) -> tuple[subprocess.CompletedProcess, dict, Path]:
    proc = bench("migrate", "dry-run", *args, "--out", str(tmp_path), timeout=300, register=register, env=env)
    dirs = sorted(tmp_path.glob("*-migrate-*"))
    assert dirs, f"no run directory; exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    migration = json.loads((dirs[-1] / "migration.json").read_text())
    return proc, migration, dirs[-1]


def assert_nothing_lost_or_doubled(m: dict, run_dir: Path) -> None:
    c = m["counts"]
    assert c["lost"] == 0 and c["duplicate_effects"] == 0 and c["executed_by_both"] == 0, (c, m["samples"])
    for st in m["steps"]:
        assert st["started_s"] is not None, f"step {st['text']} never ran"
        assert not st["problems"], st["problems"]
        f = st["fires"]
        assert f["lost"] == 0 and f["executed_by_both"] == 0 and f["duplicate_effects"] == 0, st
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["correct"] is True and summary["outcomes"]["lost"] == 0 and summary["duplicate_effects"] == 0
    # the sampler read the dual writer too (its claim counter once went missing: every sample failed)
    assert not [w for w in summary["warnings"] if "samples incomplete" in w], summary["warnings"]


def long_horizon_after(m: dict, step: str, store: str) -> dict:
    st = next(s for s in m["steps"] if s["kind"] == step)
    return next(c for c in st["checks"]["stores"].values() if c["store"] == store)["long_horizon"]


@pytest.mark.parametrize(
    "to, opts",
    [
        ("pg_leased", []),
        # MaxLag 2 s instead of 10 (and a shorter lease): the steps are seconds apart here. A lag
        # regression limit of 1 ms that temporal_shards, batching by MaxLag, cannot meet: the SLO
        # figures must reach the verdict and the NO-GO must name the one that failed, and only it.
        (
            "temporal_shards",
            # its declared bound is MaxLag + the poll overhead (7 s), and fires due in the last bound
            # + 2 s are not judged: the run goes on long enough to judge the rollback's
            ["--opt-to", "max_lag_s=2", "--opt-to", "lease_s=5", "--max-lag-regression", "1ms", "--max-lag-p99", "60s"]
            + ["--duration", "34s"],
        ),
    ],
)
def test_every_step_including_rollback_loses_and_doubles_nothing(bench, tmp_path, pg_dsn, temporal_address, to, opts):
    proc, m, run_dir = dry_run(bench, tmp_path, "--from", "pg_queue", "--to", to, *ALL_STEPS, *opts)
    assert [s["kind"] for s in m["steps"]] == [
        "dual-write",
        "backfill",
        "switch-execution",
        "stop-old-writes",
        "rollback",
    ]
    assert_nothing_lost_or_doubled(m, run_dir)
    c = m["counts"]
    assert c["executed_by_primary"] > 0 and c["executed_by_shadow"] > 0, c
    # matched: the fires both stores saw, a few hundred at the least in 27 s at the smoke rate (how
    # many depends on how fast the observing store parks and re-arms, not on correctness)
    assert c["matched"] > 300 and c["missing_in_shadow"] == 0, c
    # the fires due while the new store executed alone, and after the rollback, were executed
    for kind in ("stop-old-writes", "rollback"):
        assert next(s for s in m["steps"] if s["kind"] == kind)["fires"]["due"] > 100
    # long-horizon timers: in the new store after the backfill, in the old one after the rollback
    n = c["long_horizon_timers"]
    assert n > 20
    assert long_horizon_after(m, "backfill", to) == {"of": n, "right": n, "wrong_samples": []}
    assert long_horizon_after(m, "rollback", "pg_queue") == {"of": n, "right": n, "wrong_samples": []}
    assert m["reconcile"]["drift"]["total"] == 0, m["reconcile"]
    assert m["lag"]["primary"]["p99"] is not None and m["lag"]["worst_tenant"] is not None
    assert f"{m['verdict']}: pg_queue -> {to}" in proc.stdout and "step rollback" in proc.stdout
    if to == "pg_leased":
        assert m["verdict"] == "GO" and proc.returncode == 0, m["reasons"]
        assert m["slo"]["shadow_lag_p99"]["limit_from"].startswith("the declared bound of pg_leased")
    else:
        assert m["slo"]["lag_regression_p99"]["limit"] == 1.0 and m["slo"]["shadow_lag_p99"]["limit"] == 60_000
        assert m["lag"]["regression_p99"] > 1.0, m["lag"]
        assert m["verdict"] == "NO-GO" and proc.returncode == 3
        assert len(m["reasons"]) == 1 and "lag regression" in m["reasons"][0], m["reasons"]
        assert "--max-lag-regression" in m["reasons"][0] and "EXCEEDED" in proc.stdout


def test_shadow_dropping_arms_is_no_go_naming_the_missing_timers(bench, tmp_path):
    proc, m, _ = dry_run(
        bench,
        tmp_path,
        "--from",
        "memory",
        "--to",
        "drops_one_percent",
        *SHORT,
        "--app-writes",
        "0",
        register="drops_one_percent=tests.e2e.dropping:DropsOnePercent",
    )
    assert proc.returncode == 3, "NO-GO exits 3"
    assert m["verdict"] == "NO-GO"
    assert m["counts"]["missing_in_shadow"] > 0
    named = {s.split("@")[0] for s in m["samples"]["missing_in_shadow"]}
    assert named and all(zlib.crc32(t.encode()) % 100 == 0 for t in named), named
    assert "NO-GO" in proc.stdout and "missing in the shadow" in proc.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--from", "nope", "--to", "memory"], "unknown scheduler"),
        (["--from", "memory", "--to", "memory", "--switch-at", "10h"], "--switch-at"),
        (["--from", "memory", "--to", "memory", "--tolerance", "soon"], "invalid duration"),
        (
            ["--from", "memory", "--to", "memory", "--steps", "backfill,dual-write"],
            "backfill must come after dual-write",
        ),
        (["--from", "memory", "--to", "memory", "--steps", "dual-write,backfill,rollback"], "nothing to roll back"),
        (["--from", "memory", "--to", "memory", "--max-lag-p99", "fast"], "--max-lag-p99"),
        (["--from", "memory", "--to", "memory", "--steps", "dual-write", "--switch-at", "3s"], "one of --steps"),
    ],
)
def test_bad_input_is_one_line_exit_2(bench, tmp_path, args, needle):
    proc = bench("migrate", "dry-run", *args, "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_the_new_stores_workers_stalled_then_crashed_lose_and_double_nothing(bench, tmp_path, pg_dsn):
    # a crashed owner's rows come back after lease_s + sweep_s: well inside the run here
    proc, m, run_dir = dry_run(
        bench,
        tmp_path,
        "--from",
        "memory",
        "--to",
        "pg_leased",
        *SHORT,
        "--opt-to",
        "lease_s=2",
        "--opt-to",
        "sweep_s=0.5",
        "--fault",
        "pause-worker@4s:3s",
        "--fault",
        "kill-worker@8s",
    )
    faults = {f["kind"]: f for f in json.loads((run_dir / "faults.json").read_text())["faults"]}
    assert faults["pause-worker"]["fired"] and faults["pause-worker"]["end"] - faults["pause-worker"]["start"] >= 2.9
    assert faults["kill-worker"]["fired"] and faults["kill-worker"]["replacement"] == "w0-shadow-r1", faults
    assert len(m["lag"]["faults"]) == 2  # each fault's window is left out of the lag figures, and said
    c = m["counts"]
    assert c["missing_in_shadow"] == 0 and c["lost"] == 0 and c["duplicate_effects"] == 0, (c, m["samples"])
    assert m["verdict"] == "GO" and proc.returncode == 0, m["reasons"]


# -- a shadow outage (private servers: the test restarts Temporal) -------------------------------


def test_temporal_restart_mid_dual_write_reports_a_divergence_window_and_reconciles_to_zero(
    bench, tmp_path, private_stack
):
    # Temporal stays down 4 s before it starts again: longer than the 2 s the dual writer waits
    # for the new store, so writes made meanwhile fail and are queued (a plain restart can be
    # quicker than that, and the writes merely wait)
    proc, m, run_dir = dry_run(
        bench,
        tmp_path,
        "--from",
        "pg_queue",
        "--to",
        "temporal_shards",
        "--workload",
        "smoke",
        "--duration",
        "22s",
        "--warmup",
        "3s",
        "--opt-to",
        "max_lag_s=2",
        "--opt-to",
        "lease_s=5",
        "--app-writes",
        "40/s",
        "--fault",
        "restart-temporal@8s:4s",
        env=private_stack,
    )
    fault = json.loads((run_dir / "faults.json").read_text())["faults"][0]
    assert fault["fired"] and fault["end"] is not None, fault
    d = m["divergence"]
    windows = [w for w in d["windows"] if w["store"] == "temporal_shards"]
    during = [w for w in windows if fault["start"] - 1.0 <= w["start"] <= fault["end"] + 1.0]
    assert during, f"no write to the new store failed during the outage {fault['start']}-{fault['end']}: {d}"
    assert all(w["failed_writes"] > 0 and w["replayed"] > 0 for w in during), during
    assert all(w["end"] is not None for w in windows), f"a divergence window never closed: {windows}"
    # the queue cannot drain while the server is down: at least the 4 s after the fault began. (The
    # fault's own end is taken once the restarted server also answers a readiness probe, which can
    # come a few ms after the queue already drained into it.)
    assert max(w["end"] for w in during) >= fault["start"] + 4.0, "the queue drained before the new store was back"
    assert d["record_store_failures"] == 0  # the old store (the application's) never saw the outage
    r = m["reconcile"]
    assert "drift" in r, r
    left = r["after_repair"] if r["after_repair"] is not None else r["drift"]
    assert left["total"] == 0, r
    assert m["counts"]["lost"] == 0 and m["counts"]["duplicate_effects"] == 0
    assert "divergence temporal_shards: writes failing from" in proc.stdout


# -- bench migrate reconcile ---------------------------------------------------------------------


async def _open(name: str, dsn: str, schema: str, temporal_address: str | None = None):
    s = create(name, StoreContext(dsn=dsn, schema=schema, temporal_address=temporal_address, state_bytes=64))
    await s.setup()
    return s


async def _armed(s) -> dict[str, float]:
    return {t.id: round(t.fire_at, 3) for t in await s.export_armed()}


def test_reconcile_finds_planted_drift_read_only_and_repairs_it(bench, pg_dsn, schema):
    src_schema, tgt_schema = schema + "_p", schema + "_s"
    base = time.time() + 40 * DAY_S
    common = [Timer(f"t-{i}", base + i, tenant_id=f"n{i % 3}") for i in range(30)]

    async def plant():
        src, tgt = await _open("pg_queue", pg_dsn, src_schema), await _open("pg_leased", pg_dsn, tgt_schema)
        await src.arm(common + [Timer("only-in-source", base + 100), Timer("moved", base + 200)])
        await tgt.arm(common + [Timer("only-in-target", base + 300), Timer("moved", base + 260)])
        out = await _armed(src), await _armed(tgt)
        await src.teardown(drop=False)
        await tgt.teardown(drop=False)
        return out

    async def read():
        src, tgt = await _open("pg_queue", pg_dsn, src_schema), await _open("pg_leased", pg_dsn, tgt_schema)
        try:
            return await _armed(src), await _armed(tgt)
        finally:
            await src.teardown(drop=False)
            await tgt.teardown(drop=False)

    async def drop():
        for name, sch in (("pg_queue", src_schema), ("pg_leased", tgt_schema)):
            await (await _open(name, pg_dsn, sch)).teardown(drop=True)

    try:
        before = asyncio.run(plant())
        args = ["--from", "pg_queue", "--to", "pg_leased", "--schema", schema, "--settle", "0"]
        res = bench("migrate", "reconcile", *args, timeout=120)
        assert res.returncode == 3, res.stdout + res.stderr
        assert "drift 3 (missing 1, extra 1, moved 1)" in res.stdout, res.stdout
        for needle in (
            "drift missing: only-in-source",
            "drift extra: only-in-target",
            "drift moved: moved",
            "off by +60.000 s",
        ):
            assert needle in res.stdout, res.stdout
        assert asyncio.run(read()) == before, "reconcile without --repair changed a store"
        res = bench("migrate", "reconcile", *args, "--repair", timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "re-armed 2, disarmed 1; after repair 0" in res.stdout, res.stdout
        src, tgt = asyncio.run(read())
        assert src == before[0] and tgt == src
        assert bench("migrate", "reconcile", *args, timeout=120).returncode == 0
    finally:
        asyncio.run(drop())


def test_reconcile_sees_a_temporal_timer_no_shard_holds_and_rearms_it(bench, pg_dsn, temporal_address, schema):
    """A trigger row with a fire time that no shard holds (its signal was lost in an outage) never
    fires: reconcile must see it as missing, not trust the row."""
    src_schema, tgt_schema = schema + "_p", schema + "_s"
    base = time.time() + 40 * DAY_S
    timers = [Timer(f"t-{i}", base + i) for i in range(20)]

    async def main():
        src = await _open("pg_leased", pg_dsn, src_schema)
        tgt = await _open("temporal_shards", pg_dsn, tgt_schema, temporal_address)
        runner = Runner(tgt)  # the worker that answers the shards' queries, as a live store has
        runner.start(RecordingProcessor(), "w1")
        try:
            await src.arm(timers)
            await tgt.arm(timers)
            deadline = time.time() + 20
            while len(await tgt.export_armed()) < len(timers) and time.time() < deadline:
                await asyncio.sleep(0.2)
            assert len(await tgt.export_armed()) == len(timers)
            # the signal of a move lost: the row moved on (version + 1), the shard kept the old version
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
                await conn.execute(
                    sql.SQL("UPDATE {}.trigger SET version = version + 1 WHERE id = 't-7'").format(
                        sql.Identifier(tgt_schema)
                    )
                )
            assert "t-7" not in await _armed(tgt)
            env = {**os.environ, "TIMERBENCH_DSN": pg_dsn, "TIMERBENCH_TEMPORAL": temporal_address}
            args = bench.argv(
                "migrate",
                "reconcile",
                "--from",
                "pg_leased",
                "--to",
                "temporal_shards",
                "--schema",
                schema,
                "--settle",
                "1s",
            )
            for extra, code in (([], 3), (["--repair"], 0)):
                # in this event loop: the runner above goes on answering the shards' queries
                p = await asyncio.create_subprocess_exec(
                    *args,
                    *extra,
                    env=env,
                    cwd=bench.cwd,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                out = (await asyncio.wait_for(p.communicate(), 120))[0].decode()
                assert p.returncode == code, out
                assert "missing: t-7" in out, out
            assert (await _armed(tgt)).get("t-7") == round(base + 7, 3)
        finally:
            await runner.stop_all()
            await src.teardown(drop=True)
            await tgt.teardown(drop=True)

    asyncio.run(main())


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--from", "memory", "--to", "pg_leased", "--schema", "x"], "keeps its timers inside the process"),
        (["--from", "pg_queue", "--to", "pg_leased", "--schema", "no_such_rehearsal"], "holds no pg_queue store"),
        (["--from", "pg_queue", "--to", "pg_leased"], "name the stores"),
        (["--from", "pg_queue", "--to", "pg_leased", "--from-schema", "a", "--to-schema", "a"], "compared with itself"),
    ],
)
def test_reconcile_bad_input_is_one_line_exit_2(bench, pg_dsn, args, needle):
    res = bench("migrate", "reconcile", *args, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr

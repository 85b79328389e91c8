"""The pure parts of ``bench inspect`` and ``bench capture``: the diagnosis's lines (each
signature shown and not shown), the horizon's holders, the plan summary, the due-column guess,
``--map`` parsing, and how a capture derives intervals, tenants and the trace."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.capture_run import parse_map
from harness.errors import UsageError
from harness.inspect_run import guess_due_column, horizon_holders
from loadgen.capture import RearmTracker, derive, write, zipf_exponent
from loadgen.population import from_trace
from loadgen.workload import load
from metrics.owntable import HIDDEN_SESSION, plan_summary, relation_churn
from reports.diagnosis import diagnose, measured


def counters(t: float, ins=0, upd=0, hot=0, dele=0, live=1000, dead=0, av=0) -> dict:
    return {
        "read_at_s": t,
        "n_tup_ins": ins,
        "n_tup_upd": upd,
        "n_tup_hot_upd": hot,
        "n_tup_del": dele,
        "n_live_tup": live,
        "n_dead_tup": dead,
        "vacuum_count": 0,
        "autovacuum_count": av,
        "seq_scan": 0,
        "idx_scan": 0,
        "last_autovacuum_s": None,
    }


def inspection(
    *,
    ins=0,
    upd=0,
    hot=0,
    dele=0,
    live=1000,
    dead=0,
    indexes=6,
    toast_bytes=0,
    heap_bytes=8192 * 100,
    holders=(),
    hidden=0,
    due=None,
    bloat=None,
    idx=(),
) -> dict:
    table = relation_churn(counters(0.0, live=live), counters(100.0, ins, upd, hot, dele, live, dead))
    return {
        "shape": {"index_count": indexes, "toast_bytes": toast_bytes, "heap_bytes": heap_bytes, "row_estimate": live},
        "settings": {"autovacuum_naptime": "60 s"},
        "churn": {"table": table, "toast": None, "indexes": list(idx)},
        "horizon": {
            "holders": list(holders),
            "hidden_sessions": hidden,
            "samples": 3,
            "oldest_running_xid_behind": 0,
            "oldest_running_age_s_estimated": None,
        },
        "bloat": bloat or {"method": "estimate (statistics)", "heap": {}},
        "due_scan": due,
    }


def finding(data: dict, key: str):
    return next(f for f in diagnose(data) if f.key == key)


# -- the diagnosis, each line from both sides -------------------------------------------------


def test_churn_is_shown_when_every_row_is_deleted_and_reinserted_often():
    # 1000 rows, 10 deletes + 10 inserts a second: each row replaced every 100 s
    f = finding(inspection(ins=1000, dele=1000, upd=2000), "delete_reinsert_churn")
    assert f.shown is True and "every 100.0 s" in f.figure and "2.00 updates per re-insert" in f.figure
    # a table that only grows is not re-arming, nor one replaced less than once an hour
    assert finding(inspection(ins=1000), "delete_reinsert_churn").shown is False
    assert finding(inspection(ins=20, dele=20, live=100_000), "delete_reinsert_churn").shown is False


def test_low_hot_needs_both_a_low_ratio_and_many_indexes():
    f = finding(inspection(ins=100, upd=1000, hot=180, indexes=6), "low_hot_many_indexes")
    assert f.shown is True and "HOT 18.0%" in f.figure and "6 indexes" in f.figure
    assert f.evidence["index_entries_per_s"] == pytest.approx((100 + 1000 - 180) * 6 / 100.0)
    assert finding(inspection(upd=1000, hot=180, indexes=2), "low_hot_many_indexes").shown is False
    assert finding(inspection(upd=1000, hot=990, indexes=6), "low_hot_many_indexes").shown is False
    assert finding(inspection(ins=100, indexes=6), "low_hot_many_indexes").shown is None  # no updates: no ratio


def test_wide_toast_prefers_pgstattuple_and_falls_back_to_sizes():
    exact = {
        "method": "exact (pgstattuple)",
        "heap": {"tuple_count": 1000, "dead_tuple_count": 10},
        "toast": {"tuple_len": 4_200_000},
    }
    f = finding(inspection(bloat=exact), "wide_toasted_rows")
    assert f.shown is True and "exact (pgstattuple)" in f.figure and f.evidence["toast_bytes_per_row"] == 4200
    assert finding(inspection(toast_bytes=200_000), "wide_toasted_rows").shown is False  # 200 B a row


def test_horizon_held_longer_than_the_naptime_is_shown_with_its_holder():
    old = {
        "kind": "idle in transaction",
        "pid": 42,
        "age_s": 300.0,
        "age_estimated": False,
        "xid_age": 5000,
        "same_database": True,
    }
    f = finding(inspection(holders=[old], ins=10, dele=10), "horizon_held")
    assert f.shown is True and "idle in transaction (pid 42)" in f.figure and "300.0 s" in f.figure
    young = dict(old, age_s=2.0)
    assert finding(inspection(holders=[young]), "horizon_held").shown is False
    vacuum = dict(old, kind="autovacuum worker")  # holds a snapshot while it works: not the problem
    assert finding(inspection(holders=[vacuum]), "horizon_held").shown is False
    hidden = dict(old, kind=HIDDEN_SESSION, age_s=None, age_estimated=True)
    f = finding(inspection(holders=[hidden], hidden=1), "horizon_held")
    assert f.shown is None and "cannot read" in f.figure


def test_due_scan_reads_dead_per_live_index_entries_and_buffers():
    due = {
        "due_column": "run_after",
        "guessed": False,
        "due_index": "jobs_run_after",
        "plan": {
            "node_types": ["Limit", "Index Only Scan"],
            "index_used": "jobs_run_after",
            "access": [{"node": "Index Only Scan", "index": "jobs_run_after", "estimated_rows": 800}],
        },
    }
    f = finding(inspection(live=1000, dead=5000, due=due), "due_scan_dead_tuples")
    assert f.shown is True and "5.00 dead per live" in f.figure and "Index Only Scan using jobs_run_after" in f.figure
    assert finding(inspection(live=1000, dead=100, due=due), "due_scan_dead_tuples").shown is False
    # a queue that deletes what fired: entries read per deleted row, when the index fetched none
    idx = [{"index": "jobs_run_after", "entries_read": 12_000, "rows_fetched": 0, "entries_per_row_fetched": None}]
    f = finding(inspection(live=1000, dead=100, ins=1000, dele=1000, due=due, idx=idx), "due_scan_dead_tuples")
    assert f.shown is True and f.evidence["index_entries_per_due_row"] == 12.0
    analysed = dict(due, analyze={"buffers_per_row": 9.5, "execution_ms": 3.0})
    assert finding(inspection(live=1000, dead=100, due=analysed), "due_scan_dead_tuples").shown is True
    assert finding(inspection(), "due_scan_dead_tuples").shown is None  # no due column


def test_measured_runs_are_cited_with_their_figures():
    runs = [
        SimpleNamespace(
            label="pg_queue",
            scheduler="pg_queue",
            path=Path("runs/a-pg_queue"),
            config={},
            summary={
                "hot_ratio": 0.037,
                "per_fire": {"inserts": 1.02, "updates": 1.97, "deletes": 0.97},
                "dead_tuples": {"table_peak": 125272},
                "lag_ms": {"p99": 1074.0},
            },
        ),
        SimpleNamespace(
            label="temporal_shards",
            scheduler="temporal_shards",
            path=Path("runs/b-temporal_shards"),
            config={},
            summary={
                "hot_ratio": 1.0,
                "per_fire": {},
                "dead_tuples": {},
                "lag_ms": {},
                "faults": [
                    {
                        "kind": "hold-snapshot",
                        "fired": True,
                        "spec": "hold-snapshot@10s:60s",
                        "lag_peak_ms": 9000.0,
                        "late_fires": 0,
                    }
                ],
            },
        ),
    ]
    assert measured("low_hot_many_indexes", runs) == ["pg_queue: HOT 3.7%", "temporal_shards: HOT 100.0%"]
    assert "1.02 inserts / 1.97 updates / 0.97 deletes per fire" in measured("delete_reinsert_churn", runs)[0]
    horizon = measured("horizon_held", runs)
    assert "no hold-snapshot fault" in horizon[0] and "under --fault hold-snapshot@10s:60s" in horizon[1]


# -- inspect's helpers -----------------------------------------------------------------------


def test_horizon_holders_orders_by_age_and_estimates_from_xids():
    sample = {
        "sessions": [
            {
                "kind": "idle in transaction",
                "pid": 1,
                "xact_age_s": 30.0,
                "xmin_age_xids": 300,
                "xid_age_xids": None,
                "same_database": True,
            },
            {
                "kind": "transaction running a statement",
                "pid": 2,
                "xact_age_s": 500.0,
                "xmin_age_xids": None,
                "xid_age_xids": None,
                "same_database": True,
            },  # no snapshot, no xid: holds nothing
            {
                "kind": HIDDEN_SESSION,
                "pid": 3,
                "xact_age_s": None,
                "xmin_age_xids": 1000,
                "xid_age_xids": None,
                "same_database": None,
            },
        ],
        "replication_slots": [
            {
                "slot_name": "s1",
                "slot_type": "physical",
                "active": False,
                "same_database": True,
                "xmin_age_xids": 2000,
                "catalog_xmin_age_xids": None,
            }
        ],
        "prepared_xacts": [{"age_s": 10.0, "xid_age_xids": 50, "same_database": True}],
        "standby_feedback": [],
    }
    holders = horizon_holders(sample, xids_per_s=10.0)
    assert [h["pid"] for h in holders] == [None, 3, 1, None]  # slot ~200 s, hidden ~100 s, 30 s, 10 s
    assert holders[0]["age_s"] == 200.0 and holders[0]["age_estimated"] and "inactive" in holders[0]["kind"]
    assert holders[1]["age_estimated"] and not holders[2]["age_estimated"]
    assert horizon_holders(sample, xids_per_s=None)[-1]["age_s"] is None  # no rate: the hidden one is unaged


def test_plan_summary_reads_the_access_path_and_the_buffers():
    plan = [
        {
            "Plan": {
                "Node Type": "Limit",
                "Plan Rows": 800,
                "Total Cost": 95.0,
                "Startup Cost": 0.3,
                "Actual Rows": 400,
                "Shared Hit Blocks": 1200,
                "Shared Read Blocks": 400,
                "Plans": [
                    {
                        "Node Type": "Index Scan",
                        "Index Name": "jobs_run_after",
                        "Relation Name": "jobs",
                        "Plan Rows": 800,
                        "Heap Fetches": 0,
                    }
                ],
            },
            "Execution Time": 4.5,
            "Planning Time": 0.2,
        }
    ]
    s = plan_summary(plan)
    assert s["node_types"] == ["Limit", "Index Scan"] and s["index_used"] == "jobs_run_after"
    assert s["buffers_per_row"] == 4.0 and s["execution_ms"] == 4.5


def test_the_due_column_is_guessed_only_when_one_candidate_stands_out():
    cols = [
        {"name": n, "category": c}
        for n, c in [("id", "N"), ("run_after", "D"), ("last_run_at", "D"), ("created_at", "D"), ("tenant", "S")]
    ]

    def idx(*names):
        return [{"columns": [n], "method": "btree"} for n in names]

    shape = {"columns": cols, "indexes": idx("id", "run_after", "last_run_at", "created_at", "tenant")}
    assert guess_due_column(shape) == "run_after"  # past-event names (last_, created_) do not count
    assert guess_due_column({"columns": cols, "indexes": idx("created_at", "last_run_at")}) is None
    assert guess_due_column({"columns": cols, "indexes": idx("tenant")}) is None


# -- capture ---------------------------------------------------------------------------------


def test_parse_map_requires_id_tenant_and_due():
    assert parse_map("id=k, tenant=t,due=d,state=s") == {"id": "k", "tenant": "t", "due": "d", "state": "s"}
    for bad, says in [
        ("id=k,tenant=t", "lacks due"),
        ("id=k,tenant=t,due=d,id=x", "names id twice"),
        ("id=k,tenant=t,due", "bad --map entry 'due'"),
        ("id=k,tenant=t,due=d,when=x", "'when=x'"),
    ]:
        with pytest.raises(UsageError, match=says):
            parse_map(bad)


def poll(at, *rows, tenant="t1"):
    """One sample's rows: (trigger, due epoch s or None[, interval s[, state bytes]])."""
    out = []
    for r in rows:
        trigger, due, interval, state = (*r, None, None)[:4]
        out.append(
            {
                "trigger_hash": trigger,
                "tenant_hash": tenant,
                "due_s": due,
                "interval_s": interval,
                "state_bytes": state,
                "read_at_s": at,
            }
        )
    return out


def test_rearms_give_intervals_and_unseen_triggers_get_lower_bounds():
    tracker = RearmTracker()
    # a: due every 4 s, its next row inserted beside the current one (a library's row per fire);
    # b: every 10 s (re-armed once); c: never re-armed; d: due NULL at the end; e: an interval column
    tracker.observe(poll(0.0, ("a", 100.0), ("b", 103.0), ("c", 39.0)))
    tracker.observe(poll(5.0, ("a", 104.0), ("b", 113.0), ("c", 39.0), ("d", 200.0)))
    tracker.observe(poll(9.0, ("a", 108.0), ("a", 112.0), ("b", 113.0), ("c", 39.0), ("d", None), ("e", 20.0, 7.0)))
    assert tracker.rearms == 4 and tracker.window_s == 9.0
    tracker.add_history({"b": [93.0, 83.0], "gone": [1.0, 2.0]})  # finished rows; "gone" is no longer armed
    assert tracker.history_dues == 2 and "gone" not in tracker.triggers
    captured = derive(tracker, watch_s=9.0)
    by_id = {t[0]: t for t in captured.trace}
    assert by_id["a"][2] == 4.0 and by_id["a"][3] == 99.0  # its next fire: the earlier of its two rows
    assert by_id["b"][2] == 10.0
    assert by_id["c"][2] == 30.0  # lower bound: the longer of the window and the time to its due
    assert by_id["d"][3] == 0.0  # NULL due: due now (the timer-wheel article)
    assert by_id["e"][2] == 7.0  # the interval column wins
    assert captured.stats["interval_sources"] == {"column": 1, "rearms": 2, "lower_bound": 2}
    assert captured.stats["watch"]["rearms_seen"] == 4 and captured.stats["watch"]["history_due_times"] == 2


def test_a_due_time_missed_between_samples_does_not_lengthen_the_interval():
    tracker = RearmTracker()
    # due every 6 s; the row due at 112 came and went between the samples at 105 and 114
    tracker.observe(poll(99.0, ("a", 100.0)))
    tracker.observe(poll(101.0, ("a", 106.0)))
    tracker.observe(poll(114.0, ("a", 118.0)))
    assert tracker.interval_of("a") == 6.0  # gaps 6 and 12: the 12 spans two intervals
    # "poll end + interval": gaps carry the application's lag and stay as measured
    tracker.observe(poll(120.0, ("b", 100.0)))
    tracker.observe(poll(121.0, ("b", 106.5)))
    tracker.observe(poll(122.0, ("b", 112.7)))
    assert tracker.interval_of("b") == pytest.approx(6.35)


def test_derive_counts_tenants_long_horizons_and_state_sizes(tmp_path):
    tracker = RearmTracker()
    at = 1000.0
    rows = []  # one sample: the population
    for i in range(30):
        rows += poll(at, ("x" + str(i), at - 5.0 if i == 0 else at + 1.0, 60.0, 4096 + i), tenant=f"t{i % 3}")
    rows += poll(at, ("far", at + 40 * 86400.0, 3600.0))  # a callback 40 days out
    rows += poll(at, ("x1", at + 1.0, 60.0), tenant="t1")  # the same identity twice: one trigger
    tracker.observe(rows)
    captured = derive(tracker, watch_s=0.0)
    s = captured.stats
    assert s["triggers"] == 31 and s["tenants"] == 3 and s["overdue_at_capture"] == 1
    assert s["long_horizon_share"] == pytest.approx(1 / 31)
    assert s["rate_per_s"] == pytest.approx(30 / 60.0)  # the long-horizon timer is not part of the steady rate
    assert s["state_bytes"]["min"] == 4096
    trace, yaml_path = write(tmp_path, captured, ["a header line"], "capture-test")
    population = from_trace(trace)
    assert population.rate_per_s() == pytest.approx(s["rate_per_s"]) and population.long_horizon.sum() == 1
    w = load(str(yaml_path))  # the YAML's trace is relative to the YAML
    assert Path(w.trace) == trace and w.state_bytes == int(round(s["state_bytes"]["p50"])) and w.resolved().trace


def test_zipf_exponent_recovers_the_skew():
    counts = 10_000 / np.arange(1, 51) ** 1.1
    assert zipf_exponent(counts) == pytest.approx(1.1, abs=0.01)
    assert zipf_exponent(np.array([5.0])) == 0.0 and zipf_exponent(np.array([7.0, 7.0, 7.0])) == 0.0

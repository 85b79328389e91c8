"""`bench compare` and `bench report` end to end: real runs made by `bench run` in a subprocess,
then every figure of the report's summary table checked against the runs' Parquet files."""

from __future__ import annotations

import base64
import glob
import os
import warnings
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from metrics import accounting, rundir
from reports.plots import FIGURE_SPECS, OPTIONAL_FIGURE_SPECS
from reports.tables import SUMMARY_ROWS
from schedulers.base import REGISTRY
from tests.e2e.recompute import check_per_fire, check_summary, nearest_rank_ms, outcomes

SMOKE = ["--workload", "smoke", "--duration", "6s", "--warmup", "1s"]
PNG = b"\x89PNG\r\n\x1a\n"


def schedulers_under_test() -> list[str]:
    names = ["memory"]
    if "pg_leased" in REGISTRY:
        names.append("pg_leased")
    else:  # said, not silently skipped
        warnings.warn("pg_leased is not registered: the report test runs memory only", stacklevel=2)
    return names


class Page(HTMLParser):
    """The parts of the report the tests look at."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.cells: dict[tuple[str, str], str] = {}  # (row key, run label) -> data-value
        self.rows: list[str] = []
        self.images: dict[str, str] = {}  # figure key -> src
        self.external: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "td" and "data-row" in a:
            self.cells[(a["data-row"], a["data-run"])] = a["data-value"]
        if tag == "tr" and "data-row" in a:
            self.rows.append(a["data-row"])
        if tag == "img":
            self.images[a.get("data-figure", "?")] = a.get("src", "")
        for k in ("src", "href"):
            if a.get(k) and not a[k].startswith("data:"):
                self.external.append(a[k])


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


@pytest.fixture(scope="module")
def compared(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    names = schedulers_under_test()
    html, md = out / "report.html", out / "report.md"
    proc = bench(
        "compare",
        "--schedulers",
        ",".join(names),
        *SMOKE,
        "--out",
        str(out / "runs"),
        "-o",
        str(html),
        "--markdown",
        str(md),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"report: {html}" in proc.stdout
    dirs = [d for d in sorted((out / "runs").iterdir()) if d.is_dir()]
    calibrations = [d for d in dirs if rundir.read_config(d).get("calibration")]
    runs = {d.name.split("-", 2)[2]: d for d in dirs if d not in calibrations}
    assert sorted(runs) == sorted(names), proc.stderr[-2000:]
    # the long Markdown form of the same runs (bench compare writes the summary)
    md_full = out / "full.md"
    full = bench(
        "report", str(out / "runs"), "-o", str(out / "full.html"), "--markdown", str(md_full), "--markdown-full"
    )
    assert full.returncode == 0, full.stderr[-3000:]
    return {
        "html": html,
        "md": md,
        "md_full": md_full,
        "runs": runs,
        "names": names,
        "out": out,
        "calibrations": calibrations,
    }


def test_compare_ends_with_the_harness_calibration_and_each_backend_is_checked_against_it(compared):
    """bench compare's last run is the memory scheduler at 3x the rate: not a compared
    column, but every backend's "harness ceiling" check reads it."""
    (cal,) = compared["calibrations"]
    config, summary = rundir.read_config(cal), rundir.read_summary(cal)
    target = (
        rundir.read_summary(compared["runs"]["pg_leased"])["target_rate"] if "pg_leased" in compared["runs"] else None
    )
    assert config["scheduler"] == "memory" and config["label"] == "harness ceiling"
    assert config["calibration"]["factor"] == 3.0
    assert summary["harness"]["cores"] > 0 and summary["harness"]["cpu_ms_per_fire"] > 0
    page = compared["html"].read_text()
    assert not [k for k in parse(compared["html"]).cells if k[1] == "harness ceiling"]  # not a compared column
    if target is not None:
        assert abs(config["calibration"]["for_rate"] - target) < 1e-6
        assert 'data-check="harness ceiling" data-ok="True"' in page, "pg_leased was not checked against the harness"
    assert "harness ceiling" in compared["md_full"].read_text()


# Table 1 row -> the figure of the run's summary.json (itself checked against fires.parquet and
# samples.parquet by tests.e2e.recompute, never through metrics/).
def expected_figures(s: dict) -> dict[str, object]:
    lag, dead, pf, o = s["lag_ms"], s["dead_tuples"] or {}, s["per_fire"] or {}, s["outcomes"]
    bill, bloat = s.get("bill") or {}, s.get("bloat") or {}

    def server(name: str, metric: str, scale: float = 1.0):
        v = (s["servers"].get(name) or {}).get("per_fire", {}).get(metric)
        return None if v is None else v * scale

    def stmt(source: str):
        return ((s.get("statements") or {}).get(source) or {}).get("exec_ms")

    return {
        "cycles": s["cycles_per_trigger"],
        "target_rate": s["target_rate"],
        "offered_rate": s["offered_rate"],
        "achieved_rate": s["achieved_rate"],
        "fires": s["fires"],
        "rate_share": s["achieved_rate"] / s["offered_rate"],
        "offered_share": s["offered_rate"] / s["target_rate"],
        "claim_rate": s["claim_rate"],
        "due": o["due"],
        "on_time": o["on_time"],
        "late": o["late"],
        "pending": o["pending"],
        "lost": o["lost"],
        "on_time_share": o["on_time"] / o["due"],
        "on_time_s": s["on_time_s"],
        "skipped_periods": s["skipped_periods"],
        "lag_p50_ms": lag["p50"],
        "lag_p90_ms": lag["p90"],
        "lag_p99_ms": lag["p99"],
        "lag_p999_ms": lag["p999"],
        "lag_max_ms": lag["max"],
        "lost_total": o["lost"] + s["lost_in_warmup"],
        "duplicate_effects": s["duplicate_effects"],
        "early": s["early"],
        "redelivered_fires": s["redelivered_fires"],
        "duplicate_fires": s["duplicate_fires"],
        "external_effects": s["external_effects"],
        "duplicate_external_effects": s["duplicate_external_effects"],
        "dead_table_peak": dead.get("table_peak"),
        "dead_table_end": dead.get("table_end"),
        "dead_toast_peak": dead.get("toast_peak"),
        "dead_toast_end": dead.get("toast_end"),
        "hot_ratio": s["hot_ratio"],
        "inserts_per_fire": pf.get("inserts"),
        "updates_per_fire": pf.get("updates"),
        "deletes_per_fire": pf.get("deletes"),
        "wal_bytes_per_fire": pf.get("wal_bytes"),
        "toast_inserts_per_fire": pf.get("toast_inserts"),
        "toast_updates_per_fire": pf.get("toast_updates"),
        "toast_deletes_per_fire": pf.get("toast_deletes"),
        "heap_writes_per_fire": pf.get("heap_writes"),
        "toast_writes_per_fire": pf.get("toast_writes"),
        "row_writes_per_fire": pf.get("row_writes"),
        "wal_records_per_fire": pf.get("wal_records"),
        "wal_fpi_per_fire": pf.get("wal_fpi"),
        "postgres_io_bytes_per_fire": server("postgres", "io_write_bytes"),
        "postgres_cpu_ms_per_fire": server("postgres", "cpu_s", 1000.0),
        "temporal_requests_per_fire": server("temporal", "persistence_requests"),
        "temporal_writes_per_fire": server("temporal", "persistence_writes"),
        "temporal_actions_per_fire": server("temporal", "actions"),
        "temporal_bytes_per_fire": server("temporal", "write_bytes"),
        "temporal_file_growth_per_fire": server("temporal", "file_bytes"),
        "temporal_cpu_ms_per_fire": server("temporal", "cpu_s", 1000.0),
        "durable_writes_per_fire": bill.get("durable_writes"),
        "bytes_written_per_fire": bill.get("bytes_written"),
        "dead_exact": bloat.get("dead_tuples_exact"),
        "dead_estimate": bloat.get("n_dead_tup"),
        "dead_exact_toast": bloat.get("dead_tuples_exact_toast"),
        "dead_estimate_toast": bloat.get("n_dead_tup_toast"),
        "dead_bytes": bloat.get("dead_bytes"),
        "free_bytes": bloat.get("free_bytes"),
        "statement_ms_per_fire": stmt("design") / s["fires"] if stmt("design") is not None else None,
        "sampler_ms_per_s": stmt("sampler") / s["measured_s"] if stmt("sampler") is not None else None,
        "autovacuum_runs": s["autovacuum_runs"],
        "table_bytes_end": s["table_bytes_end"],
        "index_bytes_end": s["index_bytes_end"],
    }


def test_every_summary_figure_is_shown_and_equals_its_recomputation_from_parquet(compared):
    page = parse(compared["html"])
    numeric_rows = {spec.key for spec in SUMMARY_ROWS if spec.kind != "text"}
    for name, run_dir in compared["runs"].items():
        written = rundir.read_summary(run_dir)
        cfg = rundir.read_config(run_dir)
        # the summary's accounting and per-fire costs, recomputed with plain pandas
        check_summary(written, pq.read_table(run_dir / "fires.parquet").to_pandas(), cfg)
        assert check_per_fire(written, pq.read_table(run_dir / "samples.parquet").to_pandas(), cfg) >= 1
        want = expected_figures(written)
        assert set(want) == numeric_rows  # no row of the table escapes the check
        for key, value in want.items():
            shown = page.cells[(key, name)]
            if value is None:
                assert shown == "", (name, key, shown)
            elif isinstance(value, str):  # a lag percentile among undelivered fires
                assert shown == value == accounting.NOT_DELIVERED, (name, key, shown)
            else:
                assert float(shown) == float(value), (name, key, shown, value)
        assert page.cells[("scheduler", name)] == name
        assert written["fires"] > 0 and written["correct"] and written["duplicate_effects"] == 0


def test_outcomes_and_lag_agree_with_the_raw_fires(compared):
    """Independently of rundir: outcome counts and lag ranks straight from fires.parquet."""
    page = parse(compared["html"])
    for name, run_dir in compared["runs"].items():
        cfg = rundir.read_config(run_dir)
        f = pq.read_table(run_dir / "fires.parquet").to_pandas()
        counts, lags = outcomes(f, cfg["window"], cfg["workload"]["on_time_s"])
        for key, value in counts.items():
            assert int(float(page.cells[(key, name)])) == value, (name, key)
        for key, q in (("lag_p50_ms", 50), ("lag_p90_ms", 90), ("lag_p99_ms", 99), ("lag_max_ms", 100)):
            want = nearest_rank_ms(lags, q)
            shown = page.cells[(key, name)]
            assert shown == want if isinstance(want, str) else float(shown) == pytest.approx(want), (name, key)


def test_html_is_self_contained_with_every_plot_and_table(compared):
    page = parse(compared["html"])
    assert {"summary", "checks", "environment", "narrative", "figures"} <= page.ids
    fixed, optional = {key for key, *_ in FIGURE_SPECS}, {key for key, *_ in OPTIONAL_FIGURE_SPECS}
    assert fixed <= set(page.images) <= fixed | optional
    if any(name != "memory" for name in compared["names"]):  # a design with a bill: its cost by store
        assert "cost_by_store" in page.images
    for key, src in page.images.items():
        assert src.startswith("data:image/png;base64,"), key
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG, key
    assert page.external == []  # nothing fetched: the file can be mailed
    assert "script" not in page.tags
    assert page.rows == [spec.key for spec in SUMMARY_ROWS]
    text = compared["html"].read_text()
    assert text.count("[Table 1") + text.count("[Figure") >= 1  # the narrative cites its figures
    for name in compared["names"]:
        assert f'data-run="{name}"' in text


def test_markdown_has_the_same_tables(compared):
    summary_md = compared["md"].read_text()
    assert "## The answer" in summary_md and "## Table 1 · Summary" not in summary_md  # compare's: the summary
    md = compared["md_full"].read_text()
    for heading in ("## The answer", "## Checks", "## Table 1 · Summary", "## What this says", "## Environment"):
        assert heading in md
    blocks = md.split("## Table 1 · Summary", 1)[1].split("\n\n")
    assert "Load is open-loop (fixed cadence" in blocks[1]  # the cadence, window and outcomes, said first
    summary = next(b for b in blocks if b.startswith("| figure")).splitlines()
    assert len(summary) == 2 + len(SUMMARY_ROWS)
    assert (
        summary[0]
        == "| figure | "
        + " | ".join(
            n + (" (baseline)" if i == 0 and len(compared["names"]) > 1 else "")
            for i, n in enumerate(compared["names"])
        )
        + " |"
    )


def test_report_accepts_globs_and_parents_and_a_baseline(bench, compared, tmp_path):
    runs = compared["out"] / "runs"
    html = tmp_path / "r.html"
    last = compared["names"][-1]
    proc = bench("report", str(runs / f"*-{last}"), str(runs), "-o", str(html), "--baseline", last)
    assert proc.returncode == 0, proc.stderr
    assert f"({len(compared['names'])} runs)" in proc.stdout
    page = parse(html)
    assert page.rows == [spec.key for spec in SUMMARY_ROWS]
    text = html.read_text()
    assert f"ratios are against <b>{last}</b>" in text or len(compared["names"]) == 1


def test_report_of_nothing_is_a_usage_error(bench, tmp_path):
    proc = bench("report", str(tmp_path / "nope"), "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 2
    assert "no run directory" in proc.stderr and "Traceback" not in proc.stderr


def test_a_failed_run_is_reported_and_the_others_still_are(bench, tmp_path):
    # A bad option would be refused before any run starts (exit 2, test_bad_input.py); a failure
    # only the run itself can meet is a scheduler that crashes mid-run. It is registered in every
    # process of this test (compare and its child runs) through a sitecustomize on PYTHONPATH.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import schedulers.base as b\nb.REGISTRY['crashing'] = 'tests.e2e.crashing:CrashingScheduler'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(bench.cwd)])}
    html = tmp_path / "r.html"
    proc = bench(
        "compare",
        "--schedulers",
        "memory,crashing",
        *SMOKE,
        "--no-calibrate",
        "--out",
        str(tmp_path / "runs"),
        "-o",
        str(html),
        env=env,
        timeout=240,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 of 2 runs failed: crashing" in proc.stderr
    page = parse(html)
    assert "failures" in page.ids
    text = html.read_text()
    assert 'data-failed="crashing"' in text and "store connection lost" in text
    assert page.cells[("scheduler", "memory")] == "memory"
    assert float(page.cells[("fires", "memory")]) > 0
    made = sorted(os.path.basename(p).split("-", 2)[2] for p in glob.glob(str(tmp_path / "runs" / "*")))
    assert made == ["crashing", "memory"]  # the crashed run's partial directory is kept and shown


def test_a_run_without_summary_is_recomputed_and_marked_incomplete(bench, compared, tmp_path):
    import shutil

    src = compared["runs"]["memory"]
    broken = tmp_path / src.name
    shutil.copytree(src, broken)
    (broken / "summary.json").unlink()
    html = tmp_path / "r.html"
    proc = bench("report", str(broken), "-o", str(html))
    assert proc.returncode == 0, proc.stderr
    page = parse(html)
    assert page.cells[("complete", "memory")].startswith("no: interrupted at T+")
    want = rundir.read_summary(src)
    assert float(page.cells[("fires", "memory")]) == want["fires"]
    assert float(page.cells[("lag_p99_ms", "memory")]) == want["lag_ms"]["p99"]

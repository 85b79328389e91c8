"""Bad input never starts anything: one line naming the file, line and field (or the option) and
what is accepted, exit 2, no traceback, nothing created.

The matrix drives the CLI's own entry point (``bench.cli.main``) in this process: a hundred-odd
cases at ~1.5 s of interpreter start each would cost minutes on a shared machine, and every case
fails before a server, a run directory or a thread exists. A few cases at the end run the real
``bench`` executable in a subprocess to show the same line, exit code and silence from outside.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main

HEADER = "trigger_id,tenant_id,interval_s,first_fire_s\n"

# name -> file contents (bytes); the tests write them into a fresh directory
FILES: dict[str, bytes] = {
    "ok.csv": (HEADER + "a,t1,10,0.5\nb,t2,20,3\n").encode(),
    "nan.csv": (HEADER + "a,t1,nan,1\n").encode(),
    "inf.csv": (HEADER + "a,t1,10,1\nb,t1,inf,1\n").encode(),
    "big.csv": (HEADER + "a,t1,1e999,1\n").encode(),
    "negative.csv": (HEADER + "a,t1,-5,1\n").encode(),
    "zero.csv": (HEADER + "a,t1,0,1\n").encode(),
    "first-nan.csv": (HEADER + "a,t1,10,nan\n").encode(),
    "first-negative.csv": (HEADER + "a,t1,10,-1\n").encode(),
    "word.csv": (HEADER + "a,t1,ten,1\n").encode(),
    "empty-id.csv": (HEADER + ",t1,10,1\n").encode(),
    "blank-id.csv": (HEADER + "  ,t1,10,1\n").encode(),
    "empty-tenant.csv": (HEADER + "a,,10,1\n").encode(),
    "duplicate-id.csv": (HEADER + "a,t1,10,1\nb,t1,10,1\na,t2,20,2\n").encode(),
    "not-utf8.csv": HEADER.encode() + b"a,t\xff1,10,1\n",
    "binary.csv": bytes(range(256)) * 8,
    "missing-columns.csv": b"trigger_id,interval_s\na,10\n",
    "twice-column.csv": (HEADER.strip() + ",interval_s\na,t1,10,1,10\n").encode(),
    "ragged.csv": (HEADER + "a,t1,10\n").encode(),
    "header-only.csv": HEADER.encode(),
    "empty.csv": b"",
    "list.yaml": b"- rate: 10/s\n- duration: 5s\n",
    "bad.pgbench": b"\\set aid random(1,\nSELECT 1;\n",
    "empty.pgbench": b"  \n",
    "scalar.yaml": b"just words\n",
    "unknown.yaml": b"rate: 10/s\ncolour: red\n",
    "twice.yaml": b"rate: 10/s\nduration: 5s\nrate: 20/s\n",
    "nan-duration.yaml": b"rate: 10/s\nduration: .nan\n",
    "inf-skew.yaml": b"rate: 10/s\ntenant_skew: .inf\n",
    "nan-rate.yaml": b"rate: .nan\n",
    "bad-rate.yaml": b"rate: fast\n",
    "zero-interval.yaml": b"rate: 10/s\ninterval: 0s..5s\n",
    "nan-latency.yaml": b"rate: 10/s\nprovider_latency: {median: .nan, p99: 1s}\n",
    "latency-list.yaml": b"rate: 10/s\nprovider_latency: [1, 2]\n",
    "share.yaml": b"rate: 10/s\nerror_rate: 2\n",
    "canonical-text.yaml": b"rate: 10/s\nduration_s: soon\n",
    "not-utf8.yaml": b"rate: 10/s\nname: caf\xe9\n",
    "not-yaml.yaml": b"rate: [10\n",
    "no-rate.yaml": b"duration: 5s\n",
    "trace-nan.yaml": b"trace: nan.csv\nduration: 5s\n",
}

# (what, arguments after `bench`, a text the line must contain: the file, field or option named)
RUN = ["run", "--scheduler", "pg_leased", "--out", "runs"]
CASES = [
    # traces
    ("trace NaN interval", [*RUN, "--trace", "nan.csv"], "nan.csv line 2, field interval_s"),
    ("trace inf interval", [*RUN, "--trace", "inf.csv"], "inf.csv line 3, field interval_s"),
    ("trace 1e999 interval", [*RUN, "--trace", "big.csv"], "big.csv line 2, field interval_s"),
    ("trace negative interval", [*RUN, "--trace", "negative.csv"], "negative.csv line 2, field interval_s"),
    ("trace zero interval", [*RUN, "--trace", "zero.csv"], "zero.csv line 2, field interval_s"),
    ("trace NaN first fire", [*RUN, "--trace", "first-nan.csv"], "field first_fire_s"),
    ("trace negative first fire", [*RUN, "--trace", "first-negative.csv"], "field first_fire_s"),
    ("trace word for a number", [*RUN, "--trace", "word.csv"], "line 2, field interval_s"),
    ("trace empty id", [*RUN, "--trace", "empty-id.csv"], "line 2, field trigger_id"),
    ("trace blank id", [*RUN, "--trace", "blank-id.csv"], "line 2, field trigger_id"),
    ("trace empty tenant", [*RUN, "--trace", "empty-tenant.csv"], "line 2, field tenant_id"),
    ("trace duplicate id", [*RUN, "--trace", "duplicate-id.csv"], "line 4, field trigger_id"),
    ("trace not UTF-8", [*RUN, "--trace", "not-utf8.csv"], "not-utf8.csv line 2: not UTF-8"),
    ("trace binary", [*RUN, "--trace", "binary.csv"], "binary.csv line 1"),
    ("trace missing columns", [*RUN, "--trace", "missing-columns.csv"], "missing column(s) tenant_id, first_fire_s"),
    ("trace column twice", [*RUN, "--trace", "twice-column.csv"], "interval_s given twice"),
    ("trace ragged row", [*RUN, "--trace", "ragged.csv"], "line 2: 3 fields"),
    ("trace header only", [*RUN, "--trace", "header-only.csv"], "no triggers"),
    ("trace empty file", [*RUN, "--trace", "empty.csv"], "empty.csv is empty"),
    ("trace missing file", [*RUN, "--trace", "nosuch.csv"], "nosuch.csv"),
    ("trace a directory", [*RUN, "--trace", "."], "not a file"),
    ("trace from a workload file", [*RUN, "--workload", "trace-nan.yaml"], "nan.csv line 2, field interval_s"),
    # workload files
    ("YAML list", [*RUN, "--workload", "list.yaml"], "list.yaml line 1: must be a mapping"),
    ("YAML scalar", [*RUN, "--workload", "scalar.yaml"], "scalar.yaml line 1: must be a mapping"),
    ("YAML unknown field", [*RUN, "--workload", "unknown.yaml"], "unknown.yaml line 2, field colour"),
    ("YAML field twice", [*RUN, "--workload", "twice.yaml"], "twice.yaml line 3: field rate given twice"),
    ("YAML NaN duration", [*RUN, "--workload", "nan-duration.yaml"], "line 2, field duration"),
    ("YAML inf skew", [*RUN, "--workload", "inf-skew.yaml"], "line 2, field tenant_skew"),
    ("YAML NaN rate", [*RUN, "--workload", "nan-rate.yaml"], "line 1, field rate"),
    ("YAML bad rate", [*RUN, "--workload", "bad-rate.yaml"], "line 1, field rate"),
    ("YAML zero interval", [*RUN, "--workload", "zero-interval.yaml"], "line 2, field interval"),
    ("YAML NaN latency", [*RUN, "--workload", "nan-latency.yaml"], "line 2, field provider_latency"),
    ("YAML latency list", [*RUN, "--workload", "latency-list.yaml"], "line 2, field provider_latency"),
    ("YAML share above 1", [*RUN, "--workload", "share.yaml"], "line 2, field error_rate"),
    ("YAML text for a number", [*RUN, "--workload", "canonical-text.yaml"], "line 2, field duration_s"),
    ("YAML not UTF-8", [*RUN, "--workload", "not-utf8.yaml"], "not-utf8.yaml line 2: not UTF-8"),
    ("YAML syntax", [*RUN, "--workload", "not-yaml.yaml"], "not-yaml.yaml line 2: not valid YAML"),
    ("YAML without a rate", [*RUN, "--workload", "no-rate.yaml"], "no-rate.yaml"),
    ("YAML a directory", [*RUN, "--workload", "."], "not a file"),
    ("unknown preset", [*RUN, "--workload", "nosuch"], "presets"),
    # each option's malformed forms
    *[
        (f"--rate {v}", [*RUN, "--rate", v], "--rate")
        for v in ("nan", "inf", "0", "-3/s", "fast", "5/fortnight", "1e999")
    ],
    *[(f"--triggers {v}", [*RUN, "--triggers", v], "--triggers") for v in ("0", "-1", "abc", "1.5", "nan", "inf")],
    ("--triggers beyond memory", [*RUN, "--triggers", "1e13"], "memory"),
    ("--rate and --triggers", [*RUN, "--rate", "10", "--triggers", "10"], "not both"),
    *[
        (f"--interval {v}", [*RUN, "--interval", v], "--interval")
        for v in ("0s..5s", "10s..5s", "nan..5s", "5s..inf", "abc", "-1s..2s")
    ],
    *[(f"--tenants {v}", [*RUN, "--tenants", v], "--tenants") for v in ("0", "-2", "abc", "1e9")],
    *[(f"--tenant-skew {v}", [*RUN, "--tenant-skew", v], "--tenant-skew") for v in ("-1", "nan", "inf", "abc")],
    *[(f"--state-size {v}", [*RUN, "--state-size", v], "--state-size") for v in ("-1", "abc", "1e9", "nan")],
    *[(f"--duration {v}", [*RUN, "--duration", v], "--duration") for v in ("0", "-5s", "nan", "inf", "abc", "1e400")],
    *[(f"--warmup {v}", [*RUN, "--warmup", v], "--warmup") for v in ("-1s", "nan", "soon")],
    *[(f"--seed {v}", [*RUN, "--seed", v], "--seed") for v in ("-1", "1.5", "abc", "nan")],
    *[
        (f"--opt {v}", [*RUN, "--opt", v], "scheduler option")
        for v in ("lease_s", "nope=1", "lease_s=abc", "lease_s=nan", "lease_s=inf", "split_state=maybe", "batch=1.5")
    ],
    *[(f"--nodes {v}", [*RUN, "--nodes", v], "--nodes") for v in ("0", "-1", "x")],
    ("--nodes on an in-process store", ["run", "--scheduler", "memory", "--nodes", "2", "--out", "runs"], "--nodes"),
    *[(f"--arm-load {v}", [*RUN, "--arm-load", v], "--arm-load") for v in ("nan", "0", "fast")],
    *[
        (f"--fault {v}", [*RUN, "--fault", v], "--fault")
        for v in (
            "boom@1s",
            "kill-worker",
            "kill-worker@nan",
            "kill-worker@inf",
            "pause-worker@1s",
            "pause-worker@1s:0s",
            "slow-provider@1s:5s",
            "hold-snapshot@1s:-2s",
        )
    ],
    ("--out is a file", ["run", "--scheduler", "pg_leased", "--out", "ok.csv"], "--out"),
    ("--out under a file", ["run", "--scheduler", "pg_leased", "--out", "ok.csv/runs"], "--out"),
    ("unknown scheduler", ["run", "--scheduler", "nosuch", "--out", "runs"], "nosuch"),
    ("unknown option", [*RUN, "--colour", "red"], "--colour"),
    # the other commands, where they take the same inputs
    (
        "compare trace NaN",
        ["compare", "--schedulers", "pg_leased", "--trace", "nan.csv", "--out", "runs"],
        "nan.csv line 2, field interval_s",
    ),
    ("compare YAML list", ["compare", "--workload", "list.yaml", "--out", "runs"], "list.yaml line 1"),
    ("compare --seed", ["compare", "--seed", "abc", "--out", "runs"], "--seed"),
    ("compare --opt NaN", ["compare", "--schedulers", "pg_leased", "--opt", "lease_s=nan", "--out", "runs"], "lease_s"),
    ("compare --fault", ["compare", "--schedulers", "pg_leased", "--fault", "boom@1s", "--out", "runs"], "--fault"),
    ("compare unknown scheduler", ["compare", "--schedulers", "pg_leased,nosuch", "--out", "runs"], "nosuch"),
    (
        "compare report is a directory",
        ["compare", "--schedulers", "pg_leased", "-o", ".", "--out", "runs"],
        "directory",
    ),
    ("calibrate --rate", ["calibrate", "--rate", "fast", "--out", "runs"], "--rate"),
    ("calibrate --duration", ["calibrate", "--duration", "nan", "--out", "runs"], "--duration"),
    ("calibrate YAML list", ["calibrate", "--workload", "list.yaml", "--out", "runs"], "list.yaml line 1"),
    ("calibrate --factor", ["calibrate", "--factor", "0.5", "--out", "runs"], "--factor"),
    (
        "run --calibrates a backend",
        ["run", "--scheduler", "pg_leased", "--calibrates", "500", "--out", "runs"],
        "bench calibrate",
    ),
    ("sweep --rates NaN", ["sweep", "--scheduler", "memory", "--rates", "10,nan", "--out", "runs"], "--rates"),
    ("sweep --rates empty", ["sweep", "--scheduler", "memory", "--rates", ",", "--out", "runs"], "--rates"),
    ("sweep --slo-p99", ["sweep", "--scheduler", "memory", "--slo-p99", "nan", "--out", "runs"], "--slo-p99"),
    ("sweep --duration", ["sweep", "--scheduler", "memory", "--duration", "nan", "--out", "runs"], "--duration"),
    (
        "sweep YAML unknown field",
        ["sweep", "--scheduler", "memory", "--workload", "unknown.yaml", "--out", "runs"],
        "field colour",
    ),
    ("sweep --interval", ["sweep", "--scheduler", "memory", "--interval", "0s..1s", "--out", "runs"], "--interval"),
    ("sweep --seed", ["sweep", "--scheduler", "memory", "--seed", "x", "--out", "runs"], "--seed"),
    ("sweep --retries", ["sweep", "--scheduler", "memory", "--retries", "9", "--out", "runs"], "--retries"),
    (
        "migrate YAML list",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--workload", "list.yaml", "--out", "runs"],
        "list.yaml line 1",
    ),
    (
        "migrate trace duplicate",
        [
            "migrate",
            "dry-run",
            "--from",
            "pg_leased",
            "--to",
            "pg_queue",
            "--workload",
            "trace-nan.yaml",
            "--out",
            "runs",
        ],
        "nan.csv line 2",
    ),
    (
        "migrate --rate",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--rate", "nan", "--out", "runs"],
        "--rate",
    ),
    (
        "migrate --tolerance",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--tolerance", "nan", "--out", "runs"],
        "--tolerance",
    ),
    (
        "migrate --tolerance 0",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--tolerance", "0s", "--out", "runs"],
        "--tolerance",
    ),
    (
        "migrate --switch-at",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--switch-at", "9h", "--out", "runs"],
        "--switch-at",
    ),
    (
        "migrate --max-extra",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--max-extra", "nan", "--out", "runs"],
        "--max-extra",
    ),
    (
        "migrate --opt-to",
        ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--opt-to", "x=1", "--out", "runs"],
        "x=1",
    ),
    ("migrate --out", ["migrate", "dry-run", "--from", "pg_leased", "--to", "pg_queue", "--out", "ok.csv"], "--out"),
    ("serve YAML unknown field", ["serve", "--scheduler", "pg_leased", "--workload", "unknown.yaml"], "field colour"),
    ("serve trace", ["serve", "--scheduler", "pg_leased", "--workload", "trace-nan.yaml"], "nan.csv line 2"),
    ("serve --port", ["serve", "--scheduler", "pg_leased", "--port", "70000"], "--port"),
    ("serve --schema empty", ["serve", "--scheduler", "pg_leased", "--schema", ""], "--schema"),
    ("serve --schema long", ["serve", "--scheduler", "pg_leased", "--schema", "s" * 64], "--schema"),
    ("serve --worker-id", ["serve", "--scheduler", "pg_leased", "--worker-id", "a/b"], "--worker-id"),
    ("serve --record is a file", ["serve", "--scheduler", "pg_leased", "--record", "ok.csv"], "--record"),
    (
        "serve non-loopback without a token",
        ["serve", "--scheduler", "pg_leased", "--host", "0.0.0.0"],
        "--allow-unauthenticated",
    ),
    ("serve --opt", ["serve", "--scheduler", "pg_leased", "--opt", "lease_s=inf"], "lease_s"),
    ("run --neighbour unknown", [*RUN, "--neighbour", "tpcc"], "--neighbour 'tpcc'"),
    ("run --neighbour-rate 0", [*RUN, "--neighbour", "oltp", "--neighbour-rate", "0"], "--neighbour-rate"),
    ("run --neighbour-rate negative", [*RUN, "--neighbour", "oltp", "--neighbour-rate", "-5"], "--neighbour-rate"),
    ("run --neighbour-rate nan", [*RUN, "--neighbour", "oltp", "--neighbour-rate", "nan"], "--neighbour-rate"),
    ("run --neighbour-rate alone", [*RUN, "--neighbour-rate", "50"], "--neighbour-rate needs"),
    ("run --neighbour-script missing", [*RUN, "--neighbour-script", "absent.pgbench"], "no such file"),
    ("run --neighbour-script empty", [*RUN, "--neighbour-script", "empty.pgbench"], "empty"),
    ("run --neighbour-script rejected", [*RUN, "--neighbour-script", "bad.pgbench"], "pgbench rejects it"),
    ("run --readers no duration", [*RUN, "--readers", "3"], "--readers '3'"),
    ("run --readers zero", [*RUN, "--readers", "0x10s"], "--readers"),
    ("run --readers bad duration", [*RUN, "--readers", "2xlong"], "--readers"),
    ("run --soak-bin without --soak", [*RUN, "--soak-bin", "5s"], "--soak-bin needs --soak"),
    ("soak --soak-bin 0", ["soak", "--scheduler", "pg_leased", "--soak-bin", "0s", "--out", "runs"], "--soak-bin"),
    ("soak --duration", ["soak", "--scheduler", "pg_leased", "--duration", "nan", "--out", "runs"], "--duration"),
    (
        "soak --neighbour-script rejected",
        ["soak", "--scheduler", "pg_leased", "--neighbour-script", "bad.pgbench", "--out", "runs"],
        "pgbench rejects it",
    ),
    (
        "compare --neighbour-rate",
        ["compare", "--schedulers", "pg_leased", "--neighbour", "oltp", "--neighbour-rate", "0", "--out", "runs"],
        "--neighbour-rate",
    ),
]


@pytest.fixture
def inputs_dir(tmp_path, monkeypatch):
    """A directory holding the malformed files, as the working directory."""
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIMERBENCH_DSN", raising=False)
    monkeypatch.delenv("TIMERBENCH_TOKEN", raising=False)
    return tmp_path


def _entries(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


@pytest.mark.parametrize("what, args, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(what, args, names, inputs_dir, capsys):
    before = _entries(inputs_dir)
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, (what, out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and names in lines[0], lines[0]
    assert "Traceback" not in out + err and out == "", out
    assert _entries(inputs_dir) == before  # no run directory, no runs/, nothing


@pytest.mark.parametrize(
    "args, names",
    [
        ([*RUN, "--trace", "nan.csv"], "nan.csv line 2, field interval_s"),
        ([*RUN, "--workload", "list.yaml"], "list.yaml line 1: must be a mapping"),
        ([*RUN, "--trace", "not-utf8.csv"], "not-utf8.csv line 2: not UTF-8"),
        (["serve", "--scheduler", "pg_leased", "--host", "0.0.0.0", "--port", "0"], "--allow-unauthenticated"),
    ],
)
def test_the_real_command_says_the_same_in_one_line(bench, args, names, inputs_dir):
    before = _entries(inputs_dir)
    res = bench(*args, timeout=60, cwd=inputs_dir)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and names in lines[0], res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert _entries(inputs_dir) == before


def test_a_good_trace_and_workload_pass_the_same_checks(inputs_dir):
    """The checks refuse only what is wrong: the same files, well formed, load."""
    from harness.inputs import check_run

    plan = check_run("pg_leased", "smoke", {"trace": "ok.csv"}, [], "runs")
    assert plan.workload.trace == "ok.csv"
    (inputs_dir / "fine.yaml").write_text("rate: 10/s\nduration: 5s\nprovider_latency: {median: 1ms, p99: 2ms}\n")
    assert check_run("pg_leased", "fine.yaml", {}, ["lease_s=5"], "runs").workload.rate_per_s == 10.0
    assert not (inputs_dir / "runs").exists()

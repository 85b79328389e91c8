"""``bench sweep``: each backend's maximum sustainable fire rate, beside the database's own ceiling.

For each backend the rates run in ascending order, each as its own ``bench run --rate R`` in a
subprocess (as ``bench compare`` does), into ``runs/sweep-<timestamp>/``. A backend stops at
the first rate it cannot hold; its maximum sustainable rate is the last rate it held (the
OpenMessaging Benchmark's rate search, stepping up a fixed list instead of bisecting). A rate
is held when the run completed, achieved at least 95% of the target
(``metrics.rundir.RATE_HELD_SHARE``), missed no fire, and kept its p99 lag within the SLO.

Before the backends, pgbench runs pg_leased's claim-and-re-arm SQL against the same server
(``loadgen/pgbench``): the ceiling each backend's rate is shown against. ``sweep.json`` is
rewritten after every run, so an interrupted sweep still leaves what it measured; the HTML and
Markdown reports (``bench report`` of the sweep's runs, with a sweep section) come last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import click

from bench.errors import BenchError, UsageError
from bench.report_cmd import RUN_DIR_LINE, _default_schedulers, _new_run_dir, _run_dirs

SWEEP_JSON = "sweep.json"
RATE_HELD_SHARE = 0.95  # as metrics.rundir.RATE_HELD_SHARE: achieved below 95% of target is not held
MAX_OFFERED_SHORTFALL = 0.10  # the workload may offer up to 10% less than the target without blame (see judge)
DEFAULT_RATES = "300,556,1000,2000,5000"
# Short defaults so a sweep of every backend finishes in minutes on a 2-core machine.
DEFAULT_DURATION = "30s"
DEFAULT_WARMUP = "10s"
# The harness-ceiling preset (10-20 s poll intervals, a 2 ms provider) with the seeds' 4 kB
# poll state (seeds/003: wide, TOASTed rows). Short intervals keep the population (rate x mean
# interval) at 5,000/s to 75,000 triggers and make every trigger fire several times in a short
# run; the fast provider keeps the simulated provider's tail out of the scheduler's lag (with the
# production preset's 900 ms p99 poll, a batch lasts as long as its slowest poll and even the
# in-memory scheduler shows ~1 s p99 lag at 500/s: that measures the provider, not the store).
DEFAULT_WORKLOAD = "ceiling"
DEFAULT_WORKLOAD_ARGS = ["--state-size", "4096"]


# -- the stop rule (pure; tests/unit/test_sweep_rule.py) ---------------------------------------


# A backend that batches due timers for up to its max lag (temporal_shards: MaxLag 10 s,
# seeds/003) is not in steady state until that long after its first fires: a shorter warm-up
# undercounts its achieved rate (fires due in the window arrive after it). Its warm-up is
# therefore at least this many times its declared max lag.
WARMUP_MAX_LAG_FACTOR = 1.5


def warmup_for(warmup_s: float, max_lag_s: float | None) -> float:
    """The warm-up of one backend's runs, seconds: --warmup, or longer for a long max lag."""
    if max_lag_s is None:
        return warmup_s
    return max(warmup_s, WARMUP_MAX_LAG_FACTOR * float(max_lag_s))


def parse_rates(text: str) -> list[float]:
    """``300,556/s,1000`` -> [300.0, 556.0, 1000.0], ascending, duplicates dropped. ValueError."""
    from loadgen.rates import parse_rate

    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"invalid --rates {text!r}: give comma-separated fire rates such as {DEFAULT_RATES}")
    return sorted({parse_rate(p) for p in parts})


MAX_LAG = "max-lag"
# seeds/003: pg_queue's scheduler wakes once a second and temporal_shards batches due timers for
# up to MaxLag (10 s) by design; a 1 s p99 would judge those designs, not their capacity. Issue 11
# sets their targets accordingly (temporal_shards: "lag within MaxLag plus poll time").
DEFAULT_SLO = f"1s,pg_queue={MAX_LAG},temporal_shards={MAX_LAG}"


def parse_slo(text: str) -> tuple[float, dict[str, float | str]]:
    """``1s,temporal_shards=max-lag,pg_queue=2s`` -> (1000.0, {"temporal_shards": "max-lag",
    "pg_queue": 2000.0}): the p99 SLO in ms for every backend, then per-backend overrides (a
    duration, or ``max-lag``: the backend's own declared bound, ``capabilities.max_lag_s``)."""
    from loadgen.rates import parse_duration

    default_ms: float | None = None
    overrides: dict[str, float | str] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        target = value.strip() if eq else name.strip()
        if target == MAX_LAG:
            parsed: float | str = MAX_LAG
        else:
            try:
                parsed = parse_duration(target) * 1000.0
            except ValueError:
                raise ValueError(f"invalid --slo-p99 part {part!r}; use a duration (1s, 250ms), "
                                 f"NAME=duration or NAME={MAX_LAG}, comma-separated") from None
            if parsed <= 0:
                raise ValueError(f"invalid --slo-p99 part {part!r}: the SLO must be positive")
        if eq:
            overrides[name.strip()] = parsed
        elif parsed == MAX_LAG:
            raise ValueError(f"invalid --slo-p99 {text!r}: the first part is the SLO for every backend, "
                             f"a duration such as 1s; {MAX_LAG} goes with a name (temporal_shards={MAX_LAG})")
        else:
            default_ms = float(parsed)
    if default_ms is None:
        raise ValueError(f"invalid --slo-p99 {text!r}: give the SLO for every backend first, e.g. {DEFAULT_SLO}")
    return default_ms, overrides


def slo_for(name: str, default_ms: float, overrides: dict[str, float | str], max_lag_s: float | None) -> tuple[float, str]:
    """(p99 SLO in ms, where it comes from) for one backend."""
    value = overrides.get(name)
    if value is None:
        return default_ms, "--slo-p99"
    if value == MAX_LAG:
        if max_lag_s is None:
            return default_ms, f"--slo-p99 (the declared max lag of {name} is unknown)"
        return float(max_lag_s) * 1000.0, f"{name}'s declared max lag (capabilities.max_lag_s)"
    return float(value), f"--slo-p99 {name}="


def writes_per_fire(summary: dict[str, Any]) -> float | None:
    """Row writes (inserts + updates + deletes of the scheduler's tables) per fire; None without tables."""
    pf = summary.get("per_fire") or {}
    parts = [pf.get(k) for k in ("inserts", "updates", "deletes")]
    if all(p is None for p in parts):
        return None
    return float(sum(p or 0.0 for p in parts))


def judge(summary: dict[str, Any] | None, target: float, slo_p99_ms: float, exit_code: int = 0,
          offered: float | None = None) -> tuple[bool, str | None]:
    """(held, why not). The order of the reasons is the order they are checked.

    ``offered``: fires per second the workload made due in the measured window. The polling
    workload is closed-loop (a trigger's next fire is armed from when its poll ran, as in
    seeds/003), so a backend's own lag lowers the load it is offered (a backend batching for
    up to 10 s serves triggers every interval + lag), and a synthetic population's due rate
    wanders a few percent over a short window. Throughput is therefore judged against 95% of
    the offered rate when that is below the target by at most ``MAX_OFFERED_SHORTFALL``, else
    against 95% of the target; lag is judged by the SLO and saturation by missed fires."""
    if summary is None:
        return False, f"no summary (bench run exited {exit_code})"
    if not summary.get("complete", False):
        return False, f"incomplete: {summary.get('incomplete_reason') or 'stopped early'}"
    if exit_code != 0:
        return False, f"bench run exited {exit_code}"
    achieved = summary.get("achieved_rate")
    # Relief is bounded: an offered rate far below the target means the backend's own lag
    # throttled the closed loop (a saturated backend lowers its own load); the target stands then.
    relieved = offered is not None and (1 - MAX_OFFERED_SHORTFALL) * target <= offered < target
    bar = offered if relieved else target
    if achieved is None or achieved < RATE_HELD_SHARE * bar:
        got = "nothing" if achieved is None else f"{achieved:,.1f}/s"
        of = f"{target:,.0f}/s" + (f" (offered {offered:,.1f}/s)" if relieved else "")
        return False, f"rate not held: achieved {got} of {of} (needs {100 * RATE_HELD_SHARE:.0f}%)"
    missed = int(summary.get("missed") or 0)
    if missed > 0:
        return False, f"{missed:,} missed fires"
    p99 = (summary.get("lag_ms") or {}).get("p99")
    if p99 is None:
        return False, "no lag measured"
    if p99 > slo_p99_ms:
        return False, f"p99 lag {p99:,.1f} ms over the SLO of {slo_p99_ms:,.0f} ms"
    return True, None


def offered_rate(run_dir: Path) -> float | None:
    """Distinct (timer_id, due_at) due in the run's measured window, per second (missed ones
    included): the load the workload really offered."""
    import numpy as np

    from metrics import rundir

    try:
        window = rundir.read_config(run_dir).get("window") or {}
        start, end = float(window["measure_start"]), float(window["measure_end"])
        fires = rundir.read_fires(run_dir)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if end <= start or len(fires) == 0:
        return None
    due = fires.column("due_at").to_numpy(zero_copy_only=False).astype(np.float64)
    ids = np.asarray(fires.column("timer_id").to_pylist(), dtype=object)
    sel = (due >= start) & (due < end)
    return (int(sel.sum()) - rundir.duplicates(ids[sel], due[sel])) / (end - start)


def max_sustainable(entries: list[dict[str, Any]]) -> float | None:
    """The highest rate held before the first rate not held (rates ascending); None if the first failed."""
    best = None
    for e in sorted(entries, key=lambda e: e["rate"]):
        if not e["held"]:
            break
        best = e["rate"]
    return best


def rate_key(rate: float) -> str:
    return f"{rate:g}"


# -- the command -------------------------------------------------------------------------------


@click.command("sweep", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--scheduler", "scheduler_opt", default="all", show_default=True,
              help="A registered scheduler, a comma-separated list, or 'all' (every backend, memory last).")
@click.option("--rates", default=DEFAULT_RATES, show_default=True, help="Target fire rates to step through, per second.")
@click.option("--slo-p99", "slo_spec", default=DEFAULT_SLO, show_default=True,
              help="A rate is held only with p99 lag at most this: a duration for every backend, then optional "
                   f"NAME=duration or NAME={MAX_LAG} (the backend's declared max lag) overrides.")
@click.option("--duration", default=DEFAULT_DURATION, show_default=True, help="Measured window of each run.")
@click.option("--warmup", default=DEFAULT_WARMUP, show_default=True, help="Warm-up of each run.")
@click.option("--workload", default=None,
              help=f"Workload preset or YAML file (default: the {DEFAULT_WORKLOAD} preset, 10s..20s intervals, "
                   f"with {' '.join(DEFAULT_WORKLOAD_ARGS)}).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"), show_default=True,
              help="Parent of the sweep directory sweep-<timestamp>/.")
@click.option("--retries", default=1, show_default=True, type=click.IntRange(0, 5),
              help="Runs of a rate not held before the backend stops there (a shared machine has bad seconds); "
                   "a rate is held if any of its runs held, and every run is kept in sweep.json.")
@click.option("--no-pgbench", is_flag=True, help="Skip the database ceiling (pgbench).")
@click.option("--pgbench-duration", default="10s", show_default=True, help="pgbench -T per batch size.")
@click.option("--dsn", envvar="TIMERBENCH_DSN", default=None, help="Postgres connection string (default: the embedded server).")
@click.option("--temporal-address", envvar="TIMERBENCH_TEMPORAL", default=None,
              help="host:port of a Temporal frontend (default: the embedded dev server).")
@click.pass_context
def sweep(ctx: click.Context, scheduler_opt: str, rates: str, slo_spec: str, duration: str, warmup: str,
          workload: str | None, out_dir: Path, retries: int, no_pgbench: bool, pgbench_duration: str,
          dsn: str | None, temporal_address: str | None) -> None:
    """Step each backend up --rates until it cannot hold one; record its maximum sustainable rate.

    Writes runs/sweep-<timestamp>/: one run directory per (backend, rate), sweep.json, report.html
    and report.md. Any other option (such as --seed or --opt key=value) is passed to every
    `bench run`.
    """
    from loadgen.rates import parse_duration

    try:
        rate_list = parse_rates(rates)
        slo_ms, slo_overrides = parse_slo(slo_spec)
        pgbench_s = parse_duration(pgbench_duration)
        parse_duration(duration)
        warmup_s = parse_duration(warmup)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    choice = "all" if scheduler_opt.strip() == "all" else scheduler_opt
    names = _default_schedulers(choice)
    # Workload overrides given as extra options (--interval, --state-size, ...) reach bench run
    # after these, and a later option wins there.
    workload_args = ["--workload", DEFAULT_WORKLOAD, *DEFAULT_WORKLOAD_ARGS] if workload is None else ["--workload", workload]
    passthrough = [*workload_args, "--duration", duration]
    for flag, value in (("--dsn", dsn), ("--temporal-address", temporal_address)):
        if value is not None:
            passthrough += [flag, value]
    passthrough += list(ctx.args)

    started = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started))
    sweep_dir = out_dir / f"sweep-{stamp}"
    n = 2
    while sweep_dir.exists():
        sweep_dir = out_dir / f"sweep-{stamp}-{n}"
        n += 1
    sweep_dir.mkdir(parents=True)
    data: dict[str, Any] = {
        "started_at": started,
        "finished_at": None,
        "complete": False,
        "command": ["bench", *_shown(sys.argv[sys.argv.index("sweep"):] if "sweep" in sys.argv else ["sweep"])],
        "rates": rate_list,
        "slo_p99_ms": slo_ms,
        "slo_spec": slo_spec,
        "retries": retries,
        "duration": duration,
        "warmup": warmup,
        "warmup_rule": (f"each backend warms up for --warmup or {WARMUP_MAX_LAG_FACTOR:g} x its declared max lag, "
                        "whichever is longer (backends[name].warmup_s)"),
        "workload": {"args": workload_args + list(ctx.args),
                     "note": " ".join(["preset", DEFAULT_WORKLOAD, "(poll intervals 10s..20s, 2 ms provider)",
                                       *DEFAULT_WORKLOAD_ARGS] if workload is None else [workload]) + (
                         f" {' '.join(ctx.args)}" if ctx.args else "")},
        "run_args": _shown(passthrough),
        "rule": (f"rates in ascending order; a backend stops at the first rate not held: incomplete run, "
                 f"achieved < {100 * RATE_HELD_SHARE:.0f}% of the target (of the offered rate, fires due in the window "
                 f"per second, when the closed-loop workload offered up to {100 * MAX_OFFERED_SHORTFALL:.0f}% less), any missed fire, or p99 lag over the "
                 f"backend's SLO ({slo_spec}); a rate not held is run again up to {retries} more time(s) and counts as "
                 f"held if any run held. Maximum sustainable rate: the last rate held."),
        "pgbench": None,
        "backends": {},
    }
    path = sweep_dir / SWEEP_JSON
    _save(path, data)
    click.echo(f"sweep {sweep_dir}: {', '.join(names)} at {', '.join(rate_key(r) for r in rate_list)} fires/s; "
               f"workload: {data['workload']['note']}; {duration} measured + {warmup} warm-up per rate", err=True)

    data["pgbench"] = _ceiling(dsn, no_pgbench, pgbench_s, sweep_dir)
    _save(path, data)

    from reports.report import FailedRun

    failures: list[FailedRun] = []
    run_dirs: list[str] = []
    interrupted = False
    for name in names:
        max_lag_s = _declared_max_lag_s(name, None)
        backend_slo_ms, slo_source = slo_for(name, slo_ms, slo_overrides, max_lag_s)
        backend_warmup_s = warmup_for(warmup_s, max_lag_s)
        backend: dict[str, Any] = {"rates": {}, "max_sustainable_rate": None, "stopped_at": None, "stop_reason": None,
                                   "fraction_of_ceiling": None, "slo_p99_ms": backend_slo_ms, "slo_source": slo_source,
                                   "declared_max_lag_s": max_lag_s, "warmup_s": backend_warmup_s}
        data["backends"][name] = backend
        entries: list[dict[str, Any]] = []
        for rate in rate_list:
            earlier: list[dict[str, Any]] = []  # attempts before the last (retries of a rate not held)
            for attempt in range(1 + retries):
                cmd = [sys.executable, "-m", "bench.cli", "run", "--scheduler", name, "--rate", f"{rate:g}/s",
                       "--out", str(sweep_dir), "--warmup", f"{backend_warmup_s:g}s", *passthrough]
                shown = ["bench", *_shown(cmd[3:])]
                again = f" (retry {attempt} of {retries})" if attempt else ""
                click.echo(f"== {name} at {rate:g}/s{again}: {' '.join(shown)}", err=True)
                code, made, tail, interrupted = _bench_run(cmd, sweep_dir, name)
                summary = None
                if made is not None:
                    run_dirs.append(str(made))
                    try:
                        from metrics.rundir import read_summary

                        summary = read_summary(made)
                    except (OSError, ValueError):
                        summary = None
                if code != 0:
                    failures.append(FailedRun(name, shown, code, "\n".join(tail), str(made) if made else None))
                if made is not None and slo_overrides.get(name) == MAX_LAG:
                    # the bound of the options the run really used (--opt may change it)
                    backend_slo_ms, slo_source = slo_for(name, slo_ms, slo_overrides, _declared_max_lag_s(name, made))
                    backend.update(slo_p99_ms=backend_slo_ms, slo_source=slo_source)
                offered = offered_rate(made) if made is not None else None
                held, why = judge(summary, rate, backend_slo_ms, code, offered)
                entry = _entry(rate, made, code, summary, held, why)
                entry["slo_p99_ms"] = backend_slo_ms
                entry["offered"] = offered
                entry["earlier_attempts"] = earlier
                if held or interrupted or attempt == retries:
                    break
                click.echo(f"== {name} at {rate:g}/s: not held ({why}); trying it again", err=True)
                earlier = earlier + [{k: v for k, v in entry.items() if k != "earlier_attempts"}]
            entries.append(entry)
            backend["rates"][rate_key(rate)] = entry
            backend["max_sustainable_rate"] = max_sustainable(entries)
            ceiling = (data["pgbench"] or {}).get("rows_per_s")
            if backend["max_sustainable_rate"] is not None and ceiling:
                backend["fraction_of_ceiling"] = backend["max_sustainable_rate"] / ceiling
            _save(path, data)
            click.echo(f"== {name} at {rate:g}/s: " + ("held" if held else f"NOT held ({why})"), err=True)
            if not held:
                backend["stopped_at"] = rate
                backend["stop_reason"] = why
                break
            if interrupted:
                break
        if backend["stopped_at"] is None and not interrupted:
            backend["stop_reason"] = f"held every rate up to {rate_key(rate_list[-1])}/s (the ceiling is higher)"
        _save(path, data)
        if interrupted:
            break

    data["finished_at"] = time.time()
    data["complete"] = not interrupted
    html, md = sweep_dir / "report.html", sweep_dir / "report.md"
    data["report"] = {"html": str(html), "markdown": str(md)}
    _save(path, data)
    if run_dirs:
        from reports.report import write_report

        write_report(run_dirs, html, md, failures=failures)
    _print_table(data)
    click.echo(f"sweep: {path}")
    if run_dirs:
        click.echo(f"report: {html}")
    if interrupted:
        raise KeyboardInterrupt


def _declared_max_lag_s(name: str, run_dir: Path | None) -> float | None:
    """The backend's declared max lag (``capabilities.max_lag_s``) for the options a run used
    (its config.json), or for its defaults; None when it cannot be built offline. Building a
    scheduler connects to nothing (``setup()`` does)."""
    from schedulers.base import StoreContext, scheduler_class

    options: dict[str, Any] | None = None
    if run_dir is not None:
        try:
            from metrics.rundir import read_config

            options = read_config(run_dir).get("options")
        except (OSError, ValueError):
            options = None
    try:
        cls = scheduler_class(name)
        probe = StoreContext(dsn="postgresql://127.0.0.1:1/probe", schema="sweep_probe", temporal_address="127.0.0.1:1")
        for opts in ([options] if options else []) + [dict(cls.default_options)]:
            try:
                return float(cls(probe, **opts).capabilities.max_lag_s)
            except Exception:
                continue
    except Exception:
        return None
    return None


def _shown(args: list[str]) -> list[str]:
    """Arguments as shown (terminal, sweep.json): a DSN without its password."""
    from bench.stack import redact_argv

    return redact_argv(args)


def _save(path: Path, data: dict[str, Any]) -> None:
    from metrics.rundir import write_json

    write_json(path, data)


def _entry(rate: float, made: Path | None, code: int, summary: dict[str, Any] | None, held: bool, why: str | None) -> dict[str, Any]:
    s = summary or {}
    lag = s.get("lag_ms") or {}
    return {
        "rate": rate,
        "run_dir": str(made) if made else None,
        "exit_code": code,
        "achieved": s.get("achieved_rate"),
        "p50_ms": lag.get("p50"),
        "p99_ms": lag.get("p99"),
        "max_ms": lag.get("max"),
        "missed": s.get("missed"),
        "writes_per_fire": writes_per_fire(s) if s else None,
        "wal_bytes_per_fire": (s.get("per_fire") or {}).get("wal_bytes"),
        "held": held,
        "reason": why,
    }


def _bench_run(cmd: list[str], out_dir: Path, name: str) -> tuple[int, Path | None, list[str], bool]:
    """Run one ``bench run``, streaming its output; (exit code, run dir, output tail, interrupted)."""
    before = _run_dirs(out_dir)
    tail: deque[str] = deque(maxlen=40)
    said: Path | None = None
    interrupted = False
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None

    def consume(echo: bool) -> None:
        nonlocal said
        for line in proc.stdout:
            if echo:
                click.echo(line, nl=False, err=True)
            tail.append(line.rstrip("\n"))
            if line.startswith(RUN_DIR_LINE):
                said = Path(line[len(RUN_DIR_LINE):].strip())

    try:
        consume(True)
    except KeyboardInterrupt:
        # Ctrl-C reached the run too (same process group): let it write its directory.
        interrupted = True
        consume(False)
    code = proc.wait()
    made = said if said is not None and (said / "config.json").exists() else _new_run_dir(out_dir, before, name)
    if made is not None and not (made / "config.json").exists():
        made = None
    return code, made, list(tail), interrupted


def _ceiling(dsn: str | None, disabled: bool, duration_s: float, sweep_dir: Path) -> dict[str, Any]:
    """The pgbench ceiling as sweep.json holds it; ``skipped`` says why when there is none."""
    if disabled:
        return {"skipped": "disabled by --no-pgbench", "rows_per_s": None, "results": []}
    from bench import stack
    from loadgen import pgbench

    try:
        resolved = stack.resolve(dsn, None, False, say=lambda m: click.echo(f"note: {m}", err=True)).dsn
    except BenchError as exc:
        return {"skipped": f"no Postgres for pgbench: {exc}", "rows_per_s": None, "results": []}
    try:
        bin_dir = stack.pg_bin_dir()
    except BenchError:
        bin_dir = None
    ceiling = pgbench.measure(resolved, pgbench.find_pgbench(bin_dir), sweep_dir, duration_s=duration_s,
                              say=lambda m: click.echo(f"== {m}", err=True))
    out = ceiling.to_json()
    out["command"] = _shown(out.get("command") or [])
    if ceiling.skipped:
        click.echo(f"== pgbench ceiling skipped: {ceiling.skipped}", err=True)
    else:
        for r in ceiling.results:
            click.echo(f"== pgbench batch {r.batch}: " + (f"error: {r.error}" if r.error else
                       f"{r.tps:,.1f} tps x {r.batch} = {r.tps_x_batch:,.0f} rows/s; re-armed {r.rearmed_per_s:,.0f} rows/s"), err=True)
    return out


def _print_table(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = 160  # piped output (a log file): do not wrap the reasons at 80 columns
    ceiling = (data.get("pgbench") or {}).get("rows_per_s")
    t = Table(title=f"sweep: p99 SLO {data['slo_spec']}; workload {data['workload']['note']}")
    for col in ("backend", "rate/s", "offered/s", "achieved/s", "p99 lag", "missed", "writes/fire", "held"):
        t.add_column(col, justify="left" if col in ("backend", "held") else "right")
    for name, b in data["backends"].items():
        for key, e in b["rates"].items():
            t.add_row(name, key, _fmt(e.get("offered"), "{:,.0f}"), _fmt(e["achieved"], "{:,.0f}"), _fmt(e["p99_ms"], "{:,.1f} ms"),
                      _fmt(e["missed"], "{:,}"), _fmt(e["writes_per_fire"], "{:.2f}"),
                      "yes" if e["held"] else f"no: {e['reason']}")
    console.print(t)
    m = Table(title="maximum sustainable rate" + (f" vs the pgbench ceiling ({ceiling:,.0f} rows/s)" if ceiling else ""))
    for col in ("backend", "max rate/s", "of ceiling", "p99 SLO", "stopped"):
        m.add_column(col, justify="left" if col in ("backend", "stopped") else "right")
    for name, b in data["backends"].items():
        frac = b.get("fraction_of_ceiling")
        m.add_row(name, _fmt(b["max_sustainable_rate"], "{:,.0f}", "below the lowest rate"),
                  "-" if frac is None else f"{100 * frac:.1f}%", _fmt(b.get("slo_p99_ms"), "{:,.0f} ms"),
                  str(b.get("stop_reason") or "-"))
    console.print(m)
    pg = data.get("pgbench") or {}
    if pg.get("skipped"):
        console.print(f"pgbench ceiling: skipped ({pg['skipped']})")


def _fmt(v: Any, pattern: str, none: str = "-") -> str:
    return none if v is None else pattern.format(v)

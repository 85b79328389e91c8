"""The database's own ceiling: pg_leased's claim-and-re-arm SQL driven by ``pgbench``.

A backend's sustainable fire rate means little without what the database alone can do on the
same machine at the same moment. This module measures that: ``pgbench`` runs pg_leased's
``claim_due`` statement exactly as ``schedulers/pg_leased/queries.sql`` has it (read from that
file at run time, bind parameters turned into pgbench variables) followed by ``rearm.sql`` (its
``commit_batch`` re-arm, by owner), against a table made by pg_leased's own ``setup()`` (its
``schema.sql``, default options) in a schema of its own, filled with scheduled rows.

Each batch size runs ``pgbench -n -c CLIENTS -j THREADS -T DURATION -f script``. Reported per
batch: pgbench's tps, ``tps x batch`` (rows per second if every claim came back full) and the
rows actually re-armed per second (from the table's ``version`` column: every re-arm adds 1),
which is the figure the ceiling uses. Every row is due from the start and a re-armed row is due
again at once, so a claim always finds a backlog of about ``(ROWS_PER_CLIENT_BATCH - 1) x
clients x batch`` due rows: the measure is the cost of the SQL, not of waiting for due rows.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
REARM_SQL = HERE / "rearm.sql"
SETUP_SQL = HERE / "setup.sql"
PG_LEASED_QUERIES = HERE.parent.parent / "schedulers" / "pg_leased" / "queries.sql"

BATCHES = (1, 100, 800)  # claim + re-arm at batch sizes 1, 100 and 800 (batch-800)
CLIENTS = 4  # pgbench -c
THREADS = 2  # pgbench -j: this machine has 2 cores
DURATION_S = 10  # pgbench -T, seconds per batch size
TENANTS = 200  # as the production preset
MIN_ROWS = 2000  # the table never holds fewer rows than this
ROWS_PER_CLIENT_BATCH = 3  # table rows = max(MIN_ROWS, this x clients x batch)
OWNER_EXPR = "concat('pgbench-', :client_id)"  # one lease owner per pgbench client
LEASE_S = 30.0  # pg_leased's default lease_s (never expires within a pgbench run)

_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
_FAILED = re.compile(r"number of failed transactions: (\d+)")
_PROCESSED = re.compile(r"number of transactions actually processed: (\d+)")


def claim_sql() -> str:
    """pg_leased's ``claim_due`` as a pgbench statement: ``{schema}.`` dropped and ``{schedule}``
    made ``schedule`` (pgbench runs with the ceiling's schema first on its search_path),
    ``%(name)s`` turned into ``:name`` variables (set with ``-D``), the owner into one per client."""
    from schedulers.sqlfile import load_blocks

    body = load_blocks(PG_LEASED_QUERIES)["claim_due"]
    body = body.replace("{schedule}", "schedule").replace("{schema}.", "").replace("{{", "{").replace("}}", "}")
    body = body.replace("%(owner)s", OWNER_EXPR)
    body = re.sub(r"%\((\w+)\)[sbt]", r":\1", body)  # %(x)s, %(x)b (binary), %(x)t
    return body.rstrip().rstrip(";") + ";"


def script_text() -> str:
    """One pgbench transaction script: claim (its own transaction, as pg_leased commits the claim
    before any work), then re-arm (a second one, as commit_batch)."""
    rearm = REARM_SQL.read_text().strip()
    return (
        f"-- generated from {PG_LEASED_QUERIES.name} (claim_due) and loadgen/pgbench/{REARM_SQL.name}\n"
        f"{claim_sql()}\n\n{rearm}\n"
    )


@dataclass
class BatchResult:
    batch: int
    rows: int  # rows in the table
    tps: float | None = None
    tps_x_batch: float | None = None
    rearmed_per_s: float | None = None  # rows really claimed and re-armed per second
    transactions: int | None = None
    failed_transactions: int | None = None
    error: str | None = None


@dataclass
class Ceiling:
    """What ``measure`` found; ``skipped`` says why there is nothing (pgbench absent, ...)."""

    skipped: str | None = None
    pgbench: str | None = None
    version: str | None = None
    clients: int = CLIENTS
    threads: int = THREADS
    duration_s: float = DURATION_S
    schema: str | None = None
    script: str | None = None  # path of the script as run
    command: list[str] = field(default_factory=list)
    results: list[BatchResult] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def rows_per_s(self) -> float | None:
        """The ceiling: the most rows re-armed per second at any batch size."""
        values = [r.rearmed_per_s for r in self.results if r.rearmed_per_s]
        return max(values) if values else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows_per_s"] = self.rows_per_s
        best = max((r for r in self.results if r.rearmed_per_s), key=lambda r: r.rearmed_per_s, default=None)
        d["best_batch"] = best.batch if best else None
        return d


def find_pgbench(bin_dir: Path | None) -> Path | None:
    """``pgbench`` beside the Postgres binaries, else on PATH; None when absent."""
    if bin_dir is not None and (bin_dir / "pgbench").exists():
        return bin_dir / "pgbench"
    found = shutil.which("pgbench")
    return Path(found) if found else None


def _conn_args(dsn: str) -> tuple[list[str], dict[str, str]]:
    """pgbench's -h -p -U and database name from a DSN; the password travels in the environment
    (PGPASSWORD, or PGPASSFILE for a DSN naming a password file), never in argv."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    args = [
        "-h",
        str(info.get("host") or "127.0.0.1"),
        "-p",
        str(info.get("port") or 5432),
        "-U",
        str(info.get("user") or "postgres"),
    ]
    env = {}
    if info.get("password"):
        env["PGPASSWORD"] = str(info["password"])
    if info.get("passfile"):
        env["PGPASSFILE"] = str(info["passfile"])
    return args + [str(info.get("dbname") or "postgres")], env


def parse_output(text: str) -> tuple[float | None, int | None, int | None]:
    """(tps, transactions processed, failed transactions) from pgbench's report."""
    tps = _TPS.search(text)
    processed = _PROCESSED.search(text)
    failed = _FAILED.search(text)
    return (
        float(tps.group(1)) if tps else None,
        int(processed.group(1)) if processed else None,
        int(failed.group(1)) if failed else None,
    )


def measure(
    dsn: str,
    pgbench: Path | None,
    out_dir: Path,
    batches=BATCHES,
    clients: int = CLIENTS,
    threads: int = THREADS,
    duration_s: float = DURATION_S,
    say: Callable[[str], None] = lambda m: None,
) -> Ceiling:
    """Run the ceiling at each batch size in ``batches``; never raises for a failed pgbench (the
    reason is in the result). ``out_dir`` receives the script as run."""
    ceiling = Ceiling(clients=clients, threads=threads, duration_s=duration_s)
    if pgbench is None or not pgbench.exists():
        ceiling.skipped = "pgbench not found (neither beside the Postgres binaries nor on PATH)"
        return ceiling
    ceiling.pgbench = str(pgbench)
    try:
        ceiling.version = (
            subprocess.run([str(pgbench), "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
            or None
        )
    except Exception as exc:
        ceiling.skipped = f"pgbench at {pgbench} does not run: {type(exc).__name__}: {exc}"
        return ceiling
    out_dir.mkdir(parents=True, exist_ok=True)
    script = out_dir / "pgbench_claim_rearm.sql"
    script.write_text(script_text())
    ceiling.script = str(script)
    ceiling.schema = f"pgbench_ceiling_{time.strftime('%Y%m%d_%H%M%S', time.gmtime())}_{secrets.token_hex(3)}"
    ceiling.started_at = time.time()
    scheduler = _table(dsn, ceiling.schema)
    try:
        asyncio.run(scheduler.setup())
        conn_args, env_extra = _conn_args(dsn)
        env = dict(os.environ, **env_extra, PGOPTIONS=f"-c search_path={ceiling.schema}")
        for batch in batches:
            rows = max(MIN_ROWS, ROWS_PER_CLIENT_BATCH * clients * batch)
            result = BatchResult(batch=batch, rows=rows)
            ceiling.results.append(result)
            try:
                before = _prepare(dsn, ceiling.schema, rows)
                cmd = [
                    str(pgbench),
                    *conn_args[:-1],
                    "-n",
                    "-c",
                    str(clients),
                    "-j",
                    str(threads),
                    "-T",
                    f"{duration_s:g}",
                    "-f",
                    str(script),
                    "-D",
                    f"limit={batch}",
                    "-D",
                    "max_per_tenant=20",
                    "-D",
                    "tenant_scan=256",
                    "-D",
                    "overselect=2",
                    "-D",
                    f"lease_s={LEASE_S:g}",
                    "-D",
                    "split_state=true",  # pg_leased's default: the states are read with the claim
                    conn_args[-1],
                ]
                ceiling.command = [a for a in cmd]
                say(f"pgbench ceiling: batch {batch}, {rows:,} rows, {clients} clients, {duration_s:g} s")
                t0 = time.monotonic()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration_s + 120)
                elapsed = time.monotonic() - t0
                tps, processed, failed = parse_output(proc.stdout)
                if proc.returncode != 0 or tps is None:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                    result.error = f"pgbench exited {proc.returncode}: {' | '.join(tail)}"
                    continue
                after = _rearmed(dsn, ceiling.schema)
                result.tps = tps
                result.tps_x_batch = tps * batch
                result.transactions = processed
                result.failed_transactions = failed
                # pgbench's own window excludes connection set-up; ours includes it, so the
                # re-armed rate is slightly conservative.
                result.rearmed_per_s = (after - before) / max(min(elapsed, duration_s + 5), duration_s)
            except Exception as exc:
                result.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    except Exception as exc:
        ceiling.skipped = f"could not prepare the ceiling's table: {type(exc).__name__}: {exc}"
    finally:
        try:
            asyncio.run(scheduler.teardown(drop=True))
        except Exception:
            pass
        ceiling.finished_at = time.time()
    return ceiling


def _table(dsn: str, schema: str):
    """pg_leased itself, default options, in the ceiling's own schema: its setup() makes the table."""
    from schedulers.base import StoreContext, scheduler_class

    return scheduler_class("pg_leased")(StoreContext(dsn=dsn, schema=schema))


def _prepare(dsn: str, schema: str, rows: int) -> int:
    """Empty the table, fill it with ``rows`` due rows, vacuum; returns the re-arm count now."""
    import psycopg
    from psycopg import sql

    from schedulers.sqlfile import Queries

    q = Queries(SETUP_SQL, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("TRUNCATE {}.schedule").format(sql.Identifier(schema)))
        conn.execute(q["fill_schedule"], {"rows": rows, "tenants": TENANTS})
        conn.execute(q["vacuum_schedule"])
        return int(conn.execute(q["rearmed_total"]).fetchone()[0])


def _rearmed(dsn: str, schema: str) -> int:
    import psycopg

    from schedulers.sqlfile import Queries

    q = Queries(SETUP_SQL, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        total = int(conn.execute(q["rearmed_total"]).fetchone()[0])
        conn.execute(q["release_running"])
        return total

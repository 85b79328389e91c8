"""The cost tables beside Table 1, as data: dead tuples by relation at the end of each run
(``pgstattuple`` beside the statistics' ``n_dead_tup``) and each design's top statements by time
and by WAL per fire (``statements.parquet``). The writers render them; nothing here formats."""

from __future__ import annotations

from dataclasses import dataclass

from metrics.bill import DEAD_TUPLE_DISAGREE
from reports.load import Run

TOP_STATEMENTS = 5
QUERY_CHARS = 220  # statement text shown; the rest is in statements.parquet

SERVER_WIDE_NOTE = (
    "WAL, pg_stat_io, the servers' process figures and Temporal's counters are server-wide: anything else "
    "using the same server during a run counts too. A CHECKPOINT runs just before each measured window, so "
    "every window pays its first-touch full-page images alike, and a short window right after it pays more of "
    "them than a long one would. Bytes written: Postgres's own count of what it wrote to its files "
    "(pg_stat_io: WAL, data pages, extensions), and for Temporal what the kernel charged its process towards "
    "storage (Table 4 says why the kernel's count is not used for Postgres). Postgres defers most data-page "
    "writes to its next checkpoint (outside a short window), while SQLite checkpoints its WAL every ~4 MB, so "
    "the stores do not pay on the same schedule. Durable writes add rows (Postgres) to persistence write requests "
    "(Temporal); one request "
    "may write several rows of Temporal's own store. — : does not apply; not available: applies but could "
    "not be measured here (the reason is listed under the table)."
)
STATEMENTS_NOTE = (
    "From pg_stat_statements over the measured window only: this database's entries are reset at the "
    "window's start on the embedded server (elsewhere the window is the difference of two reads). "
    "Postgres 18 counts same-shaped statements as one entry when their tables carry the same names or "
    "aliases, whatever their schema (pg_partitioned's claims of all partitions are one entry), so another "
    "run on the same server at the same time would be counted here too. Per fire = the "
    "window's total over the fires received in it; the sampler's own statements are left out."
)
BLOAT_NOTE = (
    "pgstattuple reads every page of the table at the end of the run (after the measured window); "
    "n_dead_tup is the statistics system's running estimate, read at the same moment, which is what "
    "the sampled dead-tuple figures show. They count different things: pgstattuple counts dead tuples that "
    "still take space, n_dead_tup also counts the dead line pointers page pruning has already emptied "
    "(they wait for VACUUM), and is adjusted by each vacuum's own estimate. A disagreement above "
    f"{DEAD_TUPLE_DISAGREE:.0%} is warned about."
)


@dataclass
class BloatRow:
    run: str
    relation: str
    dead_exact: float | None
    dead_percent: float | None  # of the table's bytes
    free_bytes: float | None
    free_percent: float | None
    n_dead_tup: float | None
    live_exact: float | None
    disagree: bool


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def bloat_rows(runs: list[Run]) -> list[BloatRow]:
    out = []
    for r in runs:
        for rel in (r.summary.get("bloat") or {}).get("relations") or []:
            out.append(
                BloatRow(
                    run=r.label,
                    relation=str(rel.get("scope")),
                    dead_exact=_num(rel.get("dead_tuple_count")),
                    dead_percent=_num(rel.get("dead_tuple_percent")),
                    free_bytes=_num(rel.get("free_space")),
                    free_percent=_num(rel.get("free_percent")),
                    n_dead_tup=_num(rel.get("n_dead_tup")),
                    live_exact=_num(rel.get("tuple_count")),
                    disagree=bool(rel.get("disagree")),
                )
            )
    return out


PROCESS_NOTE = (
    "Per fire, what each kind of server process did in the measured window, from /proc/<pid>/io: bytes it "
    "passed to write() (files, and sockets written with write(): Temporal's gRPC answers count there), what the "
    "kernel charged it towards storage (counted by page-cache folio when a clean folio is dirtied: a Postgres "
    "commit rewrites its WAL page after each fsync and is charged a whole large folio, ~240 KB measured for "
    "8.5 KB written, so for Postgres this overstates the bytes many times; SQLite's 4 KB WAL frames were "
    "charged what they wrote), and its CPU. Postgres processes are told apart by their title; client backends "
    "are the designs' connections (and the sampler's); the postmaster row also holds what exiting processes "
    "did after their last reading. The bill adds pg_stat_io for Postgres and the kernel's count for Temporal."
)


@dataclass
class ProcessRow:
    run: str
    server: str
    kind: str
    write_chars_per_fire: float | None
    write_bytes_per_fire: float | None
    cpu_ms_per_fire: float | None


def process_rows(runs: list[Run]) -> list[ProcessRow]:
    """Per run and server, each kind of process's bytes written and CPU per fire, largest first."""
    out = []
    for r in runs:
        for server, figures in sorted((r.summary.get("servers") or {}).items()):
            per_fire = figures.get("per_fire") or {}
            kinds = {k.split(".", 1)[1] for k in per_fire if k.startswith(("write_bytes.", "cpu_s."))}
            rows = [
                ProcessRow(
                    r.label,
                    server,
                    kind,
                    _num(per_fire.get(f"write_chars.{kind}")),
                    _num(per_fire.get(f"write_bytes.{kind}")),
                    None if _num(per_fire.get(f"cpu_s.{kind}")) is None else 1000.0 * float(per_fire[f"cpu_s.{kind}"]),
                )
                for kind in kinds
            ]
            rows = [x for x in rows if x.write_chars_per_fire or x.write_bytes_per_fire or x.cpu_ms_per_fire]
            out.extend(sorted(rows, key=lambda x: -(x.write_chars_per_fire or 0.0)))
    return out


@dataclass
class StatementRow:
    query: str
    calls_per_fire: float
    ms_per_fire: float
    mean_ms: float
    wal_bytes_per_fire: float
    fpi_per_fire: float
    dirtied_per_fire: float
    rows_per_call: float


@dataclass
class TopStatements:
    run: str
    by_time: list[StatementRow]
    by_wal: list[StatementRow]
    unavailable: str = ""  # why there are none


def top_statements(run: Run, n: int = TOP_STATEMENTS) -> TopStatements:
    """The design's top ``n`` statements by execution time and by WAL bytes, per fire."""
    fires = float(run.summary.get("fires") or 0)
    df = run.statements
    if df is None or df.empty or fires <= 0:
        why = (run.summary.get("unavailable") or {}).get("statements") or ""
        return TopStatements(run.label, [], [], why)
    design = df[df["source"] == "design"]

    def rows(order: str) -> list[StatementRow]:
        picked = design.sort_values(order, ascending=False).head(n)
        picked = picked[picked[order] > 0]
        return [
            StatementRow(
                query=" ".join(str(q).split())[:QUERY_CHARS],
                calls_per_fire=c / fires,
                ms_per_fire=t / fires,
                mean_ms=m,
                wal_bytes_per_fire=w / fires,
                fpi_per_fire=fpi / fires,
                dirtied_per_fire=d / fires,
                rows_per_call=(rw / c) if c else 0.0,
            )
            for q, c, t, m, w, fpi, d, rw in zip(
                picked["query"],
                picked["calls"],
                picked["total_exec_ms"],
                picked["mean_exec_ms"],
                picked["wal_bytes"],
                picked["wal_fpi"],
                picked["shared_blks_dirtied"],
                picked["rows"],
            )
        ]

    return TopStatements(run.label, rows("total_exec_ms"), rows("wal_bytes"))

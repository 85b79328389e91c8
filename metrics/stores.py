"""What each server a run uses pays, seen from outside its SQL: the disk writes and CPU of its
processes, the size of its files, and for Temporal the counters its Prometheus endpoint reports.

The figures are **by server**, never by design: a run names the servers it uses
(:class:`ServerWatch`, built by the engine, which knows which servers it started) and every
design that uses a server is billed the same way. The samples' scope is ``server:<name>``
(:func:`metrics.rundir.server_scope`); every metric is cumulative since the sampler's baseline.

Process figures (:data:`PROCESS_METRICS`: ``write_bytes``, ``write_chars``, ``cpu_s``) come from
``/proc/<pid>/io`` and the CPU times, summed over the server's process tree (the postmaster and
every backend, checkpointer, WAL writer, ...; the Temporal dev server is one process), and by
kind of process (``write_bytes.<kind>`` ...: for Postgres the role in the process title,
``client backend`` for the connections; else the process name), so a bill shows whether the
statements or the vacuum paid it. Each process is followed by pid (see :class:`ProcessTree`).
Readable for a server on this machine run by this user, or by any user when we are root.

``bytes_written`` of a server is the figure the bill adds up: what the server says it wrote to
its files when it says so (Postgres: pg_stat_io, see :mod:`metrics.pgcost`), else what the kernel
charged its processes towards storage (``write_bytes``; :attr:`ServerWatch.bytes_written_from`).

Temporal counters (``persistence_requests`` and ``persistence_requests.<operation>``, reads and
writes, ``actions``, ``commands.<type>``, workflow and activity outcomes, ``frontend_requests.<op>``)
are the server's own, server-wide, summed over every label but the one named. One scrape of the
dev server's endpoint is ~1.9 MB of text and costs the server ~40 ms of CPU (measured), so the
sampler scrapes every few seconds and at the window's edges, not every second.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# write_bytes: what the kernel charged towards storage, counted by page cache folio when a clean
# folio is dirtied: a small write into a large folio is charged the whole folio (Linux 6.x; a
# Postgres commit rewrites its WAL page after each fsync and was measured at ~240 KB charged
# for 8.5 KB written), while SQLite's 4 KB WAL frames were charged what they wrote.
# write_chars: bytes passed to write() and friends (files, and sockets written with write()).
PROCESS_METRICS = ("write_bytes", "write_chars", "cpu_s")
# Temporal persistence operations that only read. Every other operation writes (Create*, Update*,
# Append*, Complete*, RangeComplete*, Delete*, Upsert*, Put*, ConflictResolve*, Set*, ...).
READ_OPERATION_PREFIXES = ("Get", "Read", "List", "Watch", "Assert", "Scan", "Count", "Describe", "Is")
# Prometheus families kept: family -> label to split by (None: one total).
TEMPORAL_FAMILIES: dict[str, str | None] = {
    "persistence_requests": "operation",
    "action": None,
    "command": "commandType",
    "workflow_success": None,
    "workflow_continued_as_new": None,
    "workflow_failed": None,
    "workflow_terminate": None,
    "workflow_timeout": None,
    "workflow_cancel": None,
    "activity_success": None,
    "service_requests": "operation",  # frontend only (what clients asked: starts, signals, ...)
}
METRIC_NAMES = {"action": "actions", "command": "commands", "service_requests": "frontend_requests"}
# Postgres background processes by title ("postgres: autovacuum worker", "postgres: io worker 2");
# any other "postgres: ..." title is a client connection ("postgres: user db host(port) idle").
POSTGRES_ROLES = (
    "autovacuum worker",
    "autovacuum launcher",
    "checkpointer",
    "background writer",
    "walwriter",
    "io worker",
    "logical replication launcher",
    "logical replication worker",
    "walsender",
    "walreceiver",
    "startup",
    "archiver",
    "parallel worker",
    "walsummarizer",
    "slotsync worker",
)
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def is_read_operation(operation: str) -> bool:
    return operation.startswith(READ_OPERATION_PREFIXES)


def parse_temporal_metrics(text: str) -> dict[str, float]:
    """The kept counters of one Prometheus text page, summed as :data:`TEMPORAL_FAMILIES` says.

    Adds ``persistence_requests`` (all), ``persistence_reads`` and ``persistence_writes``."""
    out: dict[str, float] = {}
    prefixes = tuple(f"{name}{{" for name in TEMPORAL_FAMILIES) + tuple(f"{name} " for name in TEMPORAL_FAMILIES)
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        family, labels_text, raw = m.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        labels = dict(_LABEL.findall(labels_text or ""))
        if family == "service_requests" and labels.get("service_name") != "frontend":
            continue
        split = TEMPORAL_FAMILIES[family]
        name = METRIC_NAMES.get(family, family)
        if split is None:
            out[name] = out.get(name, 0.0) + value
            continue
        key = f"{name}.{labels.get(split, '?')}"
        out[key] = out.get(key, 0.0) + value
    reads = writes = 0.0
    for key, value in out.items():
        if key.startswith("persistence_requests."):
            if is_read_operation(key.split(".", 1)[1]):
                reads += value
            else:
                writes += value
    out["persistence_requests"] = reads + writes
    out["persistence_reads"] = reads
    out["persistence_writes"] = writes
    return out


@dataclass
class ServerWatch:
    """One server a run uses, as the sampler watches it from outside.

    ``roots``: the pids whose process trees are the server (None: not a process on this machine
    that we can follow). ``files``: its durable files (sizes sampled as ``file_bytes``).
    ``metrics_url``: a Prometheus text endpoint (Temporal). ``unavailable``: figure -> one line
    saying why it cannot be measured here (``process``, ``metrics``), shown in the report."""

    name: str
    roots: Callable[[], list[int]] | None = None
    files: tuple[Path, ...] = ()
    metrics_url: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    bytes_written_from: str = "write_bytes"  # the process metric that is the server's bytes_written


def process_kind(proc: psutil.Process, root: bool) -> tuple[str, bool]:
    """(what a process of a server is, whether that is final): the role in a Postgres process
    title, else its name. A Postgres child that has not set its title yet (just forked) is taken
    for a client backend until it has."""
    try:
        title = "" if root else " ".join(proc.cmdline())
        name = proc.name()
    except psutil.Error:
        return "?", False
    if title.startswith("postgres: "):
        role = title[len("postgres: ") :]
        return next((r for r in POSTGRES_ROLES if role.startswith(r)), "client backend"), True
    if name.startswith("postgres"):
        return ("postmaster", True) if root else ("client backend", False)
    return name, True


class ProcessTree:
    """Cumulative disk writes and CPU of a server's processes, followed pid by pid, in total and
    by kind of process (:data:`PROCESS_METRICS`).

    A parent that reaps a child is charged the child's totals by the kernel (I/O in its own
    counters, CPU in its children's times), so a child that vanished is taken off its parent's
    next delta: each byte and second counts once, and what an exiting process did after its last
    reading still counts (under its parent's kind)."""

    def __init__(self, roots: Callable[[], list[int]]) -> None:
        self.roots = roots
        self._last: dict[int, tuple[float, ...]] = {}  # pid -> counters at its last reading
        self._parent: dict[int, int] = {}
        self._kinds: dict[int, tuple[str, bool]] = {}
        self.totals = dict.fromkeys(PROCESS_METRICS, 0.0)
        self.by_kind: dict[str, dict[str, float]] = {}
        self._started = False
        self.error: str | None = None

    def _processes(self) -> list[tuple[psutil.Process, bool]]:
        procs: list[tuple[psutil.Process, bool]] = []
        for pid in self.roots():
            try:
                root = psutil.Process(pid)
                procs.append((root, True))
                procs.extend((c, False) for c in root.children(recursive=True))
            except psutil.Error:
                continue
        return procs

    def _read(self, p: psutil.Process, root: bool) -> tuple[float, ...] | None:
        try:
            with p.oneshot():
                io = p.io_counters()
                cpu = p.cpu_times()
                self._parent[p.pid] = p.ppid()
        except psutil.AccessDenied:
            self.error = (
                f"cannot read the I/O counters of pid {p.pid} (/proc/{p.pid}/io); run as root or as the server's user"
            )
            return None
        except psutil.Error:
            return None
        cpu_s = cpu.user + cpu.system + (cpu.children_user + cpu.children_system if root else 0.0)
        return float(io.write_bytes), float(io.write_chars), float(cpu_s)

    def sample(self) -> dict[str, float]:
        """Read every process once; the first call is the baseline (counts nothing)."""
        listed, seen = set(), {}
        for p, is_root in self._processes():
            listed.add(p.pid)
            known = self._kinds.get(p.pid)
            if known is None or not known[1]:
                self._kinds[p.pid] = process_kind(p, is_root)
            values = self._read(p, is_root)
            if values is not None:
                seen[p.pid] = values
            elif p.pid in self._last:
                seen[p.pid] = self._last[p.pid]  # unreadable for now (exiting): not gone yet
        deltas: dict[int, list[float]] = {}
        if self._started:
            zero = (0.0,) * len(PROCESS_METRICS)
            for pid, values in seen.items():
                before = self._last.get(pid, zero)  # new since the baseline: all of it is ours
                deltas[pid] = [v - b for v, b in zip(values, before)]
            for gone in set(self._last) - listed:  # reaped: its totals went to its parent
                parent = self._parent.get(gone)
                if parent in deltas:
                    deltas[parent] = [d - v for d, v in zip(deltas[parent], self._last[gone])]
        for pid, delta in deltas.items():
            kind = self.by_kind.setdefault(self._kinds.get(pid, ("?", False))[0], dict.fromkeys(PROCESS_METRICS, 0.0))
            for metric, d in zip(PROCESS_METRICS, delta):
                self.totals[metric] += d
                kind[metric] += d
        self._last = seen
        self._kinds = {pid: k for pid, k in self._kinds.items() if pid in listed}
        self._parent = {pid: pp for pid, pp in self._parent.items() if pid in listed}
        self._started = True
        out = dict(self.totals)
        for kind, values in self.by_kind.items():
            out.update({f"{metric}.{kind}": v for metric, v in values.items()})
        return out


def file_bytes(files: tuple[Path, ...]) -> float:
    """Bytes on disk of the files that exist (a SQLite database, its -wal and -shm)."""
    total = 0
    for f in files:
        try:
            total += os.stat(f).st_size
        except OSError:
            pass
    return float(total)


async def scrape(session, url: str, timeout_s: float) -> dict[str, float]:
    """One scrape of a Prometheus text endpoint with an ``aiohttp.ClientSession``."""
    import aiohttp

    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        resp.raise_for_status()
        text = await resp.text()
    return parse_temporal_metrics(text)


def postmaster_of(backend_pid: int, host: str) -> int | None:
    """The postmaster of a Postgres on this machine, found from one of its backends' pid (the
    parent of a backend is the postmaster), or None when the server is not a local process."""
    if host not in ("127.0.0.1", "localhost", "::1", "") and not host.startswith("/"):
        return None
    try:
        parent = psutil.Process(backend_pid).parent()
        if parent is None or not parent.name().startswith("postgres"):
            return None
        return parent.pid
    except psutil.Error:
        return None

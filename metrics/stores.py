"""What each server a run uses pays, seen from outside its SQL: the disk writes and CPU of its
processes, the size of its files, and for Temporal the counters its Prometheus endpoint reports.

The figures are **by server**, never by design: a run names the servers it uses
(:class:`ServerWatch`, built by the engine, which knows which servers it started) and every
design that uses a server is billed the same way. The samples' scope is ``server:<name>``
(:func:`metrics.rundir.server_scope`); every metric is cumulative since the sampler's baseline.

Process figures (``write_bytes``, ``cpu_s``): summed over the server's process tree (the
postmaster and every backend, checkpointer, WAL writer, ...; the Temporal dev server is one
process). ``write_bytes`` is the kernel's per-process count of bytes sent towards storage
(``/proc/<pid>/io``: charged when a page is dirtied, so a page rewritten before writeback counts
twice, and writes to files deleted before writeback are not subtracted). Each process is followed
by pid: a process that exits between two samples loses at most its last interval, one that
appears after the baseline counts from its start. Readable for a server on this machine run by
this user, or by any user when we are root.

Temporal counters (``persistence_requests`` and ``persistence_requests.<operation>``, reads and
writes, ``actions``, ``commands.<type>``, workflow and activity outcomes, ``frontend_requests.<op>``)
are the server's own, server-wide, summed over every label but the one named. One scrape of the
dev server's endpoint is ~1.9 MB of text and costs the server ~40 ms of CPU (measured), so the
sampler scrapes every few seconds and at the window's edges, not every second.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

PROCESS_METRICS = ("write_bytes", "cpu_s")
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
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
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


class ProcessTree:
    """Cumulative disk writes and CPU of a server's processes, followed pid by pid."""

    def __init__(self, roots: Callable[[], list[int]]) -> None:
        self.roots = roots
        self._last: dict[int, tuple[float, float]] = {}
        self.write_bytes = 0.0
        self.cpu_s = 0.0
        self._started = False
        self.error: str | None = None

    def _processes(self) -> list[psutil.Process]:
        procs: list[psutil.Process] = []
        for pid in self.roots():
            try:
                root = psutil.Process(pid)
                procs.append(root)
                procs.extend(root.children(recursive=True))
            except psutil.Error:
                continue
        return procs

    def sample(self) -> dict[str, float]:
        """Read every process once; the first call is the baseline (counts nothing)."""
        seen: dict[int, tuple[float, float]] = {}
        for p in self._processes():
            try:
                with p.oneshot():
                    io = p.io_counters()
                    cpu = p.cpu_times()
            except psutil.AccessDenied:
                self.error = (f"cannot read the I/O counters of pid {p.pid} (/proc/{p.pid}/io); run as root or as "
                              f"the server's user")
                continue
            except psutil.Error:
                continue
            seen[p.pid] = (float(io.write_bytes), float(cpu.user + cpu.system))
        for pid, (wb, cpu) in seen.items():
            if not self._started:
                continue
            before = self._last.get(pid, (0.0, 0.0))  # new since the baseline: all of it is ours
            self.write_bytes += max(0.0, wb - before[0])
            self.cpu_s += max(0.0, cpu - before[1])
        self._last = seen
        self._started = True
        return {"write_bytes": self.write_bytes, "cpu_s": self.cpu_s}


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


def local_postgres_roots(backend_pid: int, host: str) -> Callable[[], list[int]] | None:
    """The postmaster of a Postgres on this machine, found from one of its backends' pid (the
    parent of a backend is the postmaster), or None when the server is not a local process."""
    if host not in ("127.0.0.1", "localhost", "::1", "") and not host.startswith("/"):
        return None
    try:
        backend = psutil.Process(backend_pid)
        parent = backend.parent()
        if parent is None or "postgres" not in (parent.name() + " ".join(parent.cmdline()[:1])).lower():
            return None
        postmaster = parent.pid
    except psutil.Error:
        return None
    return lambda: [postmaster]

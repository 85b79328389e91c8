"""The fire recorder: every fire the processor receives, kept as columns, written in closed segments.

Per fire the cost is an attribute fetch and a list append; everything else (lag, histograms,
effect flags) works on whole batches with numpy. Rows are written as **closed segments**
(:func:`metrics.rundir.fire_segment`): every ``SEGMENT_EVERY_S`` or so (or once ``FLUSH_ROWS``
wait), the rows at least ``FLUSH_AFTER_S`` old become one complete Parquet file, written whole
and renamed into place, never one write per fire. Rows wait that long because the effect of a
fire is known only when the backend commits (``committed``), normally well within it; an effect
committed after its row was written is listed by row number in ``late-<log>.npy`` (rewritten
whole with each segment; rare, counted in ``late_effects``); an external effect
(:meth:`FireRecorder.external`) noted after its row was written, in ``late-external-<log>.npy``.

A writer killed with SIGKILL keeps every segment it closed: it loses at most the rows younger
than ``FLUSH_AFTER_S + SEGMENT_EVERY_S`` plus one flush tick (the caller's, 1 s), about 8 s of
fires. The run process and every ``bench serve`` node write this way; the run compacts the
segments into ``fires.parquet`` when it finishes (:func:`metrics.rundir.compact`).

Lag is ``fired_at - max(due_at, armed_at)`` with ``fired_at`` the moment the batch reached the
processor (docs/design.md, "Measuring honestly").
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from metrics import rundir
from metrics.hdr import new_histogram, record_many
from metrics.rundir import FIRES_SCHEMA

FLUSH_AFTER_S = 5.0  # a row is written once its fire is this old (its commit has happened)
SEGMENT_EVERY_S = 2.0  # a segment closes about this often (what a SIGKILL costs, beyond FLUSH_AFTER_S)
FLUSH_ROWS = 50_000  # or as soon as this many rows are waiting

_fields = operator.attrgetter("timer_id", "tenant_id", "type", "due_at", "armed_at", "attempt", "worker", "batch")


class _Chunk:
    """One received batch, as columns."""

    __slots__ = (
        "row0",
        "fired_at",
        "ids",
        "tenants",
        "types",
        "due",
        "armed",
        "attempt",
        "workers",
        "batch",
        "lag",
        "warmup",
    )

    def __init__(self, row0, fired_at, ids, tenants, types, due, armed, attempt, workers, batch, lag, warmup):
        self.row0 = row0
        self.fired_at = fired_at
        self.ids = ids
        self.tenants = tenants
        self.types = types
        self.due = due
        self.armed = armed
        self.attempt = attempt
        self.workers = workers
        self.batch = batch
        self.lag = lag
        self.warmup = warmup


class FireRecorder:
    """Records fires into closed segments ``fires-<log>.<seq>.parquet`` under ``directory``."""

    def __init__(
        self, directory: str | Path, measure_start: float, measure_end: float, log: str = rundir.RUN_LOG
    ) -> None:
        self.directory = Path(directory)
        self.log = log
        self.measure_start = measure_start
        self.measure_end = measure_end
        self.rows = 0  # rows received so far
        self.segments = 0  # segments closed so far
        self._pending: list[_Chunk] = []  # received, not yet written
        self._written = 0  # rows [0, _written) are in closed segments
        self._effects = bytearray()  # one flag per row
        self._external = bytearray()  # one flag per row: the processor's external effect happened
        self._late: list[int] = []  # rows whose effect arrived after they were written
        self._late_saved = 0
        self._late_external: list[int] = []  # rows whose external effect was noted after they were written
        self._late_external_saved = 0
        self._row_of: dict[int, int] = {}  # id(Fire) -> row, until its commit is reported
        self._flushing: asyncio.Lock | None = None
        # live views: the measured window, and the interval since the last sampler tick
        self.measured = new_histogram()
        self.interval = new_histogram()
        self.measured_fires = 0
        self.effects_delivered = 0
        self.unmatched_commits = 0
        self.closed = False

    # -- per batch, on the hot path --------------------------------------------------------

    def receive(self, fires: Sequence, fired_at: float) -> tuple[tuple[str, ...], np.ndarray]:
        """Record a batch received at ``fired_at``; returns its timer ids and due times."""
        n = len(fires)
        ids, tenants, types, due, armed, attempt, workers, batch = zip(*map(_fields, fires))
        due_a = np.fromiter(due, np.float64, n)
        armed_a = np.fromiter(armed, np.float64, n)
        lag = fired_at - np.maximum(due_a, armed_a)
        warmup = fired_at < self.measure_start
        row0 = self.rows
        self._pending.append(
            _Chunk(
                row0,
                fired_at,
                ids,
                tenants,
                types,
                due_a,
                armed_a,
                np.fromiter(attempt, np.int32, n),
                workers,
                np.fromiter(batch, np.int64, n),
                lag,
                warmup,
            )
        )
        self._row_of.update(zip(map(id, fires), range(row0, row0 + n)))
        self._effects.extend(bytes(n))
        self._external.extend(bytes(n))
        self.rows += n
        lag_us = np.rint(lag * 1e6)
        record_many(self.interval, lag_us)
        if not warmup and fired_at < self.measure_end:
            record_many(self.measured, lag_us)
            self.measured_fires += n
        return ids, due_a

    def committed(self, fires: Sequence, delivered: Sequence[bool]) -> None:
        pop = self._row_of.pop
        rows = [pop(id(f), -1) for f in fires]
        for row, ok in zip(rows, delivered):
            if not ok:
                continue
            if row < 0:
                self.unmatched_commits += 1  # a Fire object the processor never saw
                continue
            self._effects[row] = 1
            self.effects_delivered += 1
            if row < self._written:
                self._late.append(row)

    def external(self, fires: Sequence) -> None:
        """The processor performed these fires' external effects (before the backend's commit)."""
        get = self._row_of.get
        for f in fires:
            row = get(id(f), -1)
            if row < 0:
                continue  # never received here (cannot happen for the polling processor)
            self._external[row] = 1
            if row < self._written:
                self._late_external.append(row)

    # -- batched writes ---------------------------------------------------------------------

    def _take(self, older_than: float | None) -> list[_Chunk]:
        if older_than is None:
            taken, self._pending = self._pending, []
            return taken
        i = 0
        while i < len(self._pending) and self._pending[i].fired_at < older_than:
            i += 1
        taken, self._pending = self._pending[:i], self._pending[i:]
        return taken

    def _table(self, chunks: list[_Chunk], effects: bytes | None = None, external: bytes | None = None) -> pa.Table:
        if not chunks:
            return FIRES_SCHEMA.empty_table()
        lo = chunks[0].row0
        hi = chunks[-1].row0 + len(chunks[-1].ids)
        if effects is None:
            effects = bytes(self._effects[lo:hi])
        if external is None:
            external = bytes(self._external[lo:hi])
        flat = lambda attr: [x for c in chunks for x in getattr(c, attr)]  # noqa: E731
        cat = lambda attr: np.concatenate([getattr(c, attr) for c in chunks])  # noqa: E731
        sizes = [len(c.ids) for c in chunks]
        fired = np.repeat([c.fired_at for c in chunks], sizes)
        warm = np.repeat([c.warmup for c in chunks], sizes)
        effects = np.frombuffer(effects, dtype=np.uint8).astype(bool)
        external = np.frombuffer(external, dtype=np.uint8).astype(bool)
        return rundir.fire_rows(
            len(fired),
            timer_id=flat("ids"),
            tenant_id=flat("tenants"),
            type=flat("types"),
            due_at=cat("due"),
            armed_at=cat("armed"),
            fired_at=fired,
            lag_s=cat("lag"),
            attempt=cat("attempt"),
            worker=[str(x) for x in flat("workers")],
            batch=cat("batch"),
            effect_delivered=effects,
            warmup=warm,
            external_effect=external,
        )

    def _write(self, table: pa.Table) -> None:
        """Close one segment (and save the late-effect rows, if any arrived since)."""
        if len(table):
            self.directory.mkdir(parents=True, exist_ok=True)
            rundir.write_parquet_atomic(table, rundir.fire_segment(self.directory, self.log, self.segments))
            self.segments += 1
        self._save_late()

    def _save_late(self) -> None:
        if len(self._late) > self._late_saved:
            late = list(self._late)
            rundir.save_rows_atomic(np.asarray(late, np.int64), rundir.late_effects(self.directory, self.log))
            self._late_saved = len(late)
        if len(self._late_external) > self._late_external_saved:
            late = list(self._late_external)
            rundir.save_rows_atomic(
                np.asarray(late, np.int64), rundir.late_effects(self.directory, self.log, "external_effect")
            )
            self._late_external_saved = len(late)

    async def maybe_flush(self, now: float) -> None:
        """Close a segment of the rows old enough to have committed, every ``SEGMENT_EVERY_S``
        or as soon as ``FLUSH_ROWS`` wait (built and written off the event loop)."""
        if not self._pending:
            return
        waiting = self.rows - self._pending[0].row0
        if waiting < FLUSH_ROWS and self._pending[0].fired_at > now - FLUSH_AFTER_S - SEGMENT_EVERY_S:
            return
        if self._flushing is None:
            self._flushing = asyncio.Lock()
        async with self._flushing:
            chunks = self._take(now - FLUSH_AFTER_S)
            if not chunks:
                return
            lo = chunks[0].row0
            self._written = hi = chunks[-1].row0 + len(chunks[-1].ids)
            effects = bytes(self._effects[lo:hi])  # the flags as of now; later ones count as late
            external = bytes(self._external[lo:hi])
            await asyncio.to_thread(lambda: self._write(self._table(chunks, effects, external)))

    def close(self) -> None:
        """Write what is left as the last segment (late effects included)."""
        if self.closed:
            return
        chunks = self._take(None)
        if chunks:
            self._written = chunks[-1].row0 + len(chunks[-1].ids)
        self._write(self._table(chunks))
        self.closed = True

    @property
    def late_effects(self) -> int:
        return len(self._late)

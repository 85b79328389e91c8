"""The fire recorder: every fire the processor receives, kept as columns, written in batches.

Per fire the cost is an attribute fetch and a list append; everything else (lag, histograms,
effect flags) works on whole batches with numpy. Rows go to ``fires.parquet`` one row group at
a time, never one write per fire, and only once they are ``FLUSH_AFTER_S`` old: the effect of a
fire is known only when the backend commits (``committed``), normally well within that. An
effect committed after its row was written is kept aside and the file is rewritten once at
close (rare; counted in ``late_effects``).

Lag is ``fired_at - max(due_at, armed_at)`` with ``fired_at`` the moment the batch reached the
processor (DESIGN.md "Measuring honestly").
"""

from __future__ import annotations

import asyncio
import operator
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from metrics.hdr import new_histogram, record_many
from metrics.rundir import FIRES_SCHEMA

FLUSH_AFTER_S = 5.0  # a row is written once its fire is this old (its commit has happened)
FLUSH_ROWS = 50_000  # or when this many rows are waiting
ROW_GROUP_MAX_AGE_S = 10.0  # ... or the oldest waiting row is this old

_fields = operator.attrgetter("timer_id", "tenant_id", "type", "due_at", "armed_at", "attempt", "worker", "batch")


class _Chunk:
    """One received batch, as columns."""

    __slots__ = ("row0", "fired_at", "ids", "tenants", "types", "due", "armed", "attempt", "workers", "batch", "lag", "warmup")

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
    def __init__(self, path: str | Path, measure_start: float, measure_end: float) -> None:
        self.path = Path(path)
        self.measure_start = measure_start
        self.measure_end = measure_end
        self.rows = 0  # rows received so far
        self._pending: list[_Chunk] = []  # received, not yet written
        self._written = 0  # rows [0, _written) are in the file
        self._effects = bytearray()  # one flag per row
        self._late: list[int] = []  # rows whose effect arrived after they were written
        self._row_of: dict[int, int] = {}  # id(Fire) -> row, until its commit is reported
        self._writer: pq.ParquetWriter | None = None
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
            _Chunk(row0, fired_at, ids, tenants, types, due_a, armed_a,
                   np.fromiter(attempt, np.int32, n), workers, np.fromiter(batch, np.int64, n), lag, warmup)
        )
        self._row_of.update(zip(map(id, fires), range(row0, row0 + n)))
        self._effects.extend(bytes(n))
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

    def _table(self, chunks: list[_Chunk], effects: bytes | None = None) -> pa.Table:
        if not chunks:
            return FIRES_SCHEMA.empty_table()
        lo = chunks[0].row0
        hi = chunks[-1].row0 + len(chunks[-1].ids)
        if effects is None:
            effects = bytes(self._effects[lo:hi])
        flat = lambda attr: [x for c in chunks for x in getattr(c, attr)]  # noqa: E731
        cat = lambda attr: np.concatenate([getattr(c, attr) for c in chunks])  # noqa: E731
        sizes = [len(c.ids) for c in chunks]
        fired = np.repeat([c.fired_at for c in chunks], sizes)
        warm = np.repeat([c.warmup for c in chunks], sizes)
        effects = np.frombuffer(effects, dtype=np.uint8).astype(bool)
        return pa.table(
            {
                "timer_id": pa.array(flat("ids"), pa.string()),
                "tenant_id": pa.array(flat("tenants"), pa.string()),
                "type": pa.array(flat("types"), pa.string()),
                "due_at": cat("due"),
                "armed_at": cat("armed"),
                "fired_at": fired,
                "lag_s": cat("lag"),
                "attempt": cat("attempt"),
                "worker": pa.array([str(x) for x in flat("workers")], pa.string()),
                "batch": cat("batch"),
                "effect_delivered": effects,
                "warmup": warm,
            },
            schema=FIRES_SCHEMA,
        )

    def _write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, FIRES_SCHEMA, compression="zstd")
        if len(table):
            self._writer.write_table(table)

    async def maybe_flush(self, now: float) -> None:
        """Write rows old enough to have committed, when enough are waiting (off the loop)."""
        if not self._pending:
            return
        waiting = self.rows - self._pending[0].row0
        if waiting < FLUSH_ROWS and self._pending[0].fired_at > now - ROW_GROUP_MAX_AGE_S:
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
            # building the columns and writing both happen off the event loop
            await asyncio.to_thread(lambda: self._write(self._table(chunks, effects)))

    def close(self, missed: pa.Table | None = None) -> None:
        """Write what is left (and the missed rows), close the file, fix late effect flags."""
        if self.closed:
            return
        chunks = self._take(None)
        table = self._table(chunks)
        if chunks:
            self._written = chunks[-1].row0 + len(chunks[-1].ids)
        self._write(table)
        if missed is not None and len(missed):
            self._write(missed.cast(FIRES_SCHEMA))
        if self._writer is None:
            self._write(FIRES_SCHEMA.empty_table())
        self._writer.close()
        self.closed = True
        if self._late:
            self._rewrite_late()

    def _rewrite_late(self) -> None:
        table = pq.read_table(self.path)
        flags = table.column("effect_delivered").to_numpy(zero_copy_only=False).copy()
        flags[np.asarray(self._late, dtype=np.int64)] = True
        table = table.set_column(table.schema.get_field_index("effect_delivered"), "effect_delivered", pa.array(flags))
        tmp = self.path.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, self.path)

    @property
    def late_effects(self) -> int:
        return len(self._late)

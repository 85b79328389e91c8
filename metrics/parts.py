"""What a ``bench serve --record`` node writes, and how ``bench run --nodes N`` merges it.

A node records beside the run, under ``<run>/nodes/`` (file names in :mod:`metrics.rundir`):

* its fires, in **parts** (:class:`PartRecorder`): each part is a complete Parquet file written
  whole and renamed into place, so a node killed with SIGKILL keeps every part it finished;
  effects committed after their row was written are listed by row number in ``late-<W>.npy``;
* its **holds** (:class:`HoldLog`): when it held each fire, from receipt to the backend's commit,
  for the double-hold check (:func:`count_double_held`).

The merge functions here are pure (they read files and return tables or counts), so the unit
tests exercise them without nodes.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metrics import rundir
from metrics.recorder import FLUSH_AFTER_S, FireRecorder
from metrics.rundir import FIRES_SCHEMA

PART_EVERY_S = 2.0  # a recording node writes a fire-log part about this often


class PartRecorder(FireRecorder):
    """The fire recorder, writing each row group as its own complete file.

    The node has no measured window: ``bench run`` re-derives ``warmup`` from its own when it
    merges (:func:`merge_fires`).
    """

    def __init__(self, directory: Path, worker_id: str) -> None:
        super().__init__(directory / f"fires-{worker_id}.parquet", 0.0, math.inf)
        self.directory = directory
        self.worker_id = worker_id
        self.parts = 0

    async def maybe_flush(self, now: float) -> None:
        """A part every ``PART_EVERY_S`` or so, of the rows old enough to have committed: a
        killed node loses only its last few seconds of fires."""
        if not self._pending or self._pending[0].fired_at > now - FLUSH_AFTER_S - PART_EVERY_S:
            return
        chunks = self._take(now - FLUSH_AFTER_S)
        lo = chunks[0].row0
        self._written = hi = chunks[-1].row0 + len(chunks[-1].ids)
        effects = bytes(self._effects[lo:hi])  # later commits of these rows go to late-<W>.npy
        await asyncio.to_thread(lambda: self._write(self._table(chunks, effects)))

    def _write(self, table: pa.Table) -> None:
        if not len(table):
            return
        path = rundir.node_fires_part(self.directory, self.worker_id, self.parts)
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        self.parts += 1

    def close(self, missed=None) -> None:
        if self.closed:
            return
        chunks = self._take(None)
        if chunks:
            self._written = chunks[-1].row0 + len(chunks[-1].ids)
            self._write(self._table(chunks))
        self.closed = True
        if self._late:
            np.save(rundir.node_late(self.directory, self.worker_id), np.asarray(self._late, np.int64))


class DiscardingRecorder(FireRecorder):
    """A node with nothing to record to: keeps the live histograms, drops rows once committed."""

    def __init__(self) -> None:
        super().__init__(os.devnull, 0.0, math.inf)

    async def maybe_flush(self, now: float) -> None:
        self._take(now - FLUSH_AFTER_S)

    def close(self, missed=None) -> None:
        self._take(None)
        self.closed = True


class HoldLog:
    """When this node held each timer: from receipt to the backend's commit report.

    A hold whose commit never came (the node stopped first) ends at NaN: it proves nothing
    either way.
    """

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.due: list[float] = []
        self.received: list[float] = []
        self.released: list[float] = []
        self._open: dict[int, int] = {}  # id(Fire) -> row, until committed

    def received_batch(self, fires: Sequence, at: float) -> None:
        row0 = len(self.ids)
        self.ids.extend(f.timer_id for f in fires)
        self.due.extend(f.due_at for f in fires)
        self.received.extend([at] * len(fires))
        self.released.extend([math.nan] * len(fires))
        self._open.update(zip(map(id, fires), range(row0, row0 + len(fires))))

    def committed_batch(self, fires: Sequence, at: float) -> None:
        for f in fires:
            row = self._open.pop(id(f), None)
            if row is not None:
                self.released[row] = at

    def table(self, worker: str) -> pa.Table:
        n = len(self.ids)
        return pa.table({
            "timer_id": pa.array(self.ids, pa.string()),
            "due_at": pa.array(self.due, pa.float64()),
            "received_at": pa.array(self.received, pa.float64()),
            "committed_at": pa.array(self.released, pa.float64()),
            "worker": pa.array([worker] * n, pa.string()),
        })

    def write(self, nodes_dir: Path, worker: str) -> None:
        pq.write_table(self.table(worker), rundir.node_holds(nodes_dir, worker))


# -- merging -------------------------------------------------------------------------------------


def _node_fire_tables(nodes_dir: Path):
    for wid, parts in rundir.node_fires_parts(nodes_dir).items():
        tables = [pq.read_table(p).cast(FIRES_SCHEMA) for p in parts]
        if not tables:
            continue
        t = pa.concat_tables(tables)
        late = rundir.node_late(nodes_dir, wid)
        if late.exists():
            rows = np.load(late)
            rows = rows[rows < len(t)]
            flags = t.column("effect_delivered").to_numpy(zero_copy_only=False).copy()
            flags[rows] = True
            t = t.set_column(t.schema.get_field_index("effect_delivered"), "effect_delivered", pa.array(flags))
        yield t


def merge_fires(fires_path: Path, nodes_dir: Path, measure_start: float) -> int:
    """Append every node's fires to ``fires_path`` (which holds the missed rows); returns rows added."""
    base = pq.read_table(fires_path).cast(FIRES_SCHEMA) if fires_path.exists() else FIRES_SCHEMA.empty_table()
    added = 0
    tables = [base]
    for t in _node_fire_tables(nodes_dir):
        warm = pc.less(t.column("fired_at"), pa.scalar(measure_start))
        t = t.set_column(t.schema.get_field_index("warmup"), "warmup", warm)
        tables.append(t)
        added += len(t)
    merged = pa.concat_tables(tables)
    if len(merged):
        merged = merged.sort_by([("fired_at", "ascending")])
    tmp = fires_path.with_suffix(".parquet.tmp")
    pq.write_table(merged, tmp, compression="zstd")
    os.replace(tmp, fires_path)
    return added


def read_holds(nodes_dir: Path) -> dict[str, np.ndarray]:
    tables = [pq.read_table(p) for p in sorted(nodes_dir.glob("holds-*.parquet"))]
    if not tables:
        return {"timer_id": np.array([], object), "received_at": np.array([]), "committed_at": np.array([]),
                "worker": np.array([], object)}
    t = pa.concat_tables(tables)
    return {
        "timer_id": np.asarray(t.column("timer_id").to_pylist(), object),
        "received_at": t.column("received_at").to_numpy(zero_copy_only=False),
        "committed_at": t.column("committed_at").to_numpy(zero_copy_only=False),
        "worker": np.asarray(t.column("worker").to_pylist(), object),
    }


def count_double_held(holds: dict[str, np.ndarray]) -> int:
    """Holds that began while another worker still held the same timer id.

    A hold is [received_at, committed_at]; one without a commit (its node stopped or died
    first) proves nothing and is left out. Per id, holds are walked in start order keeping, per
    worker, the latest end seen: a hold that starts before another worker's latest end overlaps
    it.
    """
    ids, start, end, worker = holds["timer_id"], holds["received_at"], holds["committed_at"], holds["worker"]
    keep = ~np.isnan(end)
    ids, start, end, worker = ids[keep], start[keep], end[keep], worker[keep]
    if len(ids) == 0:
        return 0
    order = np.lexsort((start, ids))
    count = 0
    current = None
    ends: dict[str, float] = {}
    for i in order.tolist():
        if ids[i] != current:
            current = ids[i]
            ends = {}
        w, s = worker[i], start[i]
        if any(e > s for other, e in ends.items() if other != w):
            count += 1
        ends[w] = max(ends.get(w, -math.inf), end[i])
    return count

"""What a ``bench serve --record`` node writes beside the run (under ``<run>/nodes/``, file names
in :mod:`metrics.rundir`), and the double-hold check over it:

* its fires, in closed segments (:class:`PartRecorder`, the run's own fire recorder naming its
  log after the node's worker id), so a node killed with SIGKILL keeps every segment it closed;
  ``bench run --nodes N`` reads them with its own (:func:`metrics.rundir.read_segmented_fires`)
  and compacts them into ``fires.parquet`` when it finishes;
* its **holds** (:class:`HoldLog`): when it held each fire, from receipt to the backend's commit,
  for the double-hold check (:func:`count_double_held`).

The functions here are pure (they read files and return tables or counts), so the unit tests
exercise them without nodes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from metrics import rundir
from metrics.recorder import FLUSH_AFTER_S, FireRecorder


class PartRecorder(FireRecorder):
    """The fire recorder of a node: segments ``fires-<worker>.<seq>.parquet`` in ``directory``.

    The node has no measured window: ``bench run`` re-derives ``warmup`` from its own when it
    reads the segments.
    """

    def __init__(self, directory: Path, worker_id: str) -> None:
        super().__init__(directory, 0.0, math.inf, log=worker_id)
        self.worker_id = worker_id


class DiscardingRecorder(FireRecorder):
    """A node with nothing to record to: keeps the live histograms, drops rows once committed."""

    def __init__(self) -> None:
        super().__init__(os.devnull, 0.0, math.inf)

    async def maybe_flush(self, now: float) -> None:
        self._take(now - FLUSH_AFTER_S)

    def close(self) -> None:
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
        return pa.table(
            {
                "timer_id": pa.array(self.ids, pa.string()),
                "due_at": pa.array(self.due, pa.float64()),
                "received_at": pa.array(self.received, pa.float64()),
                "committed_at": pa.array(self.released, pa.float64()),
                "worker": pa.array([worker] * n, pa.string()),
            }
        )

    def write(self, nodes_dir: Path, worker: str) -> None:
        pq.write_table(self.table(worker), rundir.node_holds(nodes_dir, worker))


# -- the double-hold check --------------------------------------------------------------------


def read_holds(nodes_dir: Path) -> dict[str, np.ndarray]:
    tables = [pq.read_table(p) for p in sorted(nodes_dir.glob("holds-*.parquet"))]
    if not tables:
        return {
            "timer_id": np.array([], object),
            "received_at": np.array([]),
            "committed_at": np.array([]),
            "worker": np.array([], object),
        }
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

"""What temporal_per_trigger costs in Temporal, counted where it happens.

The comparison with temporal_shards is about dispatch per fire (the Composio article: "still leave us
dispatching a separate workflow's poll on every fire"), so the design counts its Temporal
operations: workflows started and completed and signals sent (by ``arm()``), activities executed
and fires handed to a processor (by the poll activity), and Continue-As-New (by the workflow).

Counts collect per task queue (one per scheduler instance's schema) in this process and are
added to the ``temporal_costs`` table about once a second, one row per process, so
``cost_report()`` sums every process that arms or runs a worker (``bench run --nodes``).
``stats()``, read by the metrics sampler, takes this process's running totals
(:func:`totals`) and runs no query.

The workflow counts from inside the workflow sandbox (this module is passed through), and only
when it is not replaying history, so a cache eviction does not count a Continue-As-New twice. A
workflow task that fails after it counted and runs again counts again: rare, and the figure is a
cost gauge, not a correctness check.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields


@dataclass
class Costs:
    workflows_started: int = 0  # signal-with-start calls that created a new execution
    workflows_completed: int = 0  # trigger workflows that returned (the timer finished)
    signals_sent: int = 0  # arm/move signals (each signal-with-start carries one)
    activities_executed: int = 0  # poll activity attempts that ran on a worker
    continue_as_new: int = 0
    fires: int = 0  # fires handed to a processor
    stale_polls: int = 0  # polls that found a newer version and fired nothing

    def as_params(self) -> dict[str, int]:
        return asdict(self)

    def empty(self) -> bool:
        return not any(getattr(self, f.name) for f in fields(self))


_lock = threading.Lock()  # workflow activations may run on the SDK's thread pool
_pending: dict[str, Costs] = {}  # counted, not yet added to temporal_costs
_totals: dict[str, Costs] = {}  # counted in this process since the task queue's first count


def count(task_queue: str, name: str, n: int = 1, *, total: bool = True) -> None:
    with _lock:
        costs = _pending.setdefault(task_queue, Costs())
        setattr(costs, name, getattr(costs, name) + n)
        if total:
            totals_ = _totals.setdefault(task_queue, Costs())
            setattr(totals_, name, getattr(totals_, name) + n)


def totals(task_queue: str) -> Costs:
    """A copy of everything this process counted for this task queue (flushed or not)."""
    with _lock:
        return Costs(**asdict(_totals.get(task_queue) or Costs()))


def forget(task_queue: str) -> None:
    """Drop this task queue's counts, pending and totals (its store is gone)."""
    with _lock:
        _pending.pop(task_queue, None)
        _totals.pop(task_queue, None)


def drain(task_queue: str) -> Costs:
    """The counts since the last drain of this task queue (and forget them)."""
    with _lock:
        return _pending.pop(task_queue, None) or Costs()


def restore(task_queue: str, costs: Costs) -> None:
    """Put back counts a failed flush could not write."""
    for f in fields(costs):
        value = getattr(costs, f.name)
        if value:
            count(task_queue, f.name, value, total=False)  # already in the totals

"""The application re-scheduling its callbacks: long-horizon timers moved while they are armed.

A callback armed 30-60 days out is often moved before it fires (a trial extended, a reminder
pushed back). During the measured window the session (:mod:`harness.session`) re-arms a share
of the long-horizon timers (``long_horizon_move_share``) as the plan here says:

* most to a new far time (30-60 days out again): an upsert of a timer that stays cold;
* :data:`NEAR_SHARE` of them to a near time inside the window, so a moved timer comes due while
  the run watches (its lag is counted at the new time);
* :data:`AGAIN_SHARE` of the near ones once more, to a far time, halfway to their near time: the
  near time becomes an **old time**, and a fire there is a failure (the move did not take).

Moves happen over the first half of the window, near times within its first 80 %, so every
moved timer that should fire does so before the window closes. Same seed, same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.population import SECONDS_PER_DAY, Population

NEAR_SHARE = 0.1  # of the moved timers: moved to a near time inside the window
AGAIN_SHARE = 0.25  # of the near ones: moved again, far, before their near time (an old time no fire may reach)
MIN_MOVES = 20  # a small population still moves enough timers to test the move
MOVES_FROM, MOVES_UNTIL = 0.05, 0.5  # of the window: when the moves are made
NEAR_FROM, NEAR_UNTIL = 0.15, 0.3  # of the window: how far after its move a near time lies
KINDS = ("far", "near", "away")  # away: a near timer moved again to a far time


@dataclass
class MovePlan:
    """One entry per move, sorted by when it is made (a timer moved twice appears twice)."""

    idx: np.ndarray  # population index
    at: np.ndarray  # epoch s the move is made
    new_due: np.ndarray  # epoch s it is moved to
    kind: np.ndarray  # one of KINDS

    def __len__(self) -> int:
        return len(self.idx)


def move_count(long_horizon: int, share: float) -> int:
    """How many long-horizon timers a share moves: at least :data:`MIN_MOVES` (when the share is not
    zero), at most all of them."""
    if share <= 0 or long_horizon <= 0:
        return 0
    return int(min(long_horizon, max(MIN_MOVES, round(share * long_horizon))))


def plan_moves(
    pop: Population, share: float, start: float, end: float, seed: int, days: tuple[float, float] = (30.0, 60.0)
) -> MovePlan:
    """The moves of a window ``[start, end)`` (epoch s)."""
    long_idx = np.flatnonzero(pop.long_horizon)
    n = move_count(len(long_idx), share)
    empty = MovePlan(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, dtype="<U4"))
    if n == 0 or end <= start:
        return empty
    rng = np.random.default_rng(seed + 7)
    width = end - start
    chosen = rng.choice(long_idx, size=n, replace=False)
    at = start + width * rng.uniform(MOVES_FROM, MOVES_UNTIL, n)
    far = start + rng.uniform(days[0], days[1], n) * SECONDS_PER_DAY
    n_near = min(n, max(2, round(NEAR_SHARE * n)))
    n_again = min(n_near, max(1, round(AGAIN_SHARE * n_near)))
    kind = np.array(["far"] * n, dtype="<U4")
    kind[:n_near] = "near"
    due = far.copy()
    due[:n_near] = at[:n_near] + width * rng.uniform(NEAR_FROM, NEAR_UNTIL, n_near)
    # the again-moved: halfway between the near move and the near time, to a far time
    again_at = (at[:n_again] + due[:n_again]) / 2
    again_due = start + rng.uniform(days[0], days[1], n_again) * SECONDS_PER_DAY
    idx = np.concatenate([chosen, chosen[:n_again]])
    at_all = np.concatenate([at, again_at])
    due_all = np.round(np.concatenate([due, again_due]), 6)
    kind_all = np.concatenate([kind, np.array(["away"] * n_again, dtype="<U4")])
    order = np.argsort(at_all, kind="stable")
    return MovePlan(idx[order].astype(np.int64), at_all[order], due_all[order], kind_all[order])


def unique_batches(idx: np.ndarray, limit: int) -> list[slice]:
    """Consecutive slices of ``idx`` of at most ``limit`` entries with no index twice (one upsert
    may not touch a row twice, and a timer's second move must follow its first)."""
    out: list[slice] = []
    lo = 0
    seen: set[int] = set()
    for i, v in enumerate(idx.tolist()):
        if v in seen or i - lo >= limit:
            out.append(slice(lo, i))
            lo, seen = i, set()
        seen.add(v)
    if lo < len(idx):
        out.append(slice(lo, len(idx)))
    return out

"""Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, 2018).

Callers pick a shard for a timer id by hashing it onto a ring of shard points; an item walks
clockwise past shards that are already full, where "full" means holding
``ceil((1 + eps) * m / n)`` items (``m`` items over ``n`` shards). So no shard holds more than
``1 + eps`` times the average, and adding a shard moves few items (about ``1/n`` of them plus
a small cascade from the bound). The Composio article uses this (bounded-ring) to limit how many timers move when the
controller grows the shard count.

The hash is ``blake2b`` (hashlib), never the built-in ``hash()``, which is salted per process:
every caller, worker and workflow must place an id on the same shard. Pure and deterministic,
so it also runs inside the Temporal workflow sandbox.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Sequence

VNODES = 64  # points per shard on the ring; more points, smoother balance before the bound


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key``, the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class Ring:
    """``n_shards`` shards, ``vnodes`` points each; shard ``i``'s points never change as ``n`` grows."""

    def __init__(self, n_shards: int, eps: float = 0.25, vnodes: int = VNODES) -> None:
        if n_shards < 1:
            raise ValueError(f"a ring needs at least one shard, got {n_shards}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 (bounded loads need slack), got {eps}")
        self.n_shards = n_shards
        self.eps = eps
        points = sorted((stable_hash(f"shard-{s}-{v}"), s) for s in range(n_shards) for v in range(vnodes))
        self._hashes = [h for h, _ in points]
        self._owners = [s for _, s in points]

    def capacity(self, m: int) -> int:
        """Most items one shard may hold when ``m`` items are spread: ``ceil((1 + eps) * m / n)``."""
        return max(1, math.ceil((1 + self.eps) * m / self.n_shards))

    def home(self, key: str) -> int:
        """The shard of ``key`` ignoring loads: the owner of the first point clockwise."""
        i = bisect.bisect(self._hashes, stable_hash(key)) % len(self._hashes)
        return self._owners[i]

    def place(self, key: str, loads: Sequence[int], capacity: int) -> int:
        """The first shard clockwise from ``key`` whose load is below ``capacity``.

        ``loads[s]`` is shard ``s``'s current item count (missing entries count as 0). When every
        shard is full (the caller's view of loads is stale), the home shard takes it.
        """
        n = len(self._hashes)
        start = bisect.bisect(self._hashes, stable_hash(key)) % n
        owners = self._owners
        seen: set[int] = set()
        for step in range(n):
            s = owners[(start + step) % n]
            if s in seen:
                continue
            if (loads[s] if s < len(loads) else 0) < capacity:
                return s
            seen.add(s)
            if len(seen) == self.n_shards:
                break
        return owners[start]

    def assign(self, keys: Iterable[str]) -> dict[str, int]:
        """Place every key in order with bounded loads over ``m = len(keys)``: key -> shard."""
        keys = list(keys)
        cap = self.capacity(len(keys))
        loads = [0] * self.n_shards
        out: dict[str, int] = {}
        for key in keys:
            s = self.place(key, loads, cap)
            loads[s] += 1
            out[key] = s
        return out

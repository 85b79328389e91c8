"""The bounded-load consistent-hash ring of temporal_shards (pure logic, no servers)."""

from __future__ import annotations

from collections import Counter

import pytest

from schedulers.temporal_shards.ring import Ring, stable_hash

KEYS = [f"trigger-{i}" for i in range(6000)]


def test_hash_is_stable_across_processes():
    # blake2b, not the per-process salted hash(): every caller must pick the same shard.
    assert stable_hash("trigger-1") == int.from_bytes(
        __import__("hashlib").blake2b(b"trigger-1", digest_size=8).digest(), "big"
    )
    assert Ring(7).home("trigger-1") == Ring(7).home("trigger-1")


@pytest.mark.parametrize("n", [3, 8, 16])
@pytest.mark.parametrize("eps", [0.1, 0.25, 0.5])
def test_no_shard_exceeds_the_bound(n, eps):
    ring = Ring(n, eps)
    loads = Counter(ring.assign(KEYS).values())
    assert max(loads.values()) <= ring.capacity(len(KEYS)), (n, eps, loads)
    assert sum(loads.values()) == len(KEYS)


@pytest.mark.parametrize("n", [4, 10, 20])
def test_adding_a_shard_moves_about_one_nth_of_the_timers(n):
    before = Ring(n, 0.25).assign(KEYS)
    after = Ring(n + 1, 0.25).assign(KEYS)
    moved = sum(before[k] != after[k] for k in KEYS) / len(KEYS)
    # Ideal is 1/(n+1) (the new shard's share); the load bound adds a small cascade.
    assert 0.5 / (n + 1) < moved < 2.0 / (n + 1), f"{moved:.3f} of timers moved going {n} -> {n + 1} shards"


def test_item_walks_clockwise_past_full_shards():
    ring = Ring(4, 0.25)
    key = "trigger-42"
    home = ring.home(key)
    loads = [0, 0, 0, 0]
    loads[home] = 10
    other = ring.place(key, loads, capacity=10)
    assert other != home
    loads[other] = 10
    third = ring.place(key, loads, capacity=10)
    assert third not in (home, other)
    assert ring.place(key, [0, 0, 0, 0], capacity=10) == home


def test_every_shard_full_falls_back_to_home():
    ring = Ring(3)
    assert ring.place("x", [5, 5, 5], capacity=5) == ring.home("x")


def test_growing_the_ring_only_moves_keys_to_the_new_shard_without_loads():
    small, big = Ring(5), Ring(6)
    moved = [k for k in KEYS if small.home(k) != big.home(k)]
    assert moved and all(big.home(k) == 5 for k in moved)

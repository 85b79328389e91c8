"""The processor's stream (outcomes handed back as polls finish) and the run loop's room in fires:
what lifts the head-of-line blocking of a batch behind its slowest poll."""

import asyncio
import time

import numpy as np
import pytest

from schedulers.base import Outcome, RunLoop, outcomes_as_polls_finish
from tests.unit.test_recording import fires_for
from tests.unit.test_recording import make as make_processor


def make(tmp_path, **fields):
    _, pop, rec, proc = make_processor(tmp_path, **fields)
    return pop, rec, proc


def test_stream_hands_groups_back_as_their_polls_finish(tmp_path):
    pop, rec, proc = make(tmp_path, error_rate=0.0, new_event_rate=1.0, state_size=16)
    proc.group_min, proc.group_hold_s = 2, 10.0
    # positions 1 and 3 finish at once, 0 and 2 a while later: two groups, fast ones first
    offsets = np.array([0.4, 0.0, 0.4, 0.0])
    proc._poll_latency = lambda n, now: now + offsets
    due = [round(time.time() - 1, 6)] * 4
    fires = fires_for(pop, [0, 1, 2, 3], due)

    async def collect():
        out = []
        async for positions, outcomes in proc.stream(fires):
            out.append((time.time(), positions, outcomes))
        return out

    start = time.time()
    groups = asyncio.run(collect())
    assert [g[1] for g in groups] == [[1, 3], [0, 2]]
    assert groups[0][0] - start < 0.3 <= groups[1][0] - start  # the fast group did not wait for the slow one
    assert all(len(g[2]) == len(g[1]) for g in groups)
    assert all(o.effect and len(o.new_state) == 16 and o.next_fire_at > due[0] for g in groups for o in g[2])
    assert proc.polls == 4 and proc.external_effects == 4


def test_a_group_closes_when_its_first_poll_has_waited_long_enough(tmp_path):
    pop, rec, proc = make(tmp_path, error_rate=0.0)
    proc.group_min, proc.group_hold_s = 100, 0.05
    offsets = np.array([0.0, 0.01, 0.3, 0.31])
    proc._poll_latency = lambda n, now: now + offsets
    fires = fires_for(pop, [0, 1, 2, 3], [round(time.time() - 1, 6)] * 4)

    async def collect():
        return [positions async for positions, _ in proc.stream(fires)]

    # a group of 100 never fills; each closes 50 ms after its first poll finished
    assert asyncio.run(collect()) == [[0, 1], [2, 3]]


def test_stream_and_process_decide_alike(tmp_path):
    """Same seed, same fires: the streamed outcomes are the batch's, position for position."""
    due = round(time.time() - 0.5, 6)
    results = []
    for streamed in (False, True):
        pop, rec, proc = make(tmp_path / str(streamed), error_rate=0.3, new_event_rate=0.3)
        proc.group_min = 3
        fires = fires_for(pop, range(20), [due] * 20)

        async def run(streamed=streamed, proc=proc, fires=fires):
            if not streamed:
                return list(await proc.process(fires))
            out: list[Outcome | None] = [None] * len(fires)
            async for positions, outcomes in outcomes_as_polls_finish(proc, fires):
                for i, o in zip(positions, outcomes):
                    out[i] = o
            return out

        results.append(asyncio.run(run()))
    batch, streamed = results
    assert [o.effect for o in batch] == [o.effect for o in streamed]
    assert [o.new_state is None for o in batch] == [o.new_state is None for o in streamed]
    # fixed cadence: the next fire is a grid time, the same whenever the poll finished; a retry
    # is a backoff from when the poll finished (each run received its batch at its own time)
    retry = [o.next_fire_at < due + 10 for o in batch]
    assert any(retry) and not all(retry)
    assert [o.next_fire_at < due + 10 for o in streamed] == retry
    assert [o.next_fire_at for o, r in zip(batch, retry) if not r] == [
        o.next_fire_at for o, r in zip(streamed, retry) if not r
    ]
    assert all(abs(a.next_fire_at - b.next_fire_at) < 1.0 for a, b, r in zip(batch, streamed, retry) if r)


def test_a_processor_without_stream_is_one_group():
    class Batchy:
        async def process(self, fires):
            return [Outcome(None) for _ in fires]

    async def collect():
        return [g async for g in outcomes_as_polls_finish(Batchy(), ["a", "b", "c"])]

    (group,) = asyncio.run(collect())
    assert group[0] == [0, 1, 2] and len(group[1]) == 3


def test_a_killed_stream_sends_only_the_webhooks_of_finished_polls(tmp_path):
    pop, rec, proc = make(tmp_path, error_rate=0.0, new_event_rate=1.0)
    proc.group_min = 1
    proc._poll_latency = lambda n, now: np.array([now - 0.01, now + 60.0, now + 60.0])
    fires = fires_for(pop, [0, 1, 2], [time.time() - 1] * 3)

    async def killed() -> int:
        got = 0

        async def consume():
            nonlocal got
            async for positions, _ in proc.stream(fires):
                got += len(positions)

        task = asyncio.create_task(consume())
        while got < 1:
            await asyncio.sleep(0.005)
        task.cancel()  # a crash while the slow polls are out
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    assert asyncio.run(killed()) == 1
    assert proc.external_effects == 1


def test_room_in_fires_comes_back_as_groups_commit():
    """A batch that gives its rows back as they commit lets the next claim start before the
    batch's slowest row is done; the rest of its room comes back when it ends."""

    async def scenario():
        stop = asyncio.Event()
        slow_done = asyncio.Event()
        order = []
        async with RunLoop(fires_in_flight=10) as loop:
            assert await loop.take_slot(stop, 10)

            async def batch(held):
                held.give(6)  # six rows committed early
                order.append("gave 6")
                await slow_done.wait()  # the slowest row is still polling

            loop.start_stream(batch, size=10)
            # a claim of up to 10 once at least half of it is free: it gets the 6 that came back
            assert await asyncio.wait_for(loop.take_slot(stop, 10, least=5), 1.0) == 6
            order.append("took 6")
            assert loop.room.free == 0
            loop.give_back(6)
            slow_done.set()
            await asyncio.sleep(0.01)
            assert loop.room.free == 10  # the batch's last 4 came back when it ended
            stop.set()
            assert not await loop.take_slot(stop, 10)  # stopping: nothing more is claimed
            assert loop.room.free == 10
        return order

    assert asyncio.run(scenario()) == ["gave 6", "took 6"]


def test_batch_slots_are_unchanged():
    async def scenario():
        stop = asyncio.Event()
        release = asyncio.Event()
        async with RunLoop(2) as loop:
            for _ in range(2):
                assert await loop.take_slot(stop)
                loop.start_batch(release.wait)
            waiter = asyncio.create_task(loop.take_slot(stop))
            await asyncio.sleep(0.02)
            assert not waiter.done()  # both slots busy
            release.set()
            assert await asyncio.wait_for(waiter, 1.0)
            loop.give_back()
            stop.set()

    asyncio.run(scenario())

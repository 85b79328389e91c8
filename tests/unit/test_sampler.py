"""The sampler's loop, without a server: a slow segment write never holds the sampling back.
(Its reads against a real Postgres table are in tests/cost/test_sampler_deltas.py.)"""

import asyncio
import time

from metrics.recorder import FireRecorder
from metrics.sampler import Sampler


class OneTable:
    """Just enough of a scheduler for the sampler: one table it names, and a gauge."""

    needs_postgres = True

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def relations(self) -> list[str]:
        return [f"{self.schema}.triggers"]

    async def stats(self) -> dict[str, float]:
        return {"depth": 7.0}


async def test_sampling_goes_on_while_a_segment_is_written(tmp_path, monkeypatch):
    """The segment closed every few samples is written in the background: a slow write (seconds
    on a busy machine) must not hold the next samples back, and the loop ends only after it has
    finished."""
    now = time.time()
    recorder = FireRecorder(tmp_path / "segments", now, now + 60)
    sampler = Sampler(OneTable("s"), recorder, None, tmp_path, every_s=0.01)
    taken, written = [], asyncio.Event()
    release = asyncio.Event()

    async def sample() -> None:
        taken.append(len(taken))

    async def slow_copy() -> None:
        await release.wait()  # a write that takes as long as the test wants
        written.set()

    monkeypatch.setattr(sampler, "sample", sample)
    monkeypatch.setattr(sampler, "save_async", slow_copy)
    stop = asyncio.Event()
    loop = asyncio.create_task(sampler.loop(stop))
    deadline = time.time() + 30
    while len(taken) < 25 and time.time() < deadline:
        await asyncio.sleep(0.01)
    assert len(taken) >= 25, f"sampling stopped at {len(taken)} samples while a segment was being written"
    stop.set()
    await asyncio.sleep(0.05)
    assert not loop.done(), "the loop returned before the segment it started was written"
    release.set()
    await asyncio.wait_for(loop, 5)
    assert written.is_set()

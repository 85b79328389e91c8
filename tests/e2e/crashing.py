"""A scheduler that crashes mid-run, for the crash test (registered only inside that test's subprocess)."""

import asyncio

from schedulers.memory import MemoryScheduler


class CrashingScheduler(MemoryScheduler):
    name = "crashing"
    description = "memory, but its run loop raises after three seconds"

    async def run(self, processors, stop, worker_id=None):
        inner = asyncio.create_task(super().run(processors, stop, worker_id))
        await asyncio.sleep(3.0)
        inner.cancel()
        raise RuntimeError("store connection lost")

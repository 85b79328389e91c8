"""A scheduler that delivers every fire a fixed time late, for the accounting tests (registered
only inside those tests' subprocesses)."""

import asyncio

from schedulers.memory import MemoryScheduler

DELAY_S = 3.0  # every fire reaches its processor this long after it was claimed (claims happen when due)


class DelaysEveryFire(MemoryScheduler):
    name = "delays_every_fire"
    description = "memory, but every claimed batch waits 3 s before it reaches the processor"
    # enough batches in flight that waiting batches do not queue behind each other
    default_options = {**MemoryScheduler.default_options, "inflight_batches": 512}

    async def _process(self, processors, claimed, owner, held):
        await asyncio.sleep(DELAY_S)
        await super()._process(processors, claimed, owner, held)

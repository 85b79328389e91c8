"""A shadow that loses 1% of its arms, for the NO-GO test (registered only inside that test's subprocess)."""

import zlib

from schedulers.memory import MemoryScheduler


class DropsOnePercent(MemoryScheduler):
    name = "drops_one_percent"
    description = "memory, but it silently drops 1% of the timers armed into it"

    async def arm(self, timers):
        await super().arm([t for t in timers if zlib.crc32(t.id.encode()) % 100 != 0])

"""The promises of docs/design.md, run against every registered scheduler.

A backend joins by adding itself to ``schedulers.base.REGISTRY`` (with ``conformance_options``
for short intervals); a promise joins by being registered with ``@promise`` in ``promises.py``.
Nothing in this file names a backend or a promise. Promises a backend does not claim (per-tenant
fairness, heartbeat leases) are skipped with the capability named, never hidden.
"""

from __future__ import annotations

import pytest

from schedulers.base import REGISTRY, create, scheduler_class
from tests.conformance.promises import PROMISES


@pytest.mark.parametrize("promise", PROMISES, ids=lambda p: p.name)
@pytest.mark.parametrize("name", sorted(REGISTRY))
async def test_promise(name, promise, make_ctx):
    cls = scheduler_class(name)
    ctx = make_ctx(cls)

    async def factory():
        scheduler = create(name, ctx, **getattr(cls, "conformance_options", {}))
        await scheduler.setup()
        return scheduler

    probe = create(name, ctx, **getattr(cls, "conformance_options", {}))
    if not promise.applies_to(probe.capabilities):
        pytest.skip(f"{name} declares {promise.requires}=False, so this promise does not apply")
    await promise.check(factory)

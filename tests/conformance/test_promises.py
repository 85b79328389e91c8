"""The promises of DESIGN.md, run against every registered scheduler.

A backend joins by adding itself to ``schedulers.base.REGISTRY`` (with ``conformance_options``
for short intervals); nothing in this file names a backend. Promises a backend does not claim
(per-tenant fairness, heartbeat leases) are skipped with the capability named, never hidden.
"""

from __future__ import annotations

import pytest

from schedulers.base import REGISTRY, create, scheduler_class
from tests.conformance import promises

CHECKS = [
    promises.check_never_fires_early,
    promises.check_every_timer_fires_within_max_lag,
    promises.check_none_fire_at_is_due_now,
    promises.check_rearm_moves_timer,
    promises.check_export_armed_holds_what_will_still_fire,
    promises.check_crashed_owner_timers_are_redelivered,
    promises.check_slow_owner_keeps_timers,
    promises.check_duplicate_fire_has_no_duplicate_effect,
    promises.check_big_tenant_cannot_starve_others,
    promises.check_two_runners_share_one_store,
    promises.check_export_lists_what_will_fire,
    promises.check_disarm_removes_timers,
]

# promise -> the capability a backend must declare for it to apply
REQUIRES = {
    promises.check_slow_owner_keeps_timers: "heartbeat_leases",
    promises.check_big_tenant_cannot_starve_others: "per_tenant_fairness",
    promises.check_two_runners_share_one_store: "multi_runner",
}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", sorted(REGISTRY))
async def test_promise(name, check, make_ctx):
    cls = scheduler_class(name)
    ctx = make_ctx(cls)

    async def factory():
        scheduler = create(name, ctx, **getattr(cls, "conformance_options", {}))
        await scheduler.setup()
        return scheduler

    needed = REQUIRES.get(check)
    if needed:
        probe = create(name, ctx, **getattr(cls, "conformance_options", {}))
        if not getattr(probe.capabilities, needed):
            pytest.skip(f"{name} declares {needed}=False, so this promise does not apply")
    await check(factory)

"""pgqueuer beyond the shared promises: a worker crash mid-poll recovered by PgQueuer's own
re-pick of a job whose heartbeat lapsed, a move of a pending timer (the superseded job cancelled
through PgQueuer), a restart that resumes a re-arming chain, its tables on the bill, and a
teardown that leaves nothing running (tests/job_library_checks.py has the checks)."""

from __future__ import annotations

import pytest

from schedulers.pgqueuer import PgqueuerScheduler
from tests import job_library_checks as checks

FAST = dict(PgqueuerScheduler.conformance_options)


def jobs_of(s, trigger_id: str) -> list[tuple[str, int]]:
    """PgQueuer's jobs of a trigger still in its queue table: (status, attempts)."""
    return [
        (str(st), int(a))
        for st, a in checks.rows(
            s,
            "SELECT status::text, attempts FROM {schema}.pgqueuer WHERE dedupe_key LIKE %s ORDER BY id",
            f"{trigger_id}@%",
        )
    ]


async def started(make_ctx, **options) -> PgqueuerScheduler:
    s = PgqueuerScheduler(make_ctx(PgqueuerScheduler), **{**FAST, **options})
    await s.setup()
    return s


async def test_crash_mid_poll_is_recovered_by_the_heartbeat_re_pick(make_ctx):
    """The jobs stay ``picked`` (the severed QueueManager logged nothing), the heir's dequeue
    re-picks them once their heartbeat is older than the lease, and each effect is recorded
    once. PgQueuer does not count a re-pick as an attempt: the redelivery is attempt 1."""
    await checks.crash_mid_poll(await started(make_ctx), jobs_of, claimed_status="picked", redelivered_attempt=1)


async def test_move_of_a_pending_timer(make_ctx):
    await checks.move_of_a_pending_timer(await started(make_ctx), jobs_of, pending_status="queued")


@pytest.mark.parametrize("crash", [False, True], ids=["stopped", "crashed"])
async def test_restart_resumes_the_chain(make_ctx, crash):
    ctx = make_ctx(PgqueuerScheduler)
    await checks.restart_resumes_the_chain(lambda: PgqueuerScheduler(ctx, **FAST), crash)


async def test_every_table_in_the_schema_is_on_the_bill(make_ctx):
    s = await started(make_ctx)
    try:
        checks.tables_on_the_bill(s, ["pgqueuer", "pgqueuer_log", "pgqueuer_statistics"])
    finally:
        await s.teardown(drop=True)


async def test_teardown_leaves_nothing_running(make_ctx):
    s = await started(make_ctx)
    await checks.teardown_leaves_nothing_running(s, s.ctx.schema)

"""procrastinate beyond the shared promises: a worker crash mid-poll recovered by the
stalled-jobs recipe, a move of a pending timer (the superseded job cancelled through
procrastinate), a restart that resumes a re-arming chain, its tables on the bill, and a teardown
that leaves nothing running (tests/job_library_checks.py has the checks)."""

from __future__ import annotations

import pytest

from schedulers.procrastinate import ProcrastinateScheduler
from tests import job_library_checks as checks

FAST = dict(ProcrastinateScheduler.conformance_options)


def jobs_of(s, trigger_id: str) -> list[tuple[str, int]]:
    """procrastinate's jobs of a trigger that are not finished: (status, attempts)."""
    return [
        (str(st), int(a))
        for st, a in checks.rows(
            s,
            "SELECT status::text, attempts FROM {schema}.procrastinate_jobs"
            " WHERE queueing_lock = %s AND status IN ('todo', 'doing') ORDER BY id",
            trigger_id,
        )
    ]


async def started(make_ctx, **options) -> ProcrastinateScheduler:
    s = ProcrastinateScheduler(make_ctx(ProcrastinateScheduler), **{**FAST, **options})
    await s.setup()
    return s


async def test_crash_mid_poll_is_recovered_by_the_stalled_jobs_sweep(make_ctx):
    """The jobs stay ``doing`` (the severed worker wrote no abort), the heir's sweep retries
    them (``attempts`` + 1, so attempt 2), and each effect is recorded once."""
    s = await started(make_ctx)
    await checks.crash_mid_poll(s, jobs_of, claimed_status="doing", redelivered_attempt=2)
    assert s.stalled_retried >= 5


async def test_move_of_a_pending_timer(make_ctx):
    await checks.move_of_a_pending_timer(await started(make_ctx), jobs_of, pending_status="todo")


@pytest.mark.parametrize("crash", [False, True], ids=["stopped", "crashed"])
async def test_restart_resumes_the_chain(make_ctx, crash):
    ctx = make_ctx(ProcrastinateScheduler)
    await checks.restart_resumes_the_chain(lambda: ProcrastinateScheduler(ctx, **FAST), crash)


async def test_every_table_in_the_schema_is_on_the_bill(make_ctx):
    s = await started(make_ctx)
    try:
        checks.tables_on_the_bill(s, ["procrastinate_jobs", "procrastinate_events", "procrastinate_workers"])
    finally:
        await s.teardown(drop=True)


async def test_teardown_leaves_nothing_running(make_ctx):
    s = await started(make_ctx)
    await checks.teardown_leaves_nothing_running(s, s.ctx.schema)


def test_a_schema_the_library_cannot_resolve_is_refused(make_ctx):
    ctx = make_ctx(ProcrastinateScheduler)
    with pytest.raises(ValueError, match="plain lower-case schema"):
        ProcrastinateScheduler(type(ctx)(dsn=ctx.dsn, schema="Mixed Case"))

"""Temporal's bill: the persistence requests the server reports, scraped by the sampler, are
more than zero and rise with the number of fires; the scrape's sums equal prometheus_client's
own parse of the same page."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import stack
from metrics.recorder import FireRecorder
from metrics.rundir import server_scope
from metrics.sampler import Sampler
from metrics.stores import ServerWatch, parse_temporal_metrics
from schedulers.base import StoreContext, Timer, create, scheduler_class
from schedulers.temporal_shards.workflows import POLLER_WORKFLOW
from tests.conformance.helpers import bound_s
from tests.conformance.promises import RecordingProcessor, Runner, wait_until


@contextlib.asynccontextmanager
async def temporal_of_its_own(tmp_path):
    """(address, metrics URL) of a Temporal server only this test uses: the persistence counters
    are server-wide, and on the session's shared dev server the other test workers' workflows
    land in them too (seen: 20 fires "costing" twice what 200 did). A user's server given by
    ``TIMERBENCH_TEMPORAL`` is used as it is, with ``TIMERBENCH_TEMPORAL_METRICS`` its endpoint."""
    if os.environ.get("TIMERBENCH_TEMPORAL"):
        url = os.environ.get("TIMERBENCH_TEMPORAL_METRICS")
        if not url:
            pytest.skip(
                "TIMERBENCH_TEMPORAL points at a server of the user's; set TIMERBENCH_TEMPORAL_METRICS to its "
                "Prometheus endpoint to run this test there"
            )
        yield os.environ["TIMERBENCH_TEMPORAL"], url
        return
    dev = stack.TemporalDev(home=tmp_path, name="temporal-bill")
    address, _ = await asyncio.to_thread(dev.start, stack.free_port())  # its readiness probe runs its own loop
    try:
        url = dev.metrics_url()
        assert url, "the embedded Temporal dev server runs without a metrics port"
        yield address, url
    finally:
        await asyncio.to_thread(dev.stop)


async def pollers_running(s) -> int:
    """Batch-poller workflows of this scheduler still running, as Temporal's visibility lists them."""
    query = f"TaskQueue = '{s.task_queue}' AND WorkflowType = '{POLLER_WORKFLOW}' AND ExecutionStatus = 'Running'"
    return len([wf async for wf in s.client.list_workflows(query)])


async def until_pollers_done(s, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while await pollers_running(s):
        if time.time() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


def persistence_total(text: str) -> float:
    """Every persistence_requests sample of a page, by prometheus_client (not by metrics.stores)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "persistence_requests":
            total += sum(
                s.value for s in family.samples if s.name in ("persistence_requests", "persistence_requests_total")
            )
    return total


async def test_temporal_persistence_requests_rise_with_the_fire_count(pg_dsn, schema, tmp_path):
    async with temporal_of_its_own(tmp_path) as (address, url):
        await check_requests_rise_with_the_fire_count(
            StoreContext(dsn=pg_dsn, schema=schema, temporal_address=address), url, tmp_path
        )


async def check_requests_rise_with_the_fire_count(ctx: StoreContext, url: str, tmp_path) -> None:
    cls = scheduler_class("temporal_shards")
    page = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
    assert parse_temporal_metrics(page)["persistence_requests"] == pytest.approx(persistence_total(page))

    # small batches: each batch poller is a workflow of its own, so Temporal's work grows with the fires
    s = create("temporal_shards", ctx, **{**cls.conformance_options, "batch": 10, "max_lag_s": 0.2})
    await s.setup()
    runner = Runner(s)
    proc = RecordingProcessor()
    sampler = Sampler(
        s,
        FireRecorder(tmp_path / "segments", 0, 0),
        None,
        tmp_path,
        every_s=0,
        servers=[ServerWatch("temporal", metrics_url=url)],
    )
    scope = server_scope("temporal")
    requests = []
    try:
        runner.start(proc, "w1")
        await sampler.open()
        # a first phase starts the shard and controller workflows; then 20 fires, then ten times as many
        for n in (10, 20, 200):
            first = len(proc.received)
            now = time.time()
            await s.arm([Timer(f"p{n}-{i}", now + 0.3 + 0.01 * i) for i in range(n)])
            assert await wait_until(lambda first=first, n=n: len(proc.received) >= first + n, 60), (
                f"{len(proc.received) - first} of {n}"
            )
            # the batches' workflows complete: every effect committed, then no poller left running
            armed = sum((10, 20, 200)[: len(requests) + 1])
            assert await wait_until(lambda armed=armed: len(proc.delivered) >= armed, bound_s(s)), len(proc.delivered)
            assert await until_pollers_done(s, bound_s(s)), f"{await pollers_running(s)} batch pollers still running"
            await sampler.sample(edge=True)  # an edge sample scrapes
            requests.append(sampler.latest[(scope, "persistence_requests")])
            assert sampler.latest[(scope, "persistence_writes")] > 0
    finally:
        await runner.stop_all()
        await sampler.close()
        await s.teardown(drop=True)
    phase1, phase2 = requests[1] - requests[0], requests[2] - requests[1]
    assert requests[0] > 0 and phase1 > 0, requests
    assert phase2 > phase1, f"200 fires cost {phase2:.0f} persistence requests, 20 fires {phase1:.0f}"

"""Polling applications on real job libraries, for ``bench inspect --preset`` and ``bench capture
--preset`` (tests/owntable/test_job_libraries.py). Each runs in its own process, against tables
the library itself creates, and re-arms the way the library's docs suggest: a job per trigger
that, when it runs, defers its own next run (a new row every fire). The trigger's id and tenant
travel inside the job's JSON arguments.

Every application keeps a fixed cadence: a job re-arms its trigger at its own due time plus the
trigger's interval, as the legacy application does, so the gaps between successive due times
are exactly the interval whatever the worker's lag (an application re-arming at "run end +
interval" would add its own lag to every gap, and a library's worker falling behind would make
it skip periods).

The plan (triggers, tenants, intervals) is the same for every library and for the node
applications beside this file (``node/apps.mjs``): :func:`plan`. The process prints ``ready``
once its triggers are armed, writes ``--out`` (the plan's figures) then, and again with the fires
counted when SIGTERM stops it. The DSN comes from ``TIMERBENCH_APP_DSN``, never the command line.

    TIMERBENCH_APP_DSN=... python -m tests.owntable.job_apps --library procrastinate --out app.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LIBRARIES = ("procrastinate", "pgqueuer", "dbos")
TASK = "poll"


@dataclass
class Trigger:
    trigger_id: str
    tenant: str
    every_s: int
    phase_s: float  # its first due time, epoch seconds

    def args(self) -> dict:
        return {"trigger_id": self.trigger_id, "tenant": self.tenant, "every": self.every_s}

    def next_due(self, due: float) -> float:
        """The due time after ``due``, of its fixed cadence."""
        return due + self.every_s


@dataclass
class Plan:
    triggers: list[Trigger]
    fires: int = 0
    dues: dict[str, list[float]] = field(default_factory=dict)  # due times of the jobs run, per trigger
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_at(self, start: float) -> None:
        """Move every first due time to ``start`` + its offset: called when the library is ready
        (DBOS takes seconds to launch), so no trigger starts late."""
        first = min(t.phase_s for t in self.triggers) - 0.5
        for t in self.triggers:
            t.phase_s += start - first

    def by_id(self) -> dict[str, Trigger]:
        return {t.trigger_id: t for t in self.triggers}

    def fired(self, trigger_id: str, due: float) -> None:
        with self.lock:
            self.fires += 1
            self.dues.setdefault(trigger_id, []).append(due)

    def armed_interval(self, t: Trigger) -> float:
        """What the application did: the median gap between the due times of its trigger's jobs
        as the library stored them (PgQueuer takes a delay from the database's now(), so its
        gaps carry the enqueue's own latency); the planned interval before two have run."""
        dues = sorted(self.dues.get(t.trigger_id, []))
        gaps = [b - a for a, b in zip(dues, dues[1:])]
        return statistics.median(gaps) if gaps else float(t.every_s)

    def figures(self) -> dict:
        tenants: dict[str, int] = {}
        for t in self.triggers:
            tenants[t.tenant] = tenants.get(t.tenant, 0) + 1
        with self.lock:
            armed = [self.armed_interval(t) for t in self.triggers]
            dues = {k: sorted(v) for k, v in self.dues.items()}
        return {
            "triggers": len(self.triggers),
            "planned_rate_per_s": sum(1.0 / t.every_s for t in self.triggers),
            "planned_intervals_s": sorted(t.every_s for t in self.triggers),
            "rate_per_s": sum(1.0 / a for a in armed),
            "intervals_s": sorted(armed),
            "tenants": len(tenants),
            "tenant_sizes": sorted(tenants.values(), reverse=True),
            "fires": self.fires,
            "dues": dues,  # the due times of the jobs run, per trigger
        }


def plan(triggers: int, every: tuple[int, int], tenants: int, seed: int = 11, start: float | None = None) -> Plan:
    """Triggers with whole-second intervals in ``every`` and Zipf-ish tenants, first due within
    one interval of ``start``."""
    rng = random.Random(seed)
    start = time.time() if start is None else start
    out = []
    for i in range(triggers):
        every_s = rng.randint(*every)
        tenant = f"tenant-{min(int(rng.paretovariate(1.1)), tenants):02d}"
        out.append(Trigger(f"trigger-{i:04d}", tenant, every_s, start + rng.uniform(0.5, every_s)))
    return Plan(out)


def _write(path: Path, p: Plan) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(p.figures(), indent=2) + "\n")
    tmp.replace(path)  # whole, for a reader polling it


def _stopper() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    return stop


def _ready(out: Path, p: Plan) -> None:
    _write(out, p)
    _report_every_second(out, p)
    print("ready", flush=True)


# -- procrastinate: a task that defers itself, schedule_at its next due time -------------------


async def run_procrastinate(dsn: str, p: Plan, out: Path) -> None:
    from datetime import UTC, datetime

    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    triggers = p.by_id()

    @app.task(name=TASK, pass_context=True)
    async def poll(context: procrastinate.JobContext, trigger_id: str, tenant: str, every: int) -> None:
        due = context.job.scheduled_at.timestamp()
        p.fired(trigger_id, due)
        nxt = triggers[trigger_id].next_due(due)
        await poll.configure(schedule_at=datetime.fromtimestamp(nxt, tz=UTC)).defer_async(
            trigger_id=trigger_id, tenant=tenant, every=every
        )

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        p.start_at(time.time() + 1.0)
        for t in p.triggers:
            await poll.configure(schedule_at=datetime.fromtimestamp(t.phase_s, tz=UTC)).defer_async(**t.args())
        stop = _stopper()
        # finished jobs are kept (delete_jobs="never", the library's default)
        worker = asyncio.create_task(
            app.run_worker_async(
                concurrency=8, fetch_job_polling_interval=0.2, install_signal_handlers=False, delete_jobs="never"
            )
        )
        _ready(out, p)
        await stop.wait()
        worker.cancel()
        try:
            await worker
        except asyncio.CancelledError:
            pass


# -- PgQueuer: an entrypoint that enqueues its next job, execute_after its next due time --------


async def run_pgqueuer(dsn: str, p: Plan, out: Path) -> None:
    from datetime import timedelta

    import psycopg
    from pgqueuer import PgQueuer, PsycopgDriver, Queries
    from pgqueuer.models import Job

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    triggers = p.by_id()
    pgq = PgQueuer(PsycopgDriver(await psycopg.AsyncConnection.connect(dsn, autocommit=True)))

    planned: dict[str, float] = {}  # trigger id -> the due time its pending job was planned for

    @pgq.entrypoint(TASK)
    async def poll(job: Job) -> None:
        args = json.loads(job.payload)
        t = triggers[args["trigger_id"]]
        p.fired(t.trigger_id, job.execute_after.timestamp())
        # The cadence follows the planned due times (kept here: the payload is the job's
        # identity): PgQueuer stores the database's now() plus the delay, so re-arming from the
        # stored time would add each enqueue's latency to the next interval.
        planned[t.trigger_id] = t.next_due(planned[t.trigger_id])
        delay = planned[t.trigger_id] - time.time()
        await queries.enqueue(TASK, job.payload, 0, timedelta(seconds=max(0.0, delay)))

    p.start_at(time.time() + 1.0)
    planned.update({t.trigger_id: t.phase_s for t in p.triggers})
    now = time.time()
    await queries.enqueue(
        [TASK] * len(p.triggers),
        [json.dumps(t.args()).encode() for t in p.triggers],
        [0] * len(p.triggers),
        [timedelta(seconds=max(0.0, t.phase_s - now)) for t in p.triggers],
    )
    stop = _stopper()
    runner = asyncio.create_task(pgq.run(dequeue_timeout=timedelta(seconds=0.2), batch_size=20))
    _ready(out, p)
    await stop.wait()
    pgq.shutdown.set()
    try:
        await asyncio.wait_for(runner, 10)
    except (TimeoutError, asyncio.CancelledError):
        runner.cancel()


# -- DBOS: a queued workflow that enqueues its successor, delayed until its next due time ------


def run_dbos(dsn: str, p: Plan, out: Path) -> None:
    from dbos import DBOS, SetEnqueueOptions, SetWorkflowAttributes

    DBOS(config={"name": "timerbench-owntable", "system_database_url": _url(dsn)})
    triggers = p.by_id()
    queue = None

    def enqueue(t: Trigger, due: float) -> None:
        # the trigger's id and tenant as the workflow's attributes (a JSON column of its row);
        # DBOS stores now + the delay, so a late re-arm is stored (and passed on) as now
        now = time.time()
        due = max(due, now)
        with SetWorkflowAttributes({"trigger_id": t.trigger_id, "tenant": t.tenant}):
            with SetEnqueueOptions(delay_seconds=due - now):
                queue.enqueue(poll, t.trigger_id, due)

    @DBOS.workflow()
    def poll(trigger_id: str, due: float) -> None:
        p.fired(trigger_id, due)
        t = triggers[trigger_id]
        enqueue(t, t.next_due(due))

    DBOS.launch()
    queue = DBOS.register_queue("polls", polling_interval_sec=0.2)
    p.start_at(time.time() + 1.0)
    for t in p.triggers:
        enqueue(t, t.phase_s)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    _ready(out, p)
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=2)


def _url(dsn: str) -> str:
    """A libpq DSN as the URL DBOS wants (a password stays in this process, as in the DSN; a
    password file stays a ``passfile`` parameter)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    p = conninfo_to_dict(dsn)
    auth = quote(p.get("user", ""), safe="") + (":" + quote(p["password"], safe="") if p.get("password") else "")
    query = f"?passfile={quote(p['passfile'], safe='/')}" if p.get("passfile") else ""
    return (
        f"postgresql://{auth}@{p.get('host', 'localhost')}:{p.get('port', 5432)}/"
        f"{quote(p.get('dbname', ''), safe='')}{query}"
    )


def _report_every_second(out: Path, p: Plan) -> None:
    """The figures rewritten once a second, so a test can wait until every trigger has fired."""

    def loop() -> None:
        while True:
            time.sleep(1.0)
            _write(out, p)

    threading.Thread(target=loop, daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", choices=LIBRARIES, required=True)
    ap.add_argument("--triggers", type=int, default=200)
    ap.add_argument("--every", default="2..5", help="interval range in whole seconds, LOW..HIGH")
    ap.add_argument("--tenants", type=int, default=12)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    lo, _, hi = a.every.partition("..")
    p = plan(a.triggers, (int(lo), int(hi or lo)), a.tenants)
    dsn = os.environ["TIMERBENCH_APP_DSN"]
    if a.library == "dbos":
        run_dbos(dsn, p, a.out)
    else:
        asyncio.run({"procrastinate": run_procrastinate, "pgqueuer": run_pgqueuer}[a.library](dsn, p, a.out))
    _write(a.out, p)


if __name__ == "__main__":
    main()

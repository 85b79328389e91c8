"""A scheduler node: the claim loop and the polling processor behind a small HTTP API.

Endpoints (bound to 127.0.0.1 unless told otherwise; ``--token`` requires ``Authorization:
Bearer <token>`` on everything but the health checks, which orchestrators call bare):

* ``PUT /timers`` arms a batch: ``{"timers": [{"id", "fire_at", "type", "tenant", "priority"}]}``
  (or a bare list). ``fire_at`` is epoch seconds, an ISO-8601 time, or null for "due now". The
  whole body is validated before anything is armed: a bad body gets 400 with a message naming
  the item and field, and arms nothing.
* ``GET /health/live`` is 200 while the process exists.
* ``GET /health/ready`` is 200 only if the stores are reachable **and** the claim loop is alive
  and ticking (its ``last_tick_at`` is recent); 503 otherwise, with the reason. health-endpoints: a dead
  tick loop behind a green API is exactly the failure to prevent.
* ``GET /metrics``: Prometheus text format (fires, lag histogram, claims, armed, loop heartbeat age).
* ``GET /progress`` (token-protected): the polling processor's per-trigger bookkeeping as an
  ``.npz`` (``armed_due``, ``armed_at``, ``received_due``, ``skipped_due``, and the scheduler's
  ``claimed_timers``) so that ``bench run --nodes N`` can tell, while draining, which fires due
  in its window have not arrived at any node yet, and count claims.
* ``PUT /rearm-until`` (token-protected): ``{"at": epoch_s}``; fires received from then on are
  finished instead of re-armed (the run's drain after its measured window).

Timers of type ``load`` (what ``loadgen/locustfile.py`` arms) go to :class:`LoadSink`, which
only counts them: arm load exercises the store without mixing its fires into the measured
population's.

``SIGUSR1`` kills the claim loop inside the node (the "tick loop panicked" case), so that
readiness can be seen to follow it; the HTTP API stays up.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from metrics.parts import HoldLog
from schedulers.base import Fire, Outcome, Processor, Scheduler, Timer, outcomes_as_polls_finish

MAX_TIMERS_PER_PUT = 10_000
LAG_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120)


class BadTimers(ValueError):
    pass


def parse_fire_at(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadTimers(f"{where}.fire_at must be epoch seconds, an ISO-8601 time or null, got {value!r}")
    if isinstance(value, (int, float)):
        if not (0 < float(value) < 1e11):
            raise BadTimers(f"{where}.fire_at {value!r} is not a plausible epoch time in seconds")
        return float(value)
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BadTimers(f"{where}.fire_at {value!r} is not an ISO-8601 time") from None
        if dt.tzinfo is None:
            raise BadTimers(f"{where}.fire_at {value!r} has no time zone; add Z or +00:00")
        return dt.timestamp()
    raise BadTimers(f"{where}.fire_at must be epoch seconds, an ISO-8601 time or null, got {type(value).__name__}")


def load_json(text: str) -> Any:
    """A request body as JSON; :class:`BadTimers` (a 400) when it is not JSON or is nested deeper
    than the parser's recursion limit (``[[[[...]]]]`` 100,000 deep raised RecursionError: a 500)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadTimers(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise BadTimers("body is nested too deeply to be a timer list") from None


def parse_timers(body: Any, known_types: Sequence[str]) -> list[Timer]:
    """Validate a PUT /timers body completely; raise BadTimers naming the first problem."""
    items = body.get("timers") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise BadTimers('body must be {"timers": [...]} or a JSON list of timers')
    if not items:
        raise BadTimers("no timers in the body")
    if len(items) > MAX_TIMERS_PER_PUT:
        raise BadTimers(f"{len(items)} timers in one request; at most {MAX_TIMERS_PER_PUT}")
    out: list[Timer] = []
    for i, item in enumerate(items):
        where = f"timers[{i}]"
        if not isinstance(item, dict):
            raise BadTimers(f"{where} must be an object")
        unknown = set(item) - {"id", "fire_at", "type", "tenant", "tenant_id", "priority"}
        if unknown:
            raise BadTimers(f"{where} has unknown field(s) {sorted(unknown)}")
        tid = item.get("id")
        if not isinstance(tid, str) or not tid or len(tid) > 200:
            raise BadTimers(f"{where}.id must be a non-empty string of at most 200 characters")
        if "fire_at" not in item:
            raise BadTimers(f"{where}.fire_at is required (use null for due now)")
        fire_at = parse_fire_at(item["fire_at"], where)
        type_ = item.get("type", "poll")
        if type_ not in known_types:
            raise BadTimers(f"{where}.type {type_!r} has no processor; known: {', '.join(known_types)}")
        tenant = item.get("tenant", item.get("tenant_id", "t0"))
        if not isinstance(tenant, str) or not tenant:
            raise BadTimers(f"{where}.tenant must be a non-empty string")
        priority = item.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool) or not (-(2**31) <= priority < 2**31):
            raise BadTimers(f"{where}.priority must be an integer that fits in 32 bits")
        out.append(Timer(tid, fire_at, type_, tenant, priority))
    return out


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.fires = Counter("timerbench_fires", "Fires delivered to the processor", registry=self.registry)
        self.claims = Counter(
            "timerbench_claim_batches", "Claim batches handed to the processor", registry=self.registry
        )
        self.armed = Counter("timerbench_timers_armed", "Timers armed through PUT /timers", registry=self.registry)
        self.effects = Counter("timerbench_effects_delivered", "Effects newly recorded", registry=self.registry)
        self.lag = Histogram(
            "timerbench_fire_lag_seconds",
            "fired - max(due, armed); an early fire's is negative",
            buckets=LAG_BUCKETS_S,
            registry=self.registry,
        )
        self.early = Counter("timerbench_early_fires", "Fires delivered before their due time", registry=self.registry)
        self.heartbeat_age = Gauge(
            "timerbench_loop_heartbeat_age_seconds", "Seconds since the claim loop last ticked", registry=self.registry
        )
        self.ready = Gauge("timerbench_ready", "1 when /health/ready would answer 200", registry=self.registry)


class MeteredProcessor:
    """Counts fires and lag for /metrics (and holds, when logged), then hands the batch on."""

    def __init__(self, real: Processor, metrics: NodeMetrics, holds: HoldLog | None = None) -> None:
        self.real = real
        self.metrics = metrics
        self.holds = holds

    async def process(self, fires: Sequence[Fire]) -> Sequence[Outcome]:
        self._received(fires)
        return await self.real.process(fires)

    async def stream(self, fires: Sequence[Fire]):
        """The real processor's groups as their polls finish (schedulers.base), metered alike."""
        self._received(fires)
        async for group in outcomes_as_polls_finish(self.real, fires):
            yield group

    def _received(self, fires: Sequence[Fire]) -> None:
        now = time.time()
        m = self.metrics
        m.claims.inc()
        m.fires.inc(len(fires))
        if self.holds is not None:
            self.holds.received_batch(fires, now)
        for f in fires:
            lag_s = now - max(f.due_at, f.armed_at)
            m.lag.observe(lag_s)  # never clamped: an early fire lands in the lowest bucket and is counted
            if lag_s < 0:
                m.early.inc()

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        if self.holds is not None:
            self.holds.committed_batch(fires, time.time())
        self.metrics.effects.inc(sum(1 for d in delivered if d))
        self.real.committed(fires, delivered)


class LoadSink:
    """The processor of ``load`` timers (arm load from locust): count the fire, finish the timer."""

    def __init__(self) -> None:
        self.fires = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        self.fires += len(fires)
        return [Outcome(None) for _ in fires]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        return None


class Node:
    """One scheduler ``run`` loop plus the HTTP surface that reports on it."""

    def __init__(
        self,
        scheduler: Scheduler,
        processors: Mapping[str, Processor],
        worker_id: str,
        probes: Sequence[Callable[[], Awaitable[None]]] = (),
        token: str | None = None,
        stale_after_s: float | None = None,
        holds: HoldLog | None = None,
        on_armed: Callable[[Sequence[Timer], float], None] | None = None,
        progress: Callable[[], bytes] | None = None,
        on_rearm_until: Callable[[float], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.metrics = NodeMetrics()
        self.holds = holds
        self.processors = {t: MeteredProcessor(p, self.metrics, holds) for t, p in processors.items()}
        self.on_armed = on_armed  # tells the polling processor about population ids armed here
        self.progress_npz = progress
        self.on_rearm_until = on_rearm_until
        self.worker_id = worker_id
        self.probes = list(probes)
        self.token = token
        tick_s = float(getattr(scheduler, "options", {}).get("tick_s", 1.0))
        # Two ticks is the promise; the floor absorbs a claim loop busy with a big batch.
        self.stale_after_s = stale_after_s if stale_after_s is not None else max(2 * tick_s, 2.0)
        self.stop = asyncio.Event()
        self.loop_task: asyncio.Task | None = None
        self.loop_error: str | None = None

    # -- the claim loop -----------------------------------------------------------------

    def start_loop(self) -> None:
        self.loop_task = asyncio.create_task(self.scheduler.run(self.processors, self.stop, worker_id=self.worker_id))
        self.loop_task.add_done_callback(self._loop_ended)

    def _loop_ended(self, task: asyncio.Task) -> None:
        if task.cancelled():
            self.loop_error = "claim loop was killed"
        elif task.exception() is not None:
            exc = task.exception()
            self.loop_error = f"claim loop died: {type(exc).__name__}: {exc}"
        elif not self.stop.is_set():
            self.loop_error = "claim loop returned"

    def kill_loop(self) -> None:
        """Simulate the tick loop dying (SIGUSR1): the API stays up, readiness must not."""
        if self.loop_task is not None and not self.loop_task.done():
            self.loop_task.cancel()

    async def readiness(self) -> tuple[bool, str]:
        if self.loop_task is None:
            return False, "claim loop not started"
        if self.loop_task.done():
            return False, self.loop_error or "claim loop ended"
        last = float(self.scheduler.last_tick_at or 0.0)  # every backend keeps it (schedulers/base.py)
        if not last:
            return False, "claim loop has not ticked yet"
        age = time.time() - last
        if age > self.stale_after_s:
            return False, f"claim loop has not ticked for {age:.1f}s (limit {self.stale_after_s:.1f}s)"
        for probe in self.probes:
            try:
                await asyncio.wait_for(probe(), timeout=2.0)
            except Exception as exc:  # unreachable store: not ready
                return False, f"store unreachable: {type(exc).__name__}"
        return True, "ok"

    # -- HTTP -------------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        if not self.token:
            return True
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    async def put_timers(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        try:
            body = load_json(await request.text())
        except BadTimers as exc:
            return web.json_response({"error": str(exc)}, status=400)
        except UnicodeDecodeError as exc:
            return web.json_response({"error": f"body is not JSON: {exc}"}, status=400)
        try:
            timers = parse_timers(body, sorted(self.processors))
        except BadTimers as exc:
            return web.json_response({"error": str(exc)}, status=400)
        armed_at = time.time()
        try:
            await self.scheduler.arm(timers)
        except Exception as exc:  # the store failed: nothing we validated is wrong
            return web.json_response({"error": f"arming failed: {type(exc).__name__}"}, status=503)
        if self.on_armed is not None:
            self.on_armed(timers, armed_at)
        self.metrics.armed.inc(len(timers))
        return web.json_response({"armed": len(timers)})

    async def progress(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        if self.progress_npz is None:
            return web.json_response({"error": "this node keeps no progress"}, status=404)
        return web.Response(body=self.progress_npz(), content_type="application/octet-stream")

    async def rearm_until(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        try:
            at = float(load_json(await request.text())["at"])
        except (ValueError, KeyError, TypeError):  # BadTimers and UnicodeDecodeError are ValueErrors
            return web.json_response({"error": 'body must be {"at": epoch seconds}'}, status=400)
        if self.on_rearm_until is None:
            return web.json_response({"error": "this node re-arms nothing"}, status=404)
        self.on_rearm_until(at)
        return web.json_response({"rearm_until": at})

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "live"})

    async def ready(self, request: web.Request) -> web.Response:
        ok, reason = await self.readiness()
        self.metrics.ready.set(1 if ok else 0)
        return web.json_response(
            {"status": "ready" if ok else "not ready", "reason": reason}, status=200 if ok else 503
        )

    async def prometheus(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.Response(text="missing or wrong bearer token\n", status=401)
        last = float(getattr(self.scheduler, "last_tick_at", 0.0) or 0.0)
        self.metrics.heartbeat_age.set(time.time() - last if last else float("inf"))
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_put("/timers", self.put_timers)
        app.router.add_get("/health/live", self.live)
        app.router.add_get("/health/ready", self.ready)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/progress", self.progress)
        app.router.add_put("/rearm-until", self.rearm_until)
        return app

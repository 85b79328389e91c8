"""Arm load through ``PUT /timers`` of a ``bench serve`` node, with locust.

Runs in locust's own process (gevent): never import it into the asyncio harness. ``bench run
--arm-load RATE`` starts it headless beside a run; it also works by hand, and in locust's
distributed mode (``--master`` / ``--worker``) unchanged.

Each user arms batches of timers at a pace that makes all users together arm ``arm_rate``
timers per second. Ids come from a pool of ``arm_ids`` per locust process
(``<arm_prefix>[w<worker>-]<n>``), taken in turn: once the pool is used up, every request
re-arms (moves) timers that are already armed, which is the re-arm path of a real trigger
service. Fire times are ``now + arm_horizon`` seconds (default an hour, so the arm load exercises
the store's write path without adding fires to a measured run); timers are of type ``load``,
which a node hands to a processor that only counts them.

Settings (custom locust arguments, each also read from its environment variable):

==================  ===========================  ========  =====================================
argument            environment                  default   meaning
==================  ===========================  ========  =====================================
``--arm-rate``      ``TIMERBENCH_ARM_RATE``      100       timers armed per second, all users
``--arm-batch``     ``TIMERBENCH_ARM_BATCH``     10        timers per PUT
``--arm-ids``       ``TIMERBENCH_ARM_IDS``       100000    distinct ids per process (then re-arm)
``--arm-horizon``   ``TIMERBENCH_ARM_HORIZON``   3600      seconds from now to each fire_at
``--arm-type``      ``TIMERBENCH_ARM_TYPE``      load      timer type (a processor the node has)
``--arm-prefix``    ``TIMERBENCH_ARM_PREFIX``    arm-load- id prefix
``--arm-tenants``   ``TIMERBENCH_ARM_TENANTS``   10        tenants, round robin
``--arm-requests``  ``TIMERBENCH_ARM_REQUESTS``  0         stop after this many PUTs per process
                                                           (0: no limit; ``-t`` still applies)
``--arm-summary``   ``TIMERBENCH_ARM_SUMMARY``             JSON file written at exit (exact totals)
(token)             ``TIMERBENCH_TOKEN``                   bearer token of the node, if any
==================  ===========================  ========  =====================================

Distributed mode: the master sends these settings to its workers; ``--arm-rate`` is the total
over all workers, each taking ``1 / --expect-workers`` of it (so give the master
``--expect-workers`` equal to the workers you start). The master writes ``--arm-summary``.

Load shape: set ``TIMERBENCH_ARM_SHAPE`` (read at import: locust picks its shape class before it
parses arguments) to ``steps:20s=2,40s=4,60s=8`` (hold 2 users until 20 s, then 4 until 40 s,
then 8 until 60 s, then stop) or ``ramp:30s=1,90s=10`` (users change linearly between the
points). Without it, ``-u``, ``-r`` and ``-t`` rule as usual. With a shape, each user still
paces itself against ``arm_rate`` divided by the users running, so more users means more
concurrency at the same rate; raise ``--arm-rate`` with the users for a rate step.
"""

from __future__ import annotations

import itertools
import json
import os
import time

from locust import HttpUser, LoadTestShape, events, task
from locust.runners import WorkerRunner

try:
    from loadgen.arm_shape import parse_shape, users_at
except ImportError:  # copied to a locust worker machine without timerbench: the file beside this one
    from arm_shape import parse_shape, users_at

_DEFAULTS = {
    "arm_rate": ("TIMERBENCH_ARM_RATE", float, 100.0),
    "arm_batch": ("TIMERBENCH_ARM_BATCH", int, 10),
    "arm_ids": ("TIMERBENCH_ARM_IDS", int, 100_000),
    "arm_horizon": ("TIMERBENCH_ARM_HORIZON", float, 3600.0),
    "arm_type": ("TIMERBENCH_ARM_TYPE", str, "load"),
    "arm_prefix": ("TIMERBENCH_ARM_PREFIX", str, "arm-load-"),
    "arm_tenants": ("TIMERBENCH_ARM_TENANTS", int, 10),
    "arm_summary": ("TIMERBENCH_ARM_SUMMARY", str, ""),
    "arm_requests": ("TIMERBENCH_ARM_REQUESTS", int, 0),
}


@events.init_command_line_parser.add_listener
def _arguments(parser) -> None:
    for name, (env, kind, default) in _DEFAULTS.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=kind,
            env_var=env,
            default=default,
            include_in_web_ui=True,
            help=f"{name} (default {default}; env {env})",
        )


_env = None  # the locust Environment, for the exit summary


@events.init.add_listener
def _keep_environment(environment, **_kw) -> None:
    global _env
    _env = environment
    parent = os.environ.get("TIMERBENCH_PARENT_PID", "")
    if parent.isdigit():  # started by `bench run --arm-load`: stop when that run process is gone
        import gevent

        def watch() -> None:
            while os.getppid() == int(parent):
                gevent.sleep(0.5)
            if environment.runner is not None:
                environment.runner.quit()

        gevent.spawn(watch)


@events.quit.add_listener
def _write_summary(exit_code: int = 0, **_kw) -> None:
    """Exact totals at exit: locust rewrites its CSVs only once a second, so their last second
    can be missing; this is written after every user has stopped."""
    o = getattr(_env, "parsed_options", None)
    path = getattr(o, "arm_summary", "") if o is not None else ""
    if not path or _env.runner is None or isinstance(_env.runner, WorkerRunner):
        return  # in distributed mode the master has the totals
    total = _env.stats.total
    ok = total.num_requests - total.num_failures
    batch = max(1, int(getattr(o, "arm_batch", _DEFAULTS["arm_batch"][2])))
    out = {
        "requests": total.num_requests,
        "failures": total.num_failures,
        "timers_armed": ok * batch,  # each successful request armed a full batch
        "batch": batch,
        "arm_rate": float(getattr(o, "arm_rate", 0.0)),
        "elapsed_s": max(0.0, (total.last_request_timestamp or 0) - (total.start_time or 0)),
        "median_ms": total.get_response_time_percentile(0.5) if total.num_requests else None,
        "p99_ms": total.get_response_time_percentile(0.99) if total.num_requests else None,
        "max_ms": total.max_response_time if total.num_requests else None,
        "exit_code": exit_code,
    }
    with open(path, "w") as f:
        json.dump(out, f, indent=2)


_sequence = itertools.count()  # ids in turn, shared by this process's users (gevent: no race)
_requests = itertools.count()  # PUTs started by this process's users, for --arm-requests


class ArmingUser(HttpUser):
    """Arms ``arm_batch`` timers per request, paced so that all users reach ``arm_rate``."""

    def on_start(self) -> None:
        o = self.environment.parsed_options
        self.rate = float(getattr(o, "arm_rate", _DEFAULTS["arm_rate"][2]))
        self.batch = max(1, int(getattr(o, "arm_batch", _DEFAULTS["arm_batch"][2])))
        self.pool = max(1, int(getattr(o, "arm_ids", _DEFAULTS["arm_ids"][2])))
        self.horizon_s = float(getattr(o, "arm_horizon", _DEFAULTS["arm_horizon"][2]))
        self.type = str(getattr(o, "arm_type", _DEFAULTS["arm_type"][2]))
        self.tenants = max(1, int(getattr(o, "arm_tenants", _DEFAULTS["arm_tenants"][2])))
        self.max_requests = max(0, int(getattr(o, "arm_requests", _DEFAULTS["arm_requests"][2])))
        prefix = str(getattr(o, "arm_prefix", _DEFAULTS["arm_prefix"][2]))
        worker = getattr(self.environment.runner, "worker_index", None)
        # distributed mode: each worker process has its own pool, so their ids never collide
        self.prefix = prefix if worker is None else f"{prefix}w{worker}-"
        token = os.environ.get("TIMERBENCH_TOKEN")
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self._last = None

    def wait_time(self) -> float:
        """Constant pacing: one request every ``users * batch / rate`` seconds per user."""
        runner = self.environment.runner
        users = max(1, getattr(runner, "user_count", 1) or 1)
        rate = self.rate
        if isinstance(runner, WorkerRunner):
            # a worker sees only its own users; the master spreads users evenly over the
            # ``--expect-workers`` it was given (and sends that number), so take an equal share
            workers = int(getattr(self.environment.parsed_options, "expect_workers", 1) or 1)
            rate = rate / max(1, workers)
        interval = users * self.batch / rate if rate > 0 else 1.0
        now = time.monotonic()
        if self._last is None:
            self._last = now
            return 0.0
        wait = max(0.0, self._last + interval - now)
        self._last = max(now, self._last + interval)
        return wait

    @task
    def arm(self) -> None:
        if self.max_requests and next(_requests) >= self.max_requests:
            self.environment.runner.quit()  # a fixed amount of work, not a time box
            return
        fire_at = time.time() + self.horizon_s
        timers = []
        for _ in range(self.batch):
            n = next(_sequence) % self.pool
            timers.append(
                {
                    "id": f"{self.prefix}{n:08d}",
                    "fire_at": round(fire_at, 6),
                    "type": self.type,
                    "tenant": f"load-{n % self.tenants:03d}",
                }
            )
        body = json.dumps({"timers": timers})
        with self.client.put("/timers", data=body, headers=self.headers, name="PUT /timers", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")


# -- load shapes (parsed in loadgen/arm_shape.py, which imports no gevent) ---------------------------

_SHAPE = os.environ.get("TIMERBENCH_ARM_SHAPE")
if _SHAPE:
    _KIND, _POINTS = parse_shape(_SHAPE)

    class ArmShape(LoadTestShape):
        """Users over time from ``TIMERBENCH_ARM_SHAPE``; locust stops after the last point."""

        def tick(self):
            users = users_at(_KIND, _POINTS, self.get_run_time())
            if users is None:
                return None
            return users, max(1, users)  # spawn rate: reach each step within a second

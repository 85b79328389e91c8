"""``bench serve``: the node's health checks follow its claim loop, and PUT /timers arms all or nothing.

The node runs as a real subprocess on real Postgres (pg_leased); the store is checked through a
scheduler instance of its own (``export_armed``), never through the node that is under test.
One in-process test covers the case a subprocess cannot stage: a claim loop that is alive but
stuck (a hung batch), which must turn readiness red once its heartbeat is stale.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from harness import stack
from harness.stack import free_port
from schedulers.base import StoreContext, create

TOKEN = "test-token-not-secret"
TICK_S = 0.1  # pg_leased's tick (its default, given explicitly: the readiness test counts ticks)
START_TIMEOUT_S = 60.0


def http(method: str, url: str, body: object | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if r.headers.get_content_type() == "application/json" else {})
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {}


class ServeNode:
    """``bench serve`` on pg_leased in a subprocess, ready when constructed; ``stop()`` ends it."""

    def __init__(self, bench, dsn: str, schema: str, record: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            "serve",
            "--scheduler",
            "pg_leased",
            "--port",
            str(self.port),
            "--schema",
            schema,
            "--workload",
            "smoke",
            "--worker-id",
            "node-under-test",
            "--opt",
            f"tick_s={TICK_S}",
        ]
        if record is not None:
            args += ["--record", str(record)]
        env = {**os.environ, "TIMERBENCH_DSN": dsn, "TIMERBENCH_TOKEN": TOKEN}
        self.proc = bench.popen(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + START_TIMEOUT_S
        while True:
            assert self.proc.poll() is None, f"node exited early: {self.proc.stdout.read()}"
            try:
                if http("GET", f"{self.url}/health/ready", token=None)[0] == 200:
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline, "node never became ready"
            time.sleep(0.1)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return self.proc.returncode, out


@pytest.fixture
def node(bench, pg_dsn, schema, tmp_path):
    n = ServeNode(bench, pg_dsn, schema, record=tmp_path / "rec")
    yield n
    n.stop()


def armed_ids(dsn: str, schema: str) -> set[str]:
    async def go() -> set[str]:
        s = create("pg_leased", StoreContext(dsn=dsn, schema=schema))
        try:
            return {t.id for t in await s.export_armed()}
        finally:
            await s.teardown(drop=False)

    return asyncio.run(go())


def test_killed_tick_loop_turns_ready_503_within_two_ticks_while_live_stays_200(node, tmp_path):
    assert http("GET", f"{node.url}/health/live", token=None)[0] == 200
    node.proc.send_signal(signal.SIGUSR1)  # the claim loop dies; the API stays up
    # within two ticks, plus one second of slack for process scheduling on a shared machine
    deadline = time.time() + 2 * TICK_S + 1.0
    while True:
        status, body = http("GET", f"{node.url}/health/ready", token=None)
        if status == 503 or time.time() > deadline:
            break
    assert status == 503, body
    assert "claim loop" in body["reason"]
    assert http("GET", f"{node.url}/health/live", token=None)[0] == 200
    assert http("GET", f"{node.url}/metrics")[0] == 200
    code, out = node.stop()
    assert code == 0, out
    meta = json.loads((tmp_path / "rec" / "node-node-under-test.json").read_text())
    assert meta["loop_error"] == "claim loop was killed"


def test_bad_body_gets_400_and_arms_nothing(node, pg_dsn, schema):
    far = time.time() + 3600
    good = [{"id": f"ok-{i}", "fire_at": far, "type": "load"} for i in range(5)]
    status, body = http("PUT", f"{node.url}/timers", {"timers": [*good, {"id": "bad", "fire_at": "soon"}]})
    assert status == 400 and "timers[5].fire_at" in body["error"]
    assert http("PUT", f"{node.url}/timers", b"{not json")[0] == 400
    status, body = http("PUT", f"{node.url}/timers", b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and "nested too deeply" in body["error"]
    assert http("PUT", f"{node.url}/timers", {"timers": good}, token="wrong")[0] == 401
    assert http("PUT", f"{node.url}/timers", {"timers": good}, token=None)[0] == 401
    assert not {t["id"] for t in good} & armed_ids(pg_dsn, schema)
    # the same store check sees a good body armed
    status, body = http("PUT", f"{node.url}/timers", {"timers": good})
    assert status == 200 and body == {"armed": 5}
    assert {t["id"] for t in good} <= armed_ids(pg_dsn, schema)


def test_node_never_prints_the_dsn_password_or_the_token(bench, pg_dsn, schema):
    # the password in the DSN itself (not in the password file the embedded DSN names)
    pg = stack.postgres()
    dsn = pg.full_dsn() if pg_dsn == pg.dsn() else pg_dsn
    secret = conninfo_to_dict(dsn).get("password")
    assert secret, "give TIMERBENCH_DSN with a password, or use the embedded server"
    n = ServeNode(bench, dsn, schema)
    code, out = n.stop()
    assert code == 0, out
    assert "serving http://" in out
    assert secret not in out and TOKEN not in out


def test_metrics_are_prometheus_text_and_need_the_token(node):
    http("PUT", f"{node.url}/timers", [{"id": "now", "fire_at": None, "type": "load"}])
    req = urllib.request.Request(f"{node.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    deadline = time.time() + 10
    while True:
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        if "timerbench_fires_total 1.0" in text or time.time() > deadline:
            break
        time.sleep(0.1)
    assert "timerbench_fires_total 1.0" in text
    assert "timerbench_fire_lag_seconds_bucket" in text and "timerbench_loop_heartbeat_age_seconds" in text
    assert http("GET", f"{node.url}/metrics", token=None)[0] == 401


async def test_a_stuck_claim_loop_turns_ready_503_once_its_heartbeat_is_stale():
    """A loop that is alive but hung in a batch stops ticking: readiness must not stay green."""
    from harness.node_api import Node
    from schedulers.base import Timer

    class Stuck:
        async def process(self, fires):
            await asyncio.Event().wait()  # a poll that never returns

        def committed(self, fires, delivered):
            pass

    # room for one fire in flight: the loop itself blocks when the next claim waits for the stuck one
    sched = create("memory", StoreContext(), inflight_batches=1, batch=1)
    await sched.setup()
    node = Node(sched, {"poll": Stuck()}, "w-stuck", stale_after_s=0.3)
    node.start_loop()
    try:
        await asyncio.sleep(0.1)
        assert (await node.readiness())[0]
        await sched.arm([Timer("first", None), Timer("second", time.time() + 0.2)])
        deadline = time.time() + 5
        while (await node.readiness())[0] and time.time() < deadline:
            await asyncio.sleep(0.05)
        ok, reason = await node.readiness()
        assert not ok and "has not ticked" in reason
        assert not node.loop_task.done()  # alive, just stuck: exactly what a liveness check misses
    finally:
        node.stop.set()
        node.kill_loop()
        await asyncio.gather(node.loop_task, return_exceptions=True)
        await sched.teardown()

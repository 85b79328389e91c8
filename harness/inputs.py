"""What a command was given, checked and converted before anything starts.

A bad workload file, trace, rate, option or fault is a usage error (one line naming the file,
line and field, or the option, and what is accepted; exit 2) raised here, before a run
directory exists or a schema is touched. Every command that takes these inputs (``bench run``,
``compare``, ``sweep``, ``migrate dry-run``, ``serve``) checks them through this module, and the
commands that start child runs check the children's arguments before the first child starts.

What is checked beyond the parsers' own forms:

* the workload file: a file, at most a MiB, UTF-8, valid YAML, a mapping, every field known
  and given once, every number finite (:func:`loadgen.workload.load_located`);
* the trace: read in full (:func:`loadgen.population.from_trace`): the required columns, UTF-8,
  every ``trigger_id`` and ``tenant_id`` non-empty, ids unique, intervals finite and > 0, first
  fires finite and >= 0; and first its size, against the memory it would take;
* the population a run would build, against the memory this machine has free
  (:func:`check_memory`);
* the output directory: a directory (or one that can be created) that this user can write.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError

# the workload overrides every command that runs a workload may take (names as click passes them)
WORKLOAD_OVERRIDES = (
    "rate",
    "triggers",
    "interval",
    "tenants",
    "tenant_skew",
    "state_size",
    "duration",
    "warmup",
    "seed",
    "trace",
    "cadence",
    "on_time",
    "drain_limit",
)

# What one trigger costs a run in this process: measured ~125 B for a synthetic population and
# ~80 B for the polling processor's bookkeeping and index (500k triggers, Python 3.11); a trace's
# own strings ~210 B a row. The rest is room for the scheduler's own per-timer entries (the
# memory backend keeps a heap entry and the poll state of every timer, added separately) and the
# arming batches.
RUN_BYTES_PER_TRIGGER = 1024
TRACE_BYTES_PER_FILE_BYTE = 8  # measured: a trace's population is ~6.2x its CSV, plus the index
MEMORY_SHARE = 0.5  # a run may plan to use at most this share of the memory free when it starts
MAX_SCHEMA_BYTES = 63  # Postgres truncates longer identifiers, so two long names could meet


def option_name(field: str | None) -> str:
    return f"--{(field or '').replace('_', '-')}"


def load_workload(spec: str | None, overrides: Mapping[str, Any], *, state_in_process: bool = False):
    """The resolved :class:`loadgen.workload.Workload` of a preset or YAML file plus overrides,
    its trace (if any) read and checked, its population checked against free memory."""
    from loadgen import workload as wl

    given = {k: v for k, v in overrides.items() if v is not None}
    if "rate" in given and "triggers" in given:
        raise UsageError(
            f"give --rate or --triggers, not both (got --rate {given['rate']} and --triggers {given['triggers']})"
        )
    try:
        w, origins = wl.load_located(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        w = wl.Overrides(given).apply(w)
    except wl.WorkloadError as exc:
        raise UsageError(f"{option_name(exc.field)}: {exc}") from None
    try:
        w = w.resolved()
    except wl.WorkloadError as exc:
        if exc.field in given:
            where = option_name(exc.field)
        else:
            where = origins.get(exc.field) or origins[""]  # "" is the file itself
        raise UsageError(f"{where}: {exc}") from None
    if w.trace:  # the trace fixes the population, and so the rate (as the run will find them)
        where = "--trace" if "trace" in given else origins.get("trace", "the workload's trace")
        population = check_trace(w.trace, where)
        w.triggers = len(population)
        w.rate_per_s = population.rate_per_s()
        w.fill_concurrency()
    check_memory(w, w.triggers, state_in_process=state_in_process)
    return w


def check_trace(trace: str, where: str = "--trace"):
    """Read the whole trace now (each row checked), after checking its size against free memory."""
    from loadgen.population import from_trace

    path = Path(trace)
    try:
        size = path.stat().st_size
    except OSError:
        size = 0  # from_trace says what is wrong with the path
    need = size * TRACE_BYTES_PER_FILE_BYTE
    free = _free_memory()
    if need > MEMORY_SHARE * free:
        raise UsageError(
            f"{where}: trace {trace} is {_bytes(size)}; replaying it takes about {_bytes(need)} of "
            f"memory, more than {MEMORY_SHARE:.0%} of what this machine has free ({_bytes(free)}); "
            f"replay a shorter trace"
        )
    try:
        return from_trace(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_memory(w, triggers: int | None, *, state_in_process: bool = False, processes: int = 1) -> None:
    """Refuse a population that would not fit: ``RUN_BYTES_PER_TRIGGER`` per trigger (plus its
    poll state when the scheduler keeps timers in this process) in each of ``processes`` (the run
    and its ``--nodes``, which each rebuild the population) against free memory."""
    if not triggers:
        return
    per_trigger = RUN_BYTES_PER_TRIGGER + (w.state_bytes if state_in_process else 0)
    need = processes * (triggers * per_trigger + w.tenants * 64 + (w.poll_concurrency or 0) * 8)
    free = _free_memory()
    if need > MEMORY_SHARE * free:
        where = "this process" if processes == 1 else f"{processes} processes (the run and its nodes)"
        raise UsageError(
            f"{triggers:,} triggers need about {_bytes(need)} of memory in {where}, more than "
            f"{MEMORY_SHARE:.0%} of what this machine has free ({_bytes(free)}); lower --rate or "
            f"--triggers (or widen --interval)"
        )


def _free_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def _bytes(n: float) -> str:
    from reports.fmt import human_bytes

    return human_bytes(n)


def parse_duration_option(name: str, text: str) -> float:
    from loadgen.rates import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def parse_rate_option(name: str, text: str) -> float:
    from loadgen.rates import parse_rate

    try:
        return parse_rate(text)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def check_finite_option(name: str, value: float, lo: float | None = None, hi: float | None = None) -> float:
    """A number option (click parses ``nan`` and ``inf`` as floats): finite and within bounds."""
    ok = math.isfinite(value) and (lo is None or value >= lo) and (hi is None or value <= hi)
    if not ok:
        bounds = (
            f"between {lo:g} and {hi:g}"
            if lo is not None and hi is not None
            else f">= {lo:g}"
            if lo is not None
            else f"<= {hi:g}"
            if hi is not None
            else ""
        )
        raise UsageError(f"bad {name} {value!r}; give a finite number {bounds}".rstrip())
    return value


def parse_sample_every(text: str | None) -> float | None:
    """``--sample-every``: a duration (``1s``, ``5s``) or ``0`` (only at the window's edges)."""
    if text is None:
        return None
    return parse_duration_option("--sample-every", text)


def parse_url_option(name: str, text: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"bad {name} {text!r}; give an http(s) URL such as http://127.0.0.1:9090/metrics")
    return text


def check_nodes(cls, nodes: int | None) -> None:
    if nodes is None:
        return
    if nodes < 1:
        raise UsageError(f"bad --nodes {nodes}; give a count of at least 1")
    if not (getattr(cls, "needs_postgres", False) or getattr(cls, "needs_temporal", False)):
        raise UsageError(
            f"--nodes/--arm-load need a shared store; {cls.name} keeps its timers inside one "
            f"process (use a backend that keeps them in Postgres or Temporal)"
        )


def parse_faults(texts) -> list:
    from harness import faults

    try:
        return faults.parse_all(texts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_writable_dir(name: str, path: str | Path) -> Path:
    """A directory this user can write into, or one that can be created (nothing is created here)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{name} {path}: a file is in the way; give a directory")
        target = path
    else:
        target = next((p for p in path.absolute().parents if p.exists()), Path("/"))
        if not target.is_dir():
            raise UsageError(f"{name} {path}: {target} is a file; give a directory")
    if not os.access(target, os.W_OK | os.X_OK):
        raise UsageError(f"{name} {path}: {target} is not writable by this user; give a directory you can write")
    return path


def check_schema_name(name: str) -> str:
    if not name or not name.strip():
        raise UsageError("bad --schema ''; give a schema name")
    if len(name.encode()) > MAX_SCHEMA_BYTES:
        raise UsageError(
            f"bad --schema {name[:20]!r}...: {len(name.encode())} bytes, Postgres keeps "
            f"{MAX_SCHEMA_BYTES}; give a shorter name"
        )
    return name


LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address (127.0.0.0/8, ::1)."""
    import ipaddress
    import socket

    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        raise UsageError(f"bad --host {host!r}: cannot resolve it; give an address such as 127.0.0.1") from None
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def check_serve_exposure(host: str, token: str | None, allow_unauthenticated: bool) -> None:
    """A node reachable from other machines must ask for a token, unless told not to."""
    if token or allow_unauthenticated or is_loopback(host):
        return
    raise UsageError(
        f"bench serve --host {host} without a token would let anyone who can reach it arm timers; "
        f"give --token (or TIMERBENCH_TOKEN), bind to 127.0.0.1, or pass --allow-unauthenticated"
    )


# -- a whole `bench run` ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    """What a ``bench run`` is: the inputs :func:`check_run` checked in full before any server is
    touched, then the servers it runs against and how it records and presents itself (filled in
    with :func:`dataclasses.replace` once the servers are resolved)."""

    cls: Any  # the scheduler class
    options: dict
    workload: Any  # loadgen.workload.Workload, resolved
    out: Path
    nodes: int | None = None  # --nodes: extra `bench serve` processes
    arm_load_per_s: float | None = None  # --arm-load: locust's arm rate
    fault_specs: list = field(default_factory=list)
    dsn: str | None = None
    temporal_address: str | None = None
    keep: bool = False  # keep the run's schema and workflows afterwards
    argv: list[str] = field(default_factory=list)  # the command line, for config.json
    label: str | None = None  # the run's name in reports (default: the scheduler's)
    sample_every_s: float | None = None  # None: the sampler's default period
    temporal_metrics: str | None = None  # a Temporal cluster's Prometheus endpoint
    checkpoint: str = "window"  # when to force a CHECKPOINT: "window", "warmup" or "off"
    calibrates: float | None = None  # a memory run measuring the harness's ceiling at this rate
    neighbour: Any = None  # harness.neighbour.NeighbourSpec: --neighbour
    readers: Any = None  # harness.neighbour.ReadersSpec: --readers
    soak_bin_s: float | None = None  # bench soak: the trends' bin (None: not a soak)
    neighbour_dsn: str | None = None  # where the neighbour and readers run (the scheduler's, or the embedded one)


def check_run(
    scheduler_name: str,
    workload_spec: str | None,
    overrides: Mapping[str, Any],
    opts,
    out,
    faults=(),
    nodes: int | None = None,
    arm_load: str | None = None,
    neighbour: str | None = None,
    neighbour_rate: float | None = None,
    neighbour_script: str | None = None,
    readers: str | None = None,
) -> RunPlan:
    """Every input of a run that can be checked without a server, in the order a person reads the
    command line; the first bad one is the usage error."""
    from harness.servers import scheduler_class, scheduler_options

    cls = scheduler_class(scheduler_name)
    in_process = not (getattr(cls, "needs_postgres", False) or getattr(cls, "needs_temporal", False))
    w = load_workload(workload_spec, overrides, state_in_process=in_process)
    options = scheduler_options(cls, opts)
    out_dir = check_writable_dir("--out", out)
    arm_load_per_s = None
    if arm_load is not None:
        arm_load_per_s = parse_rate_option("--arm-load", arm_load)
        nodes = max(1, nodes or 1)  # locust needs a node's HTTP API to arm through
    check_nodes(cls, nodes)
    if nodes:
        check_memory(w, w.triggers, processes=1 + nodes)
    fault_specs = parse_faults(faults)
    from harness.neighbour import check_neighbour, parse_readers

    neighbour_spec = check_neighbour(neighbour, neighbour_rate, neighbour_script)
    readers_spec = parse_readers(readers)
    return RunPlan(
        cls,
        options,
        w,
        out_dir,
        nodes,
        arm_load_per_s,
        list(fault_specs),
        neighbour=neighbour_spec,
        readers=readers_spec,
    )


def load_plan(steps: str | None, plan_file: str | None, run_s: float) -> list:
    """A rehearsal's steps (:mod:`migration.plan`) from ``--steps`` or ``--plan``, checked against
    the run's length (``run_s``: warm-up plus measured window)."""
    from loadgen.rates import parse_duration
    from migration import plan

    try:
        steps_ = (
            plan.load_plan(plan_file, parse_duration)
            if plan_file
            else plan.parse_steps(steps or plan.DEFAULT_STEPS, parse_duration)
        )
        plan.schedule(steps_, run_s)
    except plan.PlanError as exc:
        raise UsageError(str(exc)) from None
    return steps_

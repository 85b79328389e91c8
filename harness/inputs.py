"""What a command was given, checked and converted before anything starts: a bad workload, rate
or option is a usage error (one line, exit 2) raised here, before a run directory exists or a
schema is touched."""

from __future__ import annotations

from typing import Any, Mapping

from harness.errors import UsageError

# the workload overrides every command that runs a workload may take (names as click passes them)
WORKLOAD_OVERRIDES = ("rate", "triggers", "interval", "tenants", "tenant_skew", "state_size", "duration", "warmup",
                      "seed", "trace")


def load_workload(spec: str | None, overrides: Mapping[str, Any]):
    """The resolved :class:`loadgen.workload.Workload` of a preset or YAML file plus overrides."""
    from loadgen import workload as wl

    if overrides.get("rate") is not None and overrides.get("triggers") is not None:
        raise UsageError(f"give --rate or --triggers, not both (got --rate {overrides['rate']} and "
                         f"--triggers {overrides['triggers']})")
    try:
        w = wl.load(spec)
        return wl.Overrides(dict(overrides)).apply(w).resolved()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except TypeError as exc:
        raise UsageError(f"bad workload value: {exc}") from None


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


def check_nodes(cls, nodes: int | None) -> None:
    if nodes is None:
        return
    if nodes < 1:
        raise UsageError(f"bad --nodes {nodes}; give a count of at least 1")
    if not (getattr(cls, "needs_postgres", False) or getattr(cls, "needs_temporal", False)):
        raise UsageError(f"--nodes/--arm-load need a shared store; {cls.name} keeps its timers inside one "
                         f"process (use a backend that keeps them in Postgres or Temporal)")


def parse_faults(texts) -> list:
    from harness import faults

    try:
        return faults.parse_all(texts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

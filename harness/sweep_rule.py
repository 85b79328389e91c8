"""The sweep's stop rule, pure (``tests/unit/test_sweep_rule.py``): when a rate is held, what the
maximum sustainable rate is, the SLO each backend is judged by."""

from __future__ import annotations

from typing import Any

from metrics.accounting import EXIT_INCORRECT, NOT_DELIVERED, RATE_HELD_SHARE  # 95%: of offered, and offered of target

DEFAULT_RATES = "300,556,1000,2000,5000"


# A backend that batches due timers for up to its max lag (temporal_shards: MaxLag 10 s,
# the Composio article) is not in steady state until that long after its first fires: a shorter warm-up
# undercounts its achieved rate (fires due in the window arrive after it). Its warm-up is
# therefore at least this many times its declared max lag.
WARMUP_MAX_LAG_FACTOR = 1.5


def warmup_for(warmup_s: float, max_lag_s: float | None) -> float:
    """The warm-up of one backend's runs, seconds: ``warmup_s`` (--warmup, or one maximum
    interval of the workload), or longer for a long max lag."""
    if max_lag_s is None:
        return warmup_s
    return max(warmup_s, WARMUP_MAX_LAG_FACTOR * float(max_lag_s))


def parse_rates(text: str) -> list[float]:
    """``300,556/s,1000`` -> [300.0, 556.0, 1000.0], ascending, duplicates dropped. ValueError."""
    from loadgen.rates import parse_rate

    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"invalid --rates {text!r}: give comma-separated fire rates such as {DEFAULT_RATES}")
    try:
        return sorted({parse_rate(p) for p in parts})
    except ValueError as exc:
        raise ValueError(f"--rates: {exc}") from None


MAX_LAG = "max-lag"
# Without --slo-p99 every backend is held to one p99 bound, the workload's on-time bound
# (harness.sweep.default_slo_spec: 10 s, the Composio article's polling MaxLag, unless the
# workload sets another), so "held" means the same for every design; each backend's declared
# bound is recorded beside it (declared_max_lag_s). NAME=max-lag judges one by its own bound.
DEFAULT_SLO = "the workload's on-time bound"


def parse_slo(text: str) -> tuple[float, dict[str, float | str]]:
    """``1s,temporal_shards=max-lag,pg_queue=2s`` -> (1000.0, {"temporal_shards": "max-lag",
    "pg_queue": 2000.0}): the p99 SLO in ms for every backend, then per-backend overrides (a
    duration, or ``max-lag``: the backend's own declared bound, ``capabilities.max_lag_s``)."""
    from loadgen.rates import parse_duration

    default_ms: float | None = None
    overrides: dict[str, float | str] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        target = value.strip() if eq else name.strip()
        if target == MAX_LAG:
            parsed: float | str = MAX_LAG
        else:
            try:
                parsed = parse_duration(target) * 1000.0
            except ValueError:
                raise ValueError(
                    f"invalid --slo-p99 part {part!r}; use a duration (1s, 250ms), "
                    f"NAME=duration or NAME={MAX_LAG}, comma-separated"
                ) from None
            if parsed <= 0:
                raise ValueError(f"invalid --slo-p99 part {part!r}: the SLO must be positive")
        if eq:
            overrides[name.strip()] = parsed
        elif parsed == MAX_LAG:
            raise ValueError(
                f"invalid --slo-p99 {text!r}: the first part is the SLO for every backend, "
                f"a duration such as 1s; {MAX_LAG} goes with a name (temporal_shards={MAX_LAG})"
            )
        else:
            default_ms = float(parsed)
    if default_ms is None:
        raise ValueError(
            f"invalid --slo-p99 {text!r}: give the SLO for every backend first, e.g. 10s,temporal_shards={MAX_LAG}"
        )
    return default_ms, overrides


def slo_for(
    name: str, default_ms: float, overrides: dict[str, float | str], max_lag_s: float | None
) -> tuple[float, str]:
    """(p99 SLO in ms, where it comes from) for one backend."""
    value = overrides.get(name)
    if value is None:
        return default_ms, "--slo-p99"
    if value == MAX_LAG:
        if max_lag_s is None:
            return default_ms, f"--slo-p99 (the declared max lag of {name} is unknown)"
        return float(max_lag_s) * 1000.0, f"{name}'s declared max lag (capabilities.max_lag_s)"
    return float(value), f"--slo-p99 {name}="


def writes_per_fire(summary: dict[str, Any]) -> float | None:
    """Row writes (inserts + updates + deletes of the scheduler's tables and their TOAST tables) per
    fire; heap only for a summary older than the TOAST figures; None without tables."""
    pf = summary.get("per_fire") or {}
    if pf.get("row_writes") is not None:
        return float(pf["row_writes"])
    parts = [pf.get(k) for k in ("inserts", "updates", "deletes")]
    if all(p is None for p in parts):
        return None
    return float(sum(p or 0.0 for p in parts))


def judge(
    summary: dict[str, Any] | None, target: float, slo_p99_ms: float, exit_code: int = 0
) -> tuple[bool, str | None]:
    """(held, why not). The order of the reasons is the order they are checked.

    A rate is held when the run completed, kept its correctness promise (0 lost fires, 0
    duplicate keyed effects), held the rate by the summary's rule (achieved >= 95% of the offered
    rate **and** offered >= 95% of the target: under the default fixed cadence the offered rate
    stays at the target however late the backend is, so a backend that falls behind shows as
    achieved below offered, and one more than an interval late as offered below target), and kept
    the p99 lag over every fire due in the window (undelivered ones infinitely late) within the
    SLO."""
    if summary is None:
        return False, f"no summary (bench run exited {exit_code})"
    if not summary.get("complete", False):
        return False, f"incomplete: {summary.get('incomplete_reason') or 'stopped early'}"
    if exit_code == EXIT_INCORRECT or not summary.get("correct", True):
        return False, "; ".join(summary.get("failures") or ["correctness promise broken"])
    if exit_code != 0:
        return False, f"bench run exited {exit_code}"
    achieved, offered = summary.get("achieved_rate"), summary.get("offered_rate")
    if summary.get("rate_held") is not True:
        got = "nothing" if achieved is None else f"{achieved:,.1f}/s"
        of = "?" if offered is None else f"{offered:,.1f}/s"
        return False, (
            f"rate not held: achieved {got} of {of} offered, target {target:,.0f}/s "
            f"(needs {100 * RATE_HELD_SHARE:.0f}% of offered, and offered {100 * RATE_HELD_SHARE:.0f}% of target)"
        )
    p99 = (summary.get("lag_ms") or {}).get("p99")
    if p99 is None:
        return False, "no lag measured"
    if p99 == NOT_DELIVERED:
        return False, "p99 lag not delivered: over 1% of the fires due in the window never arrived"
    if p99 > slo_p99_ms:
        return False, f"p99 lag {p99:,.1f} ms over the SLO of {slo_p99_ms:,.0f} ms"
    return True, None


def max_sustainable(entries: list[dict[str, Any]]) -> float | None:
    """The highest rate held before the first rate not held (rates ascending); None if the first failed."""
    best = None
    for e in sorted(entries, key=lambda e: e["rate"]):
        if not e["held"]:
            break
        best = e["rate"]
    return best


def rate_key(rate: float) -> str:
    return f"{rate:g}"

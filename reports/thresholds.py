"""Named figures of a run and thresholds over them: the one vocabulary of ``--slo`` (absolute:
``p99<1s,lost=0,jain>0.9,worst_tenant_p99<2s``) and ``--fail-on`` (against a baseline:
``lag_p99>+15%,wal_per_fire>+10%,hot_ratio<-5pp,lost>0``). ``neighbour_p99<2x`` is a multiple: the run's
neighbour p99 over the same neighbour's alone (``bench run --neighbour``).

A threshold is ``NAME OP VALUE`` with ``OP`` one of ``< <= > >= =``. ``VALUE`` is absolute
(``1s``, ``250ms``, ``0.9``, ``0``) or, for ``--fail-on``, a change from the baseline: ``+15%`` /
``-5%`` (relative) or ``+5pp`` / ``-5pp`` (percentage points of a ratio) or a signed amount
(``+100ms``). Durations are in seconds once parsed. A threshold names when a figure **fails**
for ``--fail-on`` and what it must **meet** for ``--slo`` (each says so where it is used).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from metrics.accounting import NOT_DELIVERED
from reports.errors import ReportError
from reports.fairness import Scorecard, scorecard
from reports.load import Run


def _lag_s(run: Run, key: str) -> float | None:
    v = (run.summary.get("lag_ms") or {}).get(key)
    if v == NOT_DELIVERED:
        return math.inf
    return None if v is None else float(v) / 1000.0


def _per_fire(run: Run, key: str) -> float | None:
    v = (run.summary.get("per_fire") or {}).get(key)
    return None if v is None else float(v)


def _outcome(run: Run, key: str) -> float | None:
    v = (run.summary.get("outcomes") or {}).get(key)
    if v is None and key == "lost":  # a run directory written before the four outcomes
        v = run.summary.get("missed")
    return None if v is None else float(v)


def _on_time_share(run: Run) -> float | None:
    o = run.summary.get("outcomes") or {}
    return o["on_time"] / o["due"] if o.get("due") else None


def run_scorecard(run: Run) -> Scorecard:
    """The run's fairness scorecard, computed once per run."""
    cached = getattr(run, "_scorecard", None)
    if cached is None:
        w = run.window
        on_time_s = float(run.summary.get("on_time_s") or run.workload.get("on_time_s") or 10.0)
        start = float(w.get("measure_start", 0.0))
        end = float(w.get("measure_end", start))
        cached = (
            scorecard(run.fires, start, end, on_time_s)
            if "tenant_id" in run.fires
            else scorecard(run.fires.iloc[0:0].assign(tenant_id=[]), start, end, on_time_s)
        )
        run._scorecard = cached  # type: ignore[attr-defined]
    return cached


def _fair(run: Run, attr: str, scale: float = 1.0) -> float | None:
    v = getattr(run_scorecard(run), attr)
    return None if v is None else float(v) * scale


@dataclass(frozen=True)
class FigureDef:
    name: str
    get: Callable[[Run], float | None]
    unit: str  # "s" (durations, parsed from s/ms), "ratio" (0..1: pp applies), "x" (a multiple), "" (a count)
    lower_is_better: bool
    label: str


FIGURES: dict[str, FigureDef] = {
    f.name: f
    for f in [
        FigureDef("lag_p50", lambda r: _lag_s(r, "p50"), "s", True, "lag p50"),
        FigureDef("lag_p99", lambda r: _lag_s(r, "p99"), "s", True, "lag p99"),
        FigureDef("lag_p999", lambda r: _lag_s(r, "p999"), "s", True, "lag p99.9"),
        FigureDef("lost", lambda r: _outcome(r, "lost"), "", True, "lost fires"),
        FigureDef("late", lambda r: _outcome(r, "late"), "", True, "late fires"),
        FigureDef("pending", lambda r: _outcome(r, "pending"), "", True, "pending fires"),
        FigureDef("on_time", _on_time_share, "ratio", False, "on-time share"),
        FigureDef("duplicate_effects", lambda r: r.summary.get("duplicate_effects"), "", True, "duplicate effects"),
        FigureDef("achieved_rate", lambda r: r.summary.get("achieved_rate"), "", False, "achieved fires/s"),
        FigureDef("wal_per_fire", lambda r: _per_fire(r, "wal_bytes"), "", True, "WAL bytes per fire"),
        FigureDef("writes_per_fire", lambda r: _per_fire(r, "row_writes"), "", True, "Postgres row writes per fire"),
        FigureDef(
            "durable_writes_per_fire",
            lambda r: (r.summary.get("bill") or {}).get("durable_writes"),
            "",
            True,
            "durable writes per fire, every store",
        ),
        FigureDef(
            "bytes_per_fire",
            lambda r: (r.summary.get("bill") or {}).get("bytes_written"),
            "",
            True,
            "bytes written per fire, every store",
        ),
        FigureDef("hot_ratio", lambda r: r.summary.get("hot_ratio"), "ratio", False, "HOT-update ratio"),
        FigureDef(
            "dead_tuples_peak",
            lambda r: (r.summary.get("dead_tuples") or {}).get("table_peak"),
            "",
            True,
            "dead tuples, peak",
        ),
        FigureDef("jain", lambda r: _fair(r, "jain"), "ratio", False, "Jain's fairness index"),
        FigureDef("worst_tenant_p99", lambda r: _fair(r, "worst_p99_ms", 1e-3), "s", True, "worst tenant's lag p99"),
        FigureDef(
            "worst_over_median", lambda r: _fair(r, "worst_over_median"), "", True, "worst / median tenant lag p99"
        ),
        FigureDef("starvation", lambda r: _fair(r, "starved_s"), "s", True, "starvation bound"),
        FigureDef(
            "neighbour_p99",
            lambda r: (r.summary.get("neighbour") or {}).get("p99_ratio"),
            "x",
            True,
            "neighbour p99 against the neighbour alone",
        ),
    ]
}
ALIASES = {"p50": "lag_p50", "p99": "lag_p99", "p999": "lag_p999", "wal": "wal_per_fire", "fairness": "jain"}


@dataclass(frozen=True)
class Threshold:
    figure: FigureDef
    op: str
    value: float
    relative: str | None  # None (absolute), "%" (relative change), "pp" (points), "delta" (signed amount)
    text: str

    def limit(self, base: float) -> float:
        """The absolute limit this threshold sets, given the baseline's figure."""
        if self.relative == "%":
            return base * (1.0 + self.value / 100.0)
        if self.relative == "pp":
            return base + self.value / 100.0
        if self.relative == "delta":
            return base + self.value
        return self.value

    def crossed(self, value: float, limit: float) -> bool:
        """Whether ``value`` satisfies ``OP limit`` (a fail condition for --fail-on, a pass
        condition for --slo)."""
        return {
            "<": value < limit,
            "<=": value <= limit,
            ">": value > limit,
            ">=": value >= limit,
            "=": math.isclose(value, limit, rel_tol=1e-9, abs_tol=1e-12),
        }[self.op]


_EXPR = re.compile(
    r"^\s*([a-z_0-9]+)\s*(<=|>=|<|>|==|=)\s*([+-]?)\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(ms|s|%|pp|x)?\s*$", re.I
)


def parse_thresholds(text: str, option: str, allow_relative: bool) -> list[Threshold]:
    """``a<1s,b=0`` -> thresholds; a bad one is a :class:`ReportError` naming it and what is accepted."""
    out = []
    for part in [p for p in (text or "").split(",") if p.strip()]:
        m = _EXPR.match(part)
        if not m:
            raise ReportError(
                f"{option}: cannot read {part.strip()!r}; write NAME OP VALUE, e.g. "
                + ("'lag_p99>+15%' or 'lost>0'" if allow_relative else "'p99<1s' or 'lost=0'")
            )
        name, op, sign, number, unit = m.groups()
        name = ALIASES.get(name.lower(), name.lower())
        if name not in FIGURES:
            raise ReportError(f"{option}: unknown figure {name!r}; choose from: {', '.join(sorted(FIGURES))}")
        fig = FIGURES[name]
        op = "=" if op == "==" else op
        value = float(number)
        unit = (unit or "").lower()
        relative = None
        if sign:
            if not allow_relative:
                raise ReportError(
                    f"{option}: {part.strip()!r} is a change from a baseline; {option} takes absolute values (e.g. "
                    "'p99<1s')"
                )
            value = -value if sign == "-" else value
            relative = "%" if unit == "%" else "pp" if unit == "pp" else "delta"
        elif unit in ("%", "pp"):
            if fig.unit != "ratio":
                raise ReportError(f"{option}: {part.strip()!r}: {name} is not a ratio; give a plain number")
            value /= 100.0  # an absolute share written as a percentage: on_time>99%
        if unit == "pp" and fig.unit != "ratio":
            raise ReportError(
                f"{option}: {part.strip()!r}: percentage points apply to ratios "
                f"({', '.join(n for n, f in FIGURES.items() if f.unit == 'ratio')})"
            )
        if unit == "x" and fig.unit != "x":
            raise ReportError(f"{option}: {part.strip()!r}: {name} is not a multiple of a baseline; drop the x")
        if unit in ("s", "ms"):
            if fig.unit != "s":
                raise ReportError(f"{option}: {part.strip()!r}: {name} is not a duration; give a plain number")
            value = value / 1000.0 if unit == "ms" else value
        elif fig.unit == "s" and relative in (None, "delta"):
            raise ReportError(f"{option}: {part.strip()!r}: give {name} a unit (s or ms)")
        out.append(Threshold(fig, op, value, relative, part.strip()))
    return out


def fmt_figure(fig: FigureDef, value: float | None) -> str:
    if value is None:
        return "not measured"
    if math.isinf(value):
        return "not delivered" if fig.unit == "s" else "∞"
    if fig.unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if fig.unit == "x":
        return f"×{value:.2f}"
    if fig.name == "jain":  # an index, not a share
        return f"{value:.3f}"
    if fig.unit == "ratio":
        return f"{100 * value:.1f}%"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"

"""The regression gate: ``bench report RUNS --baseline B --fail-on "lag_p99>+15%,lost>0"``.

The runs ``--baseline`` matches are the baseline side, the others the candidate side. A
threshold **fails** the gate when the candidate side's figure satisfies it against the limit it
sets from the baseline side.

Noise: these machines are shared, so one run per side can fail a build on noise alone. With
several runs per side the gate compares the candidates' **median** against the limit set by the
baseline's **least favourable** run (its maximum for a ``>`` threshold, its minimum for ``<``): the
baseline's own spread widens the allowance, and a single noisy candidate run cannot fail it. The
verdict prints min / median / max of both sides so a reader sees how wide the spread was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reports.load import Run
from reports.thresholds import Threshold, fmt_figure


@dataclass
class GateLine:
    threshold: Threshold
    baseline: list[float]  # the figure of each baseline run that has it
    candidate: list[float]
    limit: float | None
    candidate_median: float | None
    failed: bool
    why: str


@dataclass
class GateVerdict:
    lines: list[GateLine]
    baseline_runs: list[str]
    candidate_runs: list[str]

    @property
    def failed(self) -> bool:
        return any(line.failed for line in self.lines)


def _values(runs: list[Run], th: Threshold) -> list[float]:
    out = []
    for r in runs:
        v = th.figure.get(r)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            out.append(float(v))
    return out


def evaluate(baseline: list[Run], candidates: list[Run], thresholds: list[Threshold]) -> GateVerdict:
    lines = []
    for th in thresholds:
        base = _values(baseline, th)
        cand = _values(candidates, th)
        if not cand:
            lines.append(
                GateLine(
                    th,
                    base,
                    cand,
                    None,
                    None,
                    True,
                    "the candidate runs do not have this figure: the gate cannot pass what it cannot see",
                )
            )
            continue
        median = float(np.median(cand))
        if th.relative is None:
            limit = th.value
        elif not base:
            lines.append(
                GateLine(
                    th,
                    base,
                    cand,
                    None,
                    median,
                    True,
                    "the baseline runs do not have this figure, so a change from it cannot be judged",
                )
            )
            continue
        else:
            # the least favourable baseline: the one that gives the candidate the most room
            lenient = max(base) if th.op in (">", ">=") else min(base)
            limit = th.limit(lenient)
        failed = th.crossed(median, limit)
        rel = (
            ""
            if th.relative is None
            else f" ({th.text.split(th.op, 1)[1].strip()} from the baseline's least favourable run)"
        )
        who = "candidate median" if len(cand) > 1 else "candidate"
        why = (
            f"{who} {fmt_figure(th.figure, median)}: {'fails' if failed else 'passes'} "
            f"'{th.figure.name} {th.op} {fmt_figure(th.figure, limit)}'{rel}"
        )
        lines.append(GateLine(th, base, cand, limit, median, failed, why))
    return GateVerdict(lines, [r.label for r in baseline], [r.label for r in candidates])


def _spread(th: Threshold, values: list[float]) -> str:
    if not values:
        return "not measured"
    if len(values) == 1:
        return fmt_figure(th.figure, values[0])
    return " / ".join(fmt_figure(th.figure, v) for v in (min(values), float(np.median(values)), max(values)))


def verdict_markdown(v: GateVerdict) -> str:
    """A short verdict for a CI comment."""
    head = "### timerbench gate: **FAIL**" if v.failed else "### timerbench gate: **PASS**"
    out = [
        head,
        "",
        f"Baseline: {', '.join(v.baseline_runs) or 'none'} · candidate: {', '.join(v.candidate_runs) or 'none'}"
        + (
            " · several runs per side: min / median / max shown"
            if max(len(v.baseline_runs), len(v.candidate_runs)) > 1
            else ""
        ),
        "",
        "| threshold | baseline | candidate | result |",
        "|---|---:|---:|---|",
    ]
    for line in v.lines:
        out.append(
            f"| `{line.threshold.text}` | {_spread(line.threshold, line.baseline)} | "
            f"{_spread(line.threshold, line.candidate)} | {'✘ ' if line.failed else '✔ '}{line.why} |"
        )
    return "\n".join(out) + "\n"

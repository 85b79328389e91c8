"""What a report says before anything else, and the warnings it says once.

The first screen decides: the recommendation in one sentence, one line per design (met the SLO
or not, and what failed), the workload in one line, red boxes only for what makes a run's
figures unusable (an incomplete run, a window not in steady state, the harness at its ceiling,
lost fires), then the deciding pictures (the HTML writer places them). Every other warning goes
to the notes, once, with the figure it qualifies. Both writers render these blocks
(:mod:`reports.decide`'s neutral blocks), so the HTML and the Markdown say the same.
"""

from __future__ import annotations

from reports.checks import CHECK_WARNING, Check, run_checks, warning_lines
from reports.decide import Block, Decision
from reports.load import Run
from reports.tables import environment_differences, state_writes_sentence
from reports.thresholds import FIGURES, fmt_figure

# The checks whose failure makes a run's figures unusable, said in a red box on the first screen:
# an incomplete run, a rate not held (it measured another load than the one asked for), a window
# not in steady state, the harness at its ceiling, lost fires, files that could not be read.
BLOCKING = ("complete", "rate held", "steady state", "harness ceiling", "no lost fires", "files readable")

# What a note qualifies, by what it talks about (the first match names the figure).
AFFECTS = (
    ("dead tuples", "dead tuples"),
    ("n_dead_tup", "dead tuples"),
    ("CHECKPOINT", "WAL per fire"),
    ("full-page", "WAL per fire"),
    ("Temporal", "Temporal's bill"),
    ("rate", "achieved rate"),
    ("steady state", "every figure of the run"),
    ("statements", "statement time per fire"),
    ("cost", "cost per fire"),
    ("harness", "lag"),
)


def affects(note: str) -> str:
    low = note.lower()
    return next((figure for key, figure in AFFECTS if key.lower() in low), "the run")


def workload_line(runs: list[Run]) -> str:
    """The workload in one line: its name, rate, population, window and whether it was steady."""
    if not runs:
        return ""
    parts = []
    for name in dict.fromkeys(str(r.summary.get("workload_name") or "custom") for r in runs):
        rs = [r for r in runs if str(r.summary.get("workload_name") or "custom") == name]
        s = rs[0].summary
        bits = [f"workload {name}"]
        if s.get("target_rate"):
            bits.append(f"{float(s['target_rate']):,.4g} fires/s target")
        triggers = (rs[0].workload or {}).get("triggers")
        if triggers:
            bits.append(f"{int(triggers):,} triggers")
        warm, window = s.get("warmup_s"), s.get("measured_s")
        if window:
            bits.append((f"{warm:g} s warm-up + " if warm else "") + f"{window:g} s measured window")
        steady = [r.summary.get("steady_state") for r in rs]
        if all(x is True for x in steady):
            cycles = min(float(r.summary.get("cycles_per_trigger") or 0) for r in rs)
            bits.append(f"steady state ({cycles:.1f} fire cycles per trigger)")
        elif any(x is False for x in steady):
            bits.append("not in steady state")
        parts.append(", ".join(bits))
    return "; ".join(parts) + "."


def design_lines(d: Decision) -> list[str]:
    """One line per run: met the SLO or not, what failed, and its cost figure."""
    rec = d.recommendation
    out = []
    for v in rec.verdicts:
        failed = [f"{t} (measured {m})" for t, m, ok in v.checks if not ok]
        line = f"{v.run.label}: " + ("meets the SLO" if v.meets else "does not meet the SLO: " + "; ".join(failed))
        if v.meets:
            line += " (" + ", ".join(f"{t}: {m}" for t, m, _ in v.checks) + ")"
        if v.cost is not None and rec.cost_name:
            line += f"; {rec.cost_figure} {fmt_figure(FIGURES[rec.cost_name], v.cost)}"
        out.append(line + ".")
    return out


def _blocking(run: Run) -> list[tuple[Check, str]]:
    """The run's failed blocking checks, each with the line that says it: the run's own warning
    for it when it has one, else the check's detail."""
    warnings = [str(w) for w in run.summary.get("warnings") or []]
    out = []
    for c in run_checks(run):
        if c.name in BLOCKING and c.ok is False:
            key = CHECK_WARNING.get(c.name)
            said = next((w for w in warnings if key and key in w), None)
            out.append((c, said or f"check failed: {c.name} — {c.detail}"))
    return out


def blockers(runs: list[Run]) -> list[str]:
    """What makes a run's figures unusable, one line each (the first screen's red boxes)."""
    return [f"{r.label}: {line}" for r in runs for _, line in _blocking(r)]


def first_screen_blocks(d: Decision | None, runs: list[Run]) -> list[Block]:
    if d is None:
        return [Block("h2", "The answer"), Block("strong", "No runs to report.")]
    out = [Block("h2", "The answer"), Block("strong", d.recommendation.headline)]
    lines = design_lines(d)
    if lines:
        out.append(Block("list", items=lines))
    out.append(
        Block(
            "p",
            workload_line(runs)
            + f" SLO: {d.recommendation.slo_text}."
            + (f" Cost: {d.recommendation.cost_figure}." if d.recommendation.cost_figure else ""),
        )
    )
    for line in blockers(runs):
        out.append(Block("alert", line))
    return out


def key_figures_block(d: Decision | None) -> Block | None:
    """The deciding figures as a small table (the Markdown summary's stand-in for the pictures)."""
    if d is None or not d.recommendation.verdicts:
        return None
    rec = d.recommendation
    keys = [k for k in ("lag_p50", "lag_p99", "lost", "postgres_cpu_per_fire") if k in FIGURES]
    if rec.cost_name and rec.cost_name not in keys:
        keys.append(rec.cost_name)
    rows = []
    for v in rec.verdicts:
        rows.append([v.run.label] + [fmt_figure(FIGURES[k], FIGURES[k].get(v.run)) for k in keys])
    return Block("table", header=["run"] + [FIGURES[k].label for k in keys], rows=rows)


def notes(runs: list[Run], d: Decision | None) -> list[tuple[str, str, str]]:
    """Every warning of the report, once: ``(note, the run(s) it is about, the figure it qualifies)``.
    The same text from several runs is one note naming them all; the blocking ones are on the first
    screen and not repeated here."""
    seen: dict[str, list[str]] = {}
    for r in runs:
        said = {line for _, line in _blocking(r)}  # on the first screen already
        for line in warning_lines(r, run_checks(r)):
            if line not in said:
                seen.setdefault(line, []).append(r.label)
    for line in environment_differences(runs):
        seen.setdefault(f"runs from different environments: {line}", []).append("all")
    policy = state_writes_sentence(runs)  # beside the cost figures it moves (bench compare --state-writes)
    if policy and policy.startswith("State writes differ"):
        seen.setdefault(policy, []).append("all")
    if d is not None:
        for line in d.recommendation.not_measured:
            label, sep, rest = line.partition(": ")
            if sep and label in {r.label for r in runs}:
                if not any(rest.strip(". ") in known for known in seen):
                    seen.setdefault(rest, []).append(label)
            elif not any(line.strip(". ") in known for known in seen):
                seen.setdefault(line, []).append("all")
    rows = [(text, ", ".join(dict.fromkeys(who)), affects(text)) for text, who in seen.items()]
    return _explain_once(rows)


def _explain_once(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Notes that differ only in their figures but end in the same long explanation (after a
    "; ") keep their own part, and the explanation is said once, after the first of them."""
    tails: dict[str, int] = {}
    for text, _, _ in rows:
        head, sep, tail = text.partition("; ")
        if sep and len(tail) >= 80:
            tails[tail] = tails.get(tail, 0) + 1
    out, said = [], set()
    for text, who, fig in rows:
        head, sep, tail = text.partition("; ")
        if sep and tails.get(tail, 0) > 1:
            out.append((head if tail in said else f"{head}; {tail}", who, fig))
            said.add(tail)
        else:
            out.append((text, who, fig))
    return out


def notes_blocks(runs: list[Run], d: Decision | None) -> list[Block]:
    rows = notes(runs, d)
    if not rows:
        return []
    return [
        Block("h2", "Notes"),
        Block("p", "Every caveat of the figures above, once, with the figure it qualifies."),
        Block("table", header=["note", "run", "qualifies"], rows=[[t, who, fig] for t, who, fig in rows]),
    ]

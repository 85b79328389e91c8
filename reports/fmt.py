"""How a figure is written, for the reports and the terminal alike: one module, one marker for a
figure that is missing or does not apply (:data:`MISSING`), and one for a figure that applies but
could not be measured (:data:`UNAVAILABLE`, always shown with its reason). A figure that is a word
rather than a number (a lag percentile that is ``"not delivered"``, see :mod:`metrics.rundir`) is
written as is."""

from __future__ import annotations

import math
from typing import Any

MISSING = "—"
UNAVAILABLE = "not available"  # a figure that applies but could not be measured here (the reason is shown)


def missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def num(x: Any) -> str:
    """Adaptive precision: thousands separators from 1,000, three significant figures below 1,
    so close values stay distinct."""
    if missing(x):
        return MISSING
    if isinstance(x, str):
        return x
    x = float(x)
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def fixed(x: Any, pattern: str = "{:,.0f}", none: str = MISSING) -> str:
    """``pattern.format(x)``, or ``none`` (:data:`MISSING` unless told)."""
    if isinstance(x, str):
        return x
    return none if missing(x) else pattern.format(x)


def pct(ratio: Any, digits: int = 1) -> str:
    """A ratio (0.123) as a percentage (12.3%)."""
    return MISSING if missing(ratio) else f"{100 * float(ratio):.{digits}f}%"


def ms(v: Any) -> str:
    """Milliseconds, adaptive precision (``20.00 ms``, ``1,074 ms``)."""
    if isinstance(v, str):
        return v
    return MISSING if missing(v) else f"{num(v)} ms"


def lag(v: Any) -> str:
    """A lag in milliseconds, in seconds from ten seconds up (``412.3 ms``, ``48.9 s``)."""
    if missing(v):
        return MISSING
    if isinstance(v, str):
        return v
    v = float(v)
    return f"{v:,.1f} ms" if v < 10_000 else f"{v / 1000:,.1f} s"


def human_bytes(n: Any) -> str:
    if missing(n):
        return MISSING
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def one_line(text: Any, limit: int = 160) -> str:
    """A message as one short line: its first non-empty line, cut at ``limit`` characters."""
    lines = [x.strip() for x in str(text).splitlines() if x.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def collapse(messages, known=()) -> list[str]:
    """One short line per problem: each message cut to one line, repeats said once with their
    count (``(3 times)``), and messages already said elsewhere (``known``: contained in one of
    them, or containing one) left out."""
    said = [one_line(k, limit=10_000) for k in known if k]
    order: list[str] = []
    counts: dict[str, int] = {}
    for m in messages:
        line = one_line(m)
        if not line or any(line in k or k in line for k in said):
            continue
        if line not in counts:
            order.append(line)
            counts[line] = 0
        counts[line] += 1
    return [line if counts[line] == 1 else f"{line} ({counts[line]} times)" for line in order]


def count(x: Any) -> str:
    """A count with thousands separators (``12,345``)."""
    return MISSING if missing(x) else f"{int(x):,}"

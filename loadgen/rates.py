"""Parsing of rates (``556/s``, ``33360/min``, ``556``) and durations (``20s``, ``5m``, ``1h``)."""

from __future__ import annotations

import math
import re


def shown(value, limit: int = 40) -> str:
    """A value as an error message quotes it: its repr, cut short."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*(s|sec|second|m|min|minute|h|hour))?\s*$", re.IGNORECASE)
_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}
RATE_FORMS = "556/s, 33360/min, 2000000/h or a bare number of fires per second such as 556"


def parse_rate(text: str | float | int) -> float:
    """Fires per second from ``556/s``, ``33360/min``, ``2e6/h`` or ``556``. Raises ValueError."""
    if isinstance(text, bool):
        raise ValueError(f"invalid rate {shown(text)}; accepted forms: {RATE_FORMS}")
    if isinstance(text, (int, float)):
        value = float(text)
        if not math.isfinite(value) or value <= 0:
            raise ValueError(
                f"invalid rate {shown(text)}: must be a positive finite number; accepted forms: {RATE_FORMS}"
            )
        return value
    m = _RATE.match(str(text))
    if not m:
        raise ValueError(f"invalid rate {shown(text)}; accepted forms: {RATE_FORMS}")
    value = float(m.group(1)) / _PER[(m.group(2) or "s").lower()]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid rate {shown(text)}: must be a positive finite number; accepted forms: {RATE_FORMS}")
    return value


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DURATION_FORMS = "90s, 5m, 1h30m, 250ms, 30d or a bare number of seconds"


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``90s``, ``5m``, ``1h30m``, ``250ms``, ``30d`` or a bare number. Raises ValueError."""
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {shown(text)}; accepted forms: {DURATION_FORMS}")
    if isinstance(text, (int, float)):
        if not math.isfinite(text):
            raise ValueError(
                f"invalid duration {shown(text)}: must be a finite number of seconds; accepted forms: {DURATION_FORMS}"
            )
        if text < 0:
            raise ValueError(f"invalid duration {shown(text)}: must not be negative")
        return float(text)
    s = str(text).strip()
    try:
        value = float(s)
        if not math.isfinite(value):  # "nan", "inf", "1e999"
            raise ValueError(
                f"invalid duration {shown(text)}: must be a finite number of seconds; accepted forms: {DURATION_FORMS}"
            )
    except ValueError as exc:
        if str(exc).startswith("invalid duration"):
            raise
        pos, total = 0, 0.0
        for m in _DURATION.finditer(s):
            if s[pos : m.start()].strip():
                break
            total += float(m.group(1)) * _UNIT_S[m.group(2).lower()]
            pos = m.end()
        if pos == 0 or s[pos:].strip() or not math.isfinite(total):
            raise ValueError(f"invalid duration {shown(text)}; accepted forms: {DURATION_FORMS}") from None
        return total
    if value < 0:
        raise ValueError(f"invalid duration {shown(text)}: must not be negative")
    return value


def parse_interval_range(text: str) -> tuple[float, float]:
    """``60s..120s`` -> (60.0, 120.0); a single duration gives a fixed interval."""
    lo, sep, hi = str(text).partition("..")
    low = parse_duration(lo)
    high = parse_duration(hi) if sep else low
    if low <= 0 or high < low:
        raise ValueError(f"invalid interval {shown(text)}; use LOW..HIGH with 0 < LOW <= HIGH, e.g. 60s..120s")
    return low, high

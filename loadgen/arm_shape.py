"""Load shapes for ``loadgen/locustfile.py``: users over time, as steps or a ramp.

Kept apart from the locustfile because importing locust monkey-patches the process with gevent;
this module imports nothing but ``re``, so the harness and its tests can use it.

Spec: ``steps:20s=2,40s=4,60s=8`` holds 2 users until 20 s, 4 until 40 s, 8 until 60 s, then the
test ends; ``ramp:30s=1,90s=10`` starts at the first point's users and changes linearly between
points (1 user for the first 30 s, then up to 10 at 90 s). Times take ``ms``, ``s`` (the
default), ``m`` or ``h``.
"""

from __future__ import annotations

import re

_POINT = re.compile(r"^\s*(\d+(?:\.\d+)?)(ms|s|m|h)?\s*=\s*(\d+)\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
FORMS = "steps:20s=2,40s=4 or ramp:30s=1,90s=10"


def parse_shape(spec: str) -> tuple[str, list[tuple[float, int]]]:
    """``steps:...`` or ``ramp:...`` -> (kind, [(until_s, users), ...]). Raises ValueError."""
    kind, sep, rest = spec.partition(":")
    if kind not in ("steps", "ramp") or not sep or not rest.strip():
        raise ValueError(f"bad arm-load shape {spec!r}; use {FORMS}")
    points: list[tuple[float, int]] = []
    for part in rest.split(","):
        m = _POINT.match(part)
        if not m:
            raise ValueError(f"bad arm-load shape point {part!r} in {spec!r}; use TIME=USERS, e.g. 30s=4")
        points.append((float(m.group(1)) * _UNIT_S[m.group(2)], int(m.group(3))))
    times = [t for t, _ in points]
    if any(b <= a for a, b in zip(times, times[1:])) or times[0] <= 0:
        raise ValueError(f"bad arm-load shape {spec!r}: times must be positive and increase")
    return kind, points


def users_at(kind: str, points: list[tuple[float, int]], t_s: float) -> int | None:
    """Users wanted ``t_s`` seconds into the test; None once the last point has passed."""
    prev_t, prev_u = 0.0, points[0][1]
    for until, users in points:
        if t_s < until:
            if kind == "steps":
                return users
            frac = (t_s - prev_t) / (until - prev_t)
            return max(1, round(prev_u + frac * (users - prev_u)))
        prev_t, prev_u = until, users
    return None

"""Which servers a command talks to, and a scheduler's options as the user gave them.

Every command that needs Postgres or Temporal resolves them here: the ``--dsn`` /
``--temporal-address`` the user gave (a wrong one is a usage error, exit 2), or the embedded
servers of :mod:`harness.stack`, started on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.errors import BenchError, UsageError


def resolve_servers(
    classes,
    dsn: str | None,
    temporal_address: str | None,
    say: Callable[[str], None] = print,
    need_postgres: bool = False,
) -> tuple[str | None, str | None]:
    """The DSN and Temporal address the given scheduler classes need (``need_postgres``: a DSN
    even when they do not, for a run's neighbour)."""
    from harness import stack

    need_pg = any(getattr(c, "needs_postgres", False) for c in classes) or dsn is not None or need_postgres
    need_temporal = any(getattr(c, "needs_temporal", False) for c in classes)
    if not (need_pg or need_temporal):
        return None, None
    try:
        s = stack.resolve(dsn, temporal_address, need_temporal, say=say)
    except BenchError as exc:
        if dsn is not None or temporal_address is not None:
            raise UsageError(str(exc)) from None  # the address the user gave is wrong
        raise
    return (s.dsn if need_pg else None), (s.temporal_address if need_temporal else None)


def scheduler_class(name: str):
    """The registered scheduler class called ``name``; an unknown name is a usage error."""
    from schedulers.base import UnknownScheduler
    from schedulers.base import scheduler_class as lookup

    try:
        return lookup(name)
    except UnknownScheduler as exc:
        raise UsageError(str(exc)) from None


def scheduler_options(cls, pairs: Sequence[str]) -> dict:
    """A scheduler's defaults with ``--opt key=value`` pairs applied; bad pairs exit 2: an unknown
    key, a value of the wrong type, a number that is not finite, or one outside the range the
    backend declares (``option_ranges``, where it declares them)."""
    import math

    from schedulers.base import OptionSpec

    try:
        given = OptionSpec(dict(cls.default_options)).parse(pairs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ranges = getattr(cls, "option_ranges", None) or {}
    for key, value in given.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"bad value for scheduler option {key}: {value!r} (expected a finite number)")
        if key in ranges and value not in ranges[key]:
            raise UsageError(f"bad value for scheduler option {key}: {value!r} (must be {ranges[key]})")
    return {**cls.default_options, **given}

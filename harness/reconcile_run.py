"""``bench migrate reconcile``: compare two live stores' armed timers, report drift, repair it.

The stores are named like a rehearsal's (``--schema S``: the ``--from`` store in ``S_p``, the
``--to`` store in ``S_s``, as ``bench migrate dry-run`` prints at its start) or given one by one
(``--from-schema``, ``--to-schema``), so the command serves a rehearsal in progress, one kept with
``--keep``, or a long-running dual write of your own.

Read-only unless ``--repair``: the stores are opened without their set-up (no DDL, no option
applied), only ``export_armed()`` is called, and only ``--repair`` arms or disarms anything, in
the target alone. A store must exist already: a schema without the store's tables is bad input.
temporal_shards answers through its shard workflows, so a worker must be running for it (a
rehearsal or your own nodes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from harness.errors import UsageError
from harness.migration_run import PRIMARY_SUFFIX, SHADOW_SUFFIX


def schemas(schema: str | None, from_schema: str | None, to_schema: str | None) -> tuple[str, str]:
    """The two schemas from ``--schema`` or ``--from-schema`` + ``--to-schema``."""
    if schema and (from_schema or to_schema):
        raise UsageError("give --schema (a rehearsal's, naming both stores) or --from-schema and --to-schema, not both")
    if schema:
        return schema + PRIMARY_SUFFIX, schema + SHADOW_SUFFIX
    if not (from_schema and to_schema):
        raise UsageError("name the stores: --schema S (a rehearsal's: S_p and S_s) or --from-schema A --to-schema B")
    if from_schema == to_schema:
        raise UsageError(
            f"--from-schema and --to-schema are both {from_schema!r}; a store compared with itself has no drift to find"
        )
    return from_schema, to_schema


def default_settle_s(*schedulers) -> float:
    """Twice the slower store's declared max lag, plus 2 s: a healthy store fires what it owes."""
    return 2.0 * max(s.capabilities.max_lag_s for s in schedulers) + 2.0


async def _missing_tables(dsn: str, relations: list[str]) -> list[str]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT to_regclass(r) IS NULL FROM unnest(%s::text[]) AS r", [relations])
        flags = [row[0] for row in await cur.fetchall()]
    return [r for r, missing in zip(relations, flags) if missing]


async def run(
    from_cls,
    to_cls,
    opts: dict[str, dict],
    from_schema: str,
    to_schema: str,
    dsn: str | None,
    temporal_address: str | None,
    *,
    tolerance_s: float,
    settle_s: float | None,
    repair: bool,
    say: Callable[[str], None],
) -> tuple[dict[str, Any], int]:
    """The reconcile report and the exit code: 0 no drift left, 3 drift (found, or left after
    ``repair``)."""
    from migration.reconcile import reconcile
    from schedulers.base import StoreContext, create

    for cls in (from_cls, to_cls):
        if not (cls.needs_postgres or cls.needs_temporal):
            raise UsageError(
                f"{cls.name} keeps its timers inside the process that runs it; reconcile reads stores "
                f"another process can reach (Postgres or Temporal)"
            )
    source = create(
        from_cls.name, StoreContext(dsn=dsn, schema=from_schema, temporal_address=temporal_address), **opts["from"]
    )
    target = create(
        to_cls.name, StoreContext(dsn=dsn, schema=to_schema, temporal_address=temporal_address), **opts["to"]
    )
    try:
        for s, schema in ((source, from_schema), (target, to_schema)):
            gone = await _missing_tables(dsn, s.relations()) if dsn else []
            if gone:
                raise UsageError(
                    f"schema {schema!r} holds no {s.name} store (missing {', '.join(gone)}); give the "
                    f"schema of a running or kept rehearsal (its start line prints them)"
                )
        settle = settle_s if settle_s is not None else default_settle_s(source, target)
        say(
            f"reconcile {source.name} ({from_schema}) -> {target.name} ({to_schema}): "
            f"{'repairing the target' if repair else 'read-only'}; drift confirmed over {settle:g} s"
        )
        report = await reconcile(source, target, settle_s=settle, repair=repair, tolerance_s=tolerance_s, say=say)
    finally:
        await asyncio.gather(source.teardown(drop=False), target.teardown(drop=False), return_exceptions=True)
    report["schemas"] = {"from": from_schema, "to": to_schema}
    left = report["after_repair"] if report["after_repair"] is not None else report["drift"]
    return report, (3 if left["total"] else 0)

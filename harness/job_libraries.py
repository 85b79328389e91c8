"""``--preset NAME`` of ``bench inspect`` and ``bench capture``: where a job library keeps its
queue, read from ``job_libraries.yaml`` beside this file (one small declarative entry per library,
in the grammar of ``--map`` and ``--where``, :mod:`metrics.owntable_expr`).

A preset needs no library installed: it names tables and columns, and a database that has them
is read like any other. Each entry says which library version's schema it was written against;
a table without the columns it relies on is refused with one line naming them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness.errors import UsageError
from metrics import owntable_expr as expr

PRESETS_PATH = Path(__file__).with_name("job_libraries.yaml")


@dataclass(frozen=True)
class Preset:
    name: str
    schema: str
    table: str
    columns: tuple[str, ...]
    due: str
    pending: str
    id: str
    tenant: str | None = None
    state: str | None = None
    running: str | None = None
    finished: str | None = None
    row_per_fire: bool = False
    keeps_finished: str | None = None  # what removes finished rows; None: nothing by default
    log_tables: dict[str, str | None] = field(default_factory=dict)  # table -> what removes its rows

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "schema": self.schema,
            "table": self.table,
            "due": self.due,
            "pending": self.pending,
            "running": self.running,
            "finished": self.finished,
            "row_per_fire": self.row_per_fire,
            "keeps_finished": self.keeps_finished,
            "log_tables": dict(self.log_tables),
        }


@cache
def presets() -> dict[str, Preset]:
    raw = yaml.safe_load(PRESETS_PATH.read_text())
    out = {}
    for name, entry in raw.items():
        entry = dict(entry)
        entry["columns"] = tuple(entry["columns"])
        entry["log_tables"] = dict(entry.get("log_tables") or {})
        out[name] = Preset(name=name, **entry)
    return out


def preset(name: str) -> Preset:
    found = presets().get(name)
    if found is None:
        raise UsageError(f"unknown --preset {name!r}; known: {', '.join(presets())}")
    return found


def check_columns(p: Preset, columns: list[dict[str, Any]], table: str) -> None:
    """One line when ``table`` lacks a column the preset relies on."""
    have = {c["name"] for c in columns}
    missing = [c for c in p.columns if c not in have]
    if missing:
        raise UsageError(
            f"--preset {p.name} expects the schema of {p.schema}, but {table} has no column "
            f"{', '.join(missing)}; give the library's table with --table, or describe yours with --map and --where"
        )


def bind_filter(text: str | None, columns: list[dict[str, Any]], option: str, table: str) -> list:
    """A ``--where`` filter (or a preset's), parsed and checked against the columns."""
    if not text:
        return []
    try:
        return expr.bind_where(expr.parse_where(text), columns, option, table)
    except expr.ExpressionError as exc:
        raise UsageError(str(exc)) from None


def bind_identity(text: str, columns: list[dict[str, Any]], option: str, table: str) -> list[expr.Bound]:
    try:
        return [expr.bind(e, columns, option, table) for e in expr.parse_identity(text).parts]
    except expr.ExpressionError as exc:
        raise UsageError(str(exc)) from None

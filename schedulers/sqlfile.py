"""Named SQL blocks from ``.sql`` files, rendered with the schema as an identifier.

A file holds blocks headed ``-- name: claim_due`` (River's sqlc convention); the lines up to the
next header are the statement. ``{schema}`` in a block is replaced by the quoted schema name via
:mod:`psycopg.sql`, never by string formatting; a block may also name a table by placeholder
(``{schedule}``), rendered as the schema-qualified identifier the caller binds it to, so one
statement can run against several tables (pg_partitioned claims from each partition with
pg_leased's ``claim_due``). Values always travel as bind parameters (``%(name)s``). Literal
braces in SQL must be doubled (``'{{}}'``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from psycopg import sql

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def load_blocks(path: str | Path) -> dict[str, str]:
    text = Path(path).read_text()
    parts = _HEADER.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in blocks:
            raise ValueError(f"{path}: query {name!r} defined twice")
        blocks[name] = body.strip()
    return blocks


class Queries:
    """The named statements of one ``.sql`` file, bound to one schema and to the tables its
    placeholders name (``tables``: placeholder -> table name in ``schema``)."""

    def __init__(self, path: str | Path, schema: str, **tables: str) -> None:
        self.path = Path(path)
        self.schema = schema
        identifiers = {name: sql.Identifier(schema, table) for name, table in tables.items()}
        self._rendered = {
            name: sql.SQL(body).format(schema=sql.Identifier(schema), **identifiers)
            for name, body in load_blocks(self.path).items()
        }

    def __getitem__(self, name: str) -> sql.Composed:
        try:
            return self._rendered[name]
        except KeyError:
            raise KeyError(f"{self.path.name} has no query named {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._rendered

    def names(self) -> list[str]:
        return list(self._rendered)

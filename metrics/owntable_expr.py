"""The small grammar of ``--map`` and ``--where`` (``bench capture``, ``bench inspect``): where a
trigger's identity, tenant, due time and state live in a job library's table, and which rows are
pending.

An expression is a column, optionally followed by a JSON path::

    queue_name                  a column, as it is
    args.trigger_id             a key inside a json/jsonb column (procrastinate's args)
    payload.tenant              the same inside a bytea column holding UTF-8 JSON (PgQueuer's payload)
    inputs.positionalArgs.0.id  an array index is a path step too; text columns holding JSON decode alike
    task_name+args.trigger_id   several expressions make one identity (hashed together)

A filter is one or more conditions joined by ``and``::

    status=todo    state in (available,scheduled)    finished_at is null    kind!=cleanup

Everything is compiled with :mod:`psycopg.sql`: columns and types as identifiers read from the
catalogue, path steps and values as bind parameters, never pasted text. :func:`bind` checks an
expression against the table's columns (it exists; a path only into json, jsonb, bytea or text;
enum values are among the type's labels) before any row is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

JSON_TYPES = {"json", "jsonb"}
DECODED_TYPES = {"bytea": "bytea", "text": "text", "varchar": "text", "bpchar": "text"}
_NAME = r'"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*'
_STEP = r'"(?:[^"]|"")+"|[A-Za-z0-9_$-]+'
_EXPR = re.compile(rf"^\s*({_NAME})((?:\.(?:{_STEP}))*)\s*$")
_STEPS = re.compile(rf"\.({_STEP})")
_VALUE = r"'(?:[^']|'')*'|[^\s,()'=!]+"
_COND = re.compile(
    rf"^\s*(?P<expr>[^\s=!]+?)\s*(?:"
    rf"(?P<op>!=|=)\s*(?P<value>{_VALUE})"
    rf"|\s+(?P<neg>not\s+)?in\s*\((?P<values>[^)]*)\)"
    rf"|\s+is\s+(?P<notnull>not\s+)?null"
    rf")\s*$",
    re.IGNORECASE,
)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
SAMPLE_ROWS = 1000  # rows a path check reads when the statistics hold no sample of the column


class ExpressionError(ValueError):
    """An expression or filter that does not parse or does not fit the table; one line."""


@dataclass(frozen=True)
class Expr:
    """One column and the JSON path into it (empty: the column itself)."""

    column: str
    path: tuple[str, ...] = ()

    def __str__(self) -> str:
        return ".".join((self.column, *self.path))


@dataclass(frozen=True)
class Identity:
    """One or more expressions whose values together name a thing (``task_name+args.id``)."""

    parts: tuple[Expr, ...]

    def __str__(self) -> str:
        return "+".join(str(p) for p in self.parts)


@dataclass(frozen=True)
class Condition:
    expr: Expr
    op: str  # "=", "!=", "in", "not in", "is null", "is not null"
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.op in ("is null", "is not null"):
            return f"{self.expr} {self.op}"
        if self.op in ("in", "not in"):
            return f"{self.expr} {self.op} ({','.join(self.values)})"
        return f"{self.expr}{self.op}{self.values[0]}"


def _unquote(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


def parse_expr(text: str) -> Expr:
    m = _EXPR.match(text or "")
    if not m:
        raise ExpressionError(
            f"bad expression {text!r}; give a column (queue_name) or a JSON path into one (args.trigger_id)"
        )
    return Expr(_unquote(m.group(1)), tuple(_unquote(s) for s in _STEPS.findall(m.group(2))))


def parse_identity(text: str) -> Identity:
    return Identity(tuple(parse_expr(p) for p in (text or "").split("+")))


def _values(text: str) -> tuple[str, ...]:
    out = []
    for raw in (v.strip() for v in text.split(",")):
        if not raw:
            raise ExpressionError(f"empty value in ({text})")
        out.append(raw[1:-1].replace("''", "'") if raw.startswith("'") and raw.endswith("'") and len(raw) > 1 else raw)
    return tuple(out)


def parse_where(text: str) -> tuple[Condition, ...]:
    """``status=todo and queue in (a,b) and finished_at is null`` as conditions."""
    conds = []
    for part in _AND.split((text or "").strip()):
        m = _COND.match(part)
        if not m:
            raise ExpressionError(
                f"bad condition {part.strip()!r}; give COLUMN=VALUE, COLUMN!=VALUE, COLUMN in (A,B), "
                f"COLUMN is [not] null, joined by 'and' (COLUMN may be a JSON path: args.kind=poll)"
            )
        expr = parse_expr(m.group("expr"))
        if m.group("op"):
            conds.append(Condition(expr, m.group("op"), _values(m.group("value"))))
        elif m.group("values") is not None:
            conds.append(Condition(expr, "not in" if m.group("neg") else "in", _values(m.group("values"))))
        else:
            conds.append(Condition(expr, "is not null" if m.group("notnull") else "is null"))
    return tuple(conds)


# -- binding: an expression checked against the catalogue ------------------------------------


@dataclass(frozen=True)
class Bound:
    """An expression on a column of the table as the catalogue describes it (``columns`` rows of
    :mod:`metrics.owntable`: name, type, category, type_schema, type_name, enum_labels)."""

    expr: Expr
    column: dict[str, Any]

    @property
    def decode(self) -> str | None:
        """How the path's JSON is read: ``json`` (json/jsonb), ``bytea`` or ``text`` (decoded), or
        None for a bare column."""
        if not self.expr.path:
            return None
        t = self.column["type_name"]
        return "json" if t in JSON_TYPES else DECODED_TYPES[t]


def bind(expr: Expr, columns: list[dict[str, Any]], option: str, table: str) -> Bound:
    col = next((c for c in columns if c["name"] == expr.column), None)
    if col is None:
        names = ", ".join(c["name"] for c in columns)
        raise ExpressionError(f"{option}: {table} has no column {expr.column!r}; its columns: {names}")
    if expr.path and col["type_name"] not in JSON_TYPES and col["type_name"] not in DECODED_TYPES:
        raise ExpressionError(
            f"{option}: {expr} is a path into column {expr.column} of {table}, which is {col['type']}, "
            f"not JSON (json, jsonb, or text or bytea holding JSON); give the column alone or a JSON column"
        )
    return Bound(expr, col)


def bind_where(conds: tuple[Condition, ...], columns: list[dict[str, Any]], option: str, table: str) -> list:
    out = []
    for c in conds:
        b = bind(c.expr, columns, option, table)
        labels = b.column.get("enum_labels") or []
        if labels and not c.expr.path:
            wrong = [v for v in c.values if v not in labels]
            if wrong:
                raise ExpressionError(
                    f"{option}: {c.expr} is of type {b.column['type']}, which has no value "
                    f"{', '.join(repr(w) for w in wrong)}; its values: {', '.join(labels)}"
                )
        out.append((c, b))
    return out


# -- compiling ------------------------------------------------------------------------------


@dataclass
class Params:
    """The bind parameters of one statement's expressions, named ``e0``, ``e1``, ..."""

    values: dict[str, Any] = field(default_factory=dict)

    def add(self, value: Any) -> sql.Placeholder:
        name = f"e{len(self.values)}"
        self.values[name] = value
        return sql.Placeholder(name)


def json_of(b: Bound, source: sql.Composable, server_version_num: int) -> sql.Composable:
    """The JSON a path reads, from ``source`` (the column, or a sampled value of it). Text that
    is not JSON reads as NULL on Postgres 16+ (``pg_input_is_valid``), so one bad row does not
    fail the statement; bytea is decoded from UTF-8 first."""
    if b.decode == "json":
        return source
    text = sql.SQL("convert_from({}, 'UTF8')").format(source) if b.decode == "bytea" else source
    if server_version_num >= 160000:
        return sql.SQL("(CASE WHEN pg_input_is_valid({t}, 'jsonb') THEN ({t})::jsonb END)").format(t=text)
    return sql.SQL("({})::jsonb").format(text)


def value_of(b: Bound, params: Params, server_version_num: int, source: sql.Composable | None = None) -> sql.Composable:
    """The expression's value: the column itself, or the text at its JSON path (``#>>``)."""
    src = source if source is not None else sql.Identifier(b.expr.column)
    if not b.expr.path:
        return src
    return sql.SQL("({} #>> {}::text[])").format(json_of(b, src, server_version_num), params.add(list(b.expr.path)))


def text_of(bound: list[Bound], params: Params, server_version_num: int) -> sql.Composable:
    """An identity as one text (its parts joined by a unit separator, NULLs as empty)."""
    parts = [sql.SQL("coalesce(({})::text, '')").format(value_of(b, params, server_version_num)) for b in bound]
    if len(parts) == 1:
        return parts[0]
    return sql.SQL("concat_ws(chr(31), {})").format(sql.SQL(", ").join(parts))


def condition_sql(c: Condition, b: Bound, params: Params, server_version_num: int) -> sql.Composable:
    """One condition; a bare column's values are cast to its own type (identifiers from the
    catalogue), so enum and timestamp comparisons can use the table's indexes."""
    value = value_of(b, params, server_version_num)
    if c.op in ("is null", "is not null"):
        return sql.SQL("{} IS NULL" if c.op == "is null" else "{} IS NOT NULL").format(value)
    typ = sql.SQL("text") if b.expr.path else sql.Identifier(b.column["type_schema"], b.column["type_name"])
    if c.op in ("=", "!="):
        return sql.SQL("{} {} {}::{}").format(
            value, sql.SQL(c.op if c.op == "=" else "<>"), params.add(c.values[0]), typ
        )
    any_ = sql.SQL("{} = ANY({}::{}[])").format(value, params.add(list(c.values)), typ)
    return any_ if c.op == "in" else sql.SQL("NOT ({})").format(any_)


def where_sql(bound: list, params: Params, server_version_num: int) -> sql.Composable:
    """The conditions joined by AND; ``TRUE`` when there are none."""
    if not bound:
        return sql.SQL("TRUE")
    return sql.SQL(" AND ").join(
        sql.SQL("({})").format(condition_sql(c, b, params, server_version_num)) for c, b in bound
    )


def columns_of_where(conds: tuple[Condition, ...]) -> set[str]:
    return {c.expr.column for c in conds}

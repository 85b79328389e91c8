"""The grammar of ``--map`` and ``--where`` (metrics/owntable_expr.py): what parses, what is
refused with one line, and what it compiles to (identifiers and bind parameters only)."""

from __future__ import annotations

import pytest

from metrics import owntable_expr as expr

COLUMNS = [
    {"name": "args", "type": "jsonb", "type_schema": "pg_catalog", "type_name": "jsonb", "enum_labels": []},
    {"name": "payload", "type": "bytea", "type_schema": "pg_catalog", "type_name": "bytea", "enum_labels": []},
    {"name": "due", "type": "timestamp with time zone", "type_schema": "pg_catalog", "type_name": "timestamptz"},
    {
        "name": "status",
        "type": "job_status",
        "type_schema": "app",
        "type_name": "job_status",
        "enum_labels": ["todo", "done"],
    },
]


def test_expressions_and_filters_parse():
    assert expr.parse_expr("args.trigger_id") == expr.Expr("args", ("trigger_id",))
    assert expr.parse_expr('"Args"."a b".0') == expr.Expr("Args", ("a b", "0"))
    assert [str(p) for p in expr.parse_identity("task_name+args").parts] == ["task_name", "args"]
    conds = expr.parse_where("status=todo and state in (available, 'sched uled') and finished_at IS NOT NULL")
    assert [(c.expr.column, c.op, c.values) for c in conds] == [
        ("status", "=", ("todo",)),
        ("state", "in", ("available", "sched uled")),
        ("finished_at", "is not null", ()),
    ]
    assert expr.parse_where("kind!=x")[0].op == "!="


@pytest.mark.parametrize("text", ["args->>'id'", "1abc", "", "a..b"])
def test_bad_expressions_are_refused(text):
    with pytest.raises(expr.ExpressionError, match="bad expression"):
        expr.parse_expr(text)


@pytest.mark.parametrize("text", ["status", "status = ", "state in (a", "a=b or c=d"])
def test_bad_filters_are_refused(text):
    with pytest.raises(expr.ExpressionError, match="bad condition|bad expression"):
        expr.parse_where(text)


def test_binding_checks_columns_types_and_enum_labels():
    assert expr.bind(expr.parse_expr("payload.tenant"), COLUMNS, "--map", "t").decode == "bytea"
    with pytest.raises(expr.ExpressionError, match="has no column 'nope'"):
        expr.bind(expr.parse_expr("nope"), COLUMNS, "--map", "t")
    with pytest.raises(expr.ExpressionError, match="timestamp with time zone, not JSON"):
        expr.bind(expr.parse_expr("due.x"), COLUMNS, "--map", "t")
    with pytest.raises(expr.ExpressionError, match="no value 'todoo'; its values: todo, done"):
        expr.bind_where(expr.parse_where("status=todoo"), COLUMNS, "--where", "t")


def test_compiled_sql_has_identifiers_and_parameters_only():
    params = expr.Params()
    bound = expr.bind_where(expr.parse_where("status in (todo,done) and args.kind='it''s'"), COLUMNS, "--where", "t")
    text = expr.where_sql(bound, params, 180000).as_string(None)
    assert text == ('("status" = ANY(%(e0)s::"app"."job_status"[])) AND (("args" #>> %(e1)s::text[]) = %(e2)s::text)')
    assert params.values == {"e0": ["todo", "done"], "e1": ["kind"], "e2": "it's"}
    ident = [expr.bind(e, COLUMNS, "--map", "t") for e in expr.parse_identity("payload.id").parts]
    text = expr.text_of(ident, expr.Params(), 180000).as_string(None)
    assert "convert_from(\"payload\", 'UTF8')" in text and "pg_input_is_valid" in text

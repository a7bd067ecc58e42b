"""SQL92 property filters (boltmq.wire.sql_filter): grammar, RocketMQ's semantics, errors."""

from __future__ import annotations

import pytest

from boltmq import MessageSelector
from boltmq.message_selector import on_the_wire, selector_of, selectors
from boltmq.wire.sql_filter import (
    SQL_MAX_DEPTH,
    SQL_MAX_LENGTH,
    InvalidFilter,
    check_expression_type,
    parse_filter,
)

PROPS = {"a": "10", "region": "eu", "b": "x", "flag": "TRUE", "f": "1.5", "n": "abc", "TAGS": "T1"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a > 5 AND region IN ('eu','us') AND b IS NOT NULL", True),
        ("a > 5 AND region IN ('us') AND b IS NOT NULL", False),
        ("a = 10", True),
        ("a = 10.0", True),  # numbers compare as numbers
        ("a <> 10", False),
        ("a < 10", False),
        ("a <= 10", True),
        ("a >= 10.5", False),
        ("5 < a", True),  # the literal may come first
        ("a > -1", True),
        ("f >= 1.5 AND f < 2e0", True),
        ("a BETWEEN 1 AND 10", True),
        ("a BETWEEN 11 AND 20", False),
        ("a NOT BETWEEN 11 AND 20", True),
        ("region = 'eu'", True),
        ("region <> 'eu'", False),
        ("region = 'EU'", False),  # strings are case-sensitive
        ("region NOT IN ('us', 'asia')", True),
        ("a IN (1, 10)", True),  # numbers in IN compare as numbers
        ("flag = TRUE", True),  # booleans in any case
        ("flag = false", False),
        ("TRUE", True),
        ("FALSE OR a = 10", True),
        ("NOT (a = 10)", False),
        ("(a = 1 OR a = 10) AND (region = 'eu')", True),
        ("a = 1 OR a = 10 AND region = 'us'", False),  # AND binds tighter than OR
        ("missing IS NULL AND a IS NOT NULL", True),
        ("TAGS = 'T1'", True),  # system properties are properties too
        ("region = 'it''s'", False),
        ("a = b", False),  # two properties: not both numbers, compared as strings
        (
            "and_more IS NULL AND Inside IS NULL AND nullable IS NULL",
            True,
        ),  # keywords may start one
        ("a > 5\n  AND region = 'eu'", True),
    ],
)
def test_conditions_match_as_rocketmq_evaluates_them(expression: str, expected: bool) -> None:
    assert parse_filter(expression).matches(PROPS) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "missing > 5",
        "missing = 'x'",
        "missing <> 'x'",  # unknown, not true
        "NOT missing > 5",  # NOT of unknown stays unknown
        "missing NOT IN ('x')",
        "missing BETWEEN 1 AND 2",
        "missing NOT BETWEEN 1 AND 2",
    ],
)
def test_comparing_a_missing_property_is_false_even_negated(expression: str) -> None:
    assert parse_filter(expression).matches(PROPS) is False


def test_unknown_takes_the_other_side_of_or_and_fails_and() -> None:
    assert parse_filter("missing > 5 OR a = 10").matches(PROPS) is True
    assert parse_filter("missing > 5 AND a = 10").matches(PROPS) is False


def test_numeric_and_string_do_not_mix() -> None:
    # a property that is not a number compared with a number is false, both ways
    assert parse_filter("n > 5").matches(PROPS) is False
    assert parse_filter("n <= 5").matches(PROPS) is False
    assert parse_filter("n = 5").matches(PROPS) is False
    # a number compared with a string is string equality: "10" is not "10.0"
    assert parse_filter("a = '10'").matches(PROPS) is True
    assert parse_filter("a = '10.0'").matches(PROPS) is False
    # a property that is not true/false compared with a boolean is false
    assert parse_filter("region = TRUE").matches(PROPS) is False


@pytest.mark.parametrize(
    ("expression", "line", "column", "says"),
    [
        ("a >", 1, 4, "ends too early"),
        ("a > 5 AND", 1, 10, "ends too early"),
        ("a = = 1", 1, 5, "unexpected '='"),
        ("(a = 1", 1, 7, "')'"),
        ("a AND b", 1, 3, "unexpected 'AND'"),
        ("a > 'x'", 1, 5, "compares numbers"),
        ("a BETWEEN 'x' AND 3", 1, 11, "compares numbers"),
        ("a IN (TRUE)", 1, 7, "strings or numbers"),
        ("1 IS NULL", 1, 1, "needs a property"),
        ("a # 1", 1, 3, "unexpected character '#'"),
        ("a = 'open", 1, 5, "unexpected character"),
        ("a = 1\nAND b ==", 2, 8, "unexpected '='"),
        ("", 1, 1, "empty"),
        ("   ", 1, 1, "empty"),
        ("a IN ()", 1, 7, "unexpected ')'"),
        ("a > 5 OR AND b = 1", 1, 10, "unexpected 'AND'"),  # a keyword is never a property
        ("NULL = 1", 1, 1, "unexpected 'NULL'"),
    ],
)
def test_bad_expressions_are_refused_with_the_position(
    expression: str, line: int, column: int, says: str
) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse_filter(expression)
    assert (caught.value.line, caught.value.column) == (line, column), str(caught.value)
    assert says in str(caught.value)
    assert f"line {line}, column {column}" in str(caught.value)


def test_nesting_and_length_are_bounded() -> None:
    deep = "NOT " * (SQL_MAX_DEPTH + 1) + "a = 1"
    with pytest.raises(InvalidFilter, match="nested deeper"):
        parse_filter(deep)
    assert parse_filter("NOT " * (SQL_MAX_DEPTH - 1) + "a = 10").matches(PROPS) is False
    assert parse_filter("(" * 500 + "a = 10" + ")" * 500).matches(PROPS) is True
    with pytest.raises(InvalidFilter, match="longer than"):
        parse_filter("a = 1 OR " * (SQL_MAX_LENGTH // 9 + 1) + "a = 1")


def test_expression_types() -> None:
    assert check_expression_type("") == "TAG"
    assert check_expression_type("SQL92") == "SQL92"
    with pytest.raises(ValueError, match="not one of TAG, SQL92"):
        check_expression_type("sql")


def test_selectors_are_checked_when_made() -> None:
    assert selector_of("A || B") == MessageSelector("A || B", "TAG")
    assert MessageSelector.by_sql("a > 1").wire_type == "SQL92"
    assert MessageSelector.by_tag().wire_type == ""
    with pytest.raises(InvalidFilter, match="column 4"):
        MessageSelector.by_sql("a >")
    with pytest.raises(ValueError, match="empty tag"):
        MessageSelector.by_tag("A || ")
    # pulls send a string as it is (the broker checks it and names the field)
    assert on_the_wire("A ||") == ("A ||", "")
    assert on_the_wire(MessageSelector.by_sql("a > 1")) == ("a > 1", "SQL92")
    with pytest.raises(ValueError, match="subscription of 'Orders': empty tag"):
        selectors({"Other": "*", "Orders": "A || "})

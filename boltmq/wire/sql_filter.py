"""SQL92 property filters: RocketMQ's ``MessageSelector.bySql`` grammar, parsed with lark.

A subscription has an expression type: ``TAG`` (``"*"`` or ``"tagA || tagB"``,
:mod:`boltmq.wire.topic`) or ``SQL92``, a condition on the message's properties
(user properties and the system ones: ``TAGS``, ``KEYS``, ...) evaluated by the
broker for every message it reads for the pull (docs/filters.md). The SDK parses
the expression when a consumer subscribes and the broker parses it again on every
heartbeat and pull, both here, so both refuse a bad one alike, naming the line and
column of the error.

Grammar (keywords in any case; ``a``, ``b`` stand for a property name or a literal)::

    condition  := condition OR condition | condition AND condition | NOT condition
                | ( condition ) | TRUE | FALSE
                | a = b | a <> b | a < b | a <= b | a > b | a >= b
                | a [NOT] BETWEEN b AND c | a [NOT] IN (literal, ...)
                | a IS [NOT] NULL
    literal    := 'string' (a quote doubled inside) | 12 | -3 | 1.5 | 2e3 | TRUE | FALSE
    property   := a letter, ``_`` or ``$``, then letters, digits, ``_``, ``$`` or ``.``;
                  not a keyword (``AND``, ``OR``, ``NOT``, ``IS``, ``NULL``, ``BETWEEN``,
                  ``IN``, ``TRUE``, ``FALSE``), which a property name may only start with

Semantics, RocketMQ's (its ``ComparisonExpression`` and ``LogicExpression``):

* Properties are strings. Compared with a number, a property is read as a number
  (``"10" > 5``); one that is not a number makes the comparison false. Compared
  with a string, the comparison is of the strings (``=``, ``<>``, ``IN`` only: an
  ordering with a string literal is refused when parsing). Compared with
  ``TRUE``/``FALSE``, a property is ``"true"`` or ``"false"`` in any case.
* A comparison involving a missing property is *unknown*, as in SQL: ``NOT`` of
  unknown is unknown, ``AND``/``OR`` take unknown as false, and a message matches
  only when the whole condition is true. ``IS NULL`` is how to ask for a missing one.

Limits: at most SQL_MAX_LENGTH characters and SQL_MAX_DEPTH levels of nesting
(``NOT``, ``AND``, ``OR``), so a pull never recurses without bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput

TAG: Final = "TAG"
SQL92: Final = "SQL92"
EXPRESSION_TYPES: Final = (TAG, SQL92)
"""Expression types of a subscription ("" on the wire means TAG)."""
SQL_MAX_LENGTH: Final = 4_096
SQL_MAX_DEPTH: Final = 64

Value = float | str | bool
Truth = bool | None
"""True, false or unknown (``None``: a missing property was compared)."""
Condition = Callable[[Mapping[str, str]], Truth]
Operand = Callable[[Mapping[str, str]], str | None]

_GRAMMAR = r"""
?start: disjunction
?disjunction: conjunction | disjunction _OR conjunction -> or_
?conjunction: negation | conjunction _AND negation -> and_
?negation: _NOT negation -> not_ | predicate
?predicate: "(" disjunction ")" | boolean | comparison
comparison: operand COMPARATOR operand -> compare
    | operand _IS _NULL -> is_null
    | operand _IS _NOT _NULL -> is_not_null
    | operand _BETWEEN operand _AND operand -> between
    | operand _NOT _BETWEEN operand _AND operand -> not_between
    | operand _IN "(" literal ("," literal)* ")" -> in_
    | operand _NOT _IN "(" literal ("," literal)* ")" -> not_in
?operand: PROPERTY -> property | literal
?literal: NUMBER -> number | STRING -> string | boolean
boolean: TRUE | FALSE
COMPARATOR: "<>" | "<=" | ">=" | "=" | "<" | ">"
_OR: "OR"i
_AND: "AND"i
_NOT: "NOT"i
_IS: "IS"i
_NULL: "NULL"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
TRUE: "TRUE"i
FALSE: "FALSE"i
PROPERTY: /(?!(KEYWORDS)(?![A-Za-z0-9_$.]))[A-Za-z_$][A-Za-z0-9_$.]*/i
NUMBER: /-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?/
STRING: /'([^']|'')*'/
%ignore /[ \t\r\n]+/
""".replace("KEYWORDS", "and|or|not|is|null|between|in|true|false")


class InvalidFilter(ValueError):
    """An expression that is not a valid filter; ``line`` and ``column`` (1-based) say where."""

    def __init__(self, reason: str, line: int = 1, column: int = 1) -> None:
        super().__init__(f"invalid SQL92 filter at line {line}, column {column}: {reason}")
        self.reason = reason
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A parsed filter: :meth:`matches` tells whether a message's properties pass it."""

    expression: str
    condition: Condition

    def matches(self, properties: Mapping[str, str]) -> bool:
        return self.condition(properties) is True


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(_GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def check_expression_type(expression_type: str) -> str:
    """The type (``""`` -> TAG); ValueError naming the allowed ones otherwise."""
    kind = expression_type or TAG
    if kind not in EXPRESSION_TYPES:
        raise ValueError(
            f"expression type {expression_type[:40]!r} is not one of {', '.join(EXPRESSION_TYPES)}"
        )
    return kind


@lru_cache(maxsize=1_024)
def parse_filter(expression: str) -> SqlFilter:
    """The filter of ``expression``; InvalidFilter with the position of the first error."""
    if len(expression) > SQL_MAX_LENGTH:
        raise InvalidFilter(f"longer than {SQL_MAX_LENGTH} characters", 1, SQL_MAX_LENGTH + 1)
    if not expression.strip():
        raise InvalidFilter("the expression is empty")
    try:
        tree = _parser().parse(expression)
    except UnexpectedInput as exc:
        reason = _unexpected(exc)
        if isinstance(exc, UnexpectedEOF) or reason.startswith("the expression ends"):
            lines = expression.split("\n")  # the error is where the text ends
            raise InvalidFilter(reason, len(lines), len(lines[-1]) + 1) from None
        raise InvalidFilter(reason, exc.line, exc.column) from None
    return SqlFilter(expression, _condition(tree, 0))


def _unexpected(exc: UnexpectedInput) -> str:
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected character {exc.char!r}"
    if isinstance(exc, UnexpectedEOF):
        return "the expression ends too early"
    token = getattr(exc, "token", None)
    expected: Iterable[str] = getattr(exc, "expected", None) or ()
    names = sorted({_TERMINALS.get(name, name.lstrip("_")) for name in expected})
    hint = f" (expected {' or '.join(names)})" if names else ""
    if token is None or token.type == "$END":
        return f"the expression ends too early{hint}"
    return f"unexpected {str(token)!r}{hint}"


_TERMINALS: Final = {
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "COMPARATOR": "a comparison",
    "NUMBER": "a number",
    "STRING": "a string",
    "PROPERTY": "a property",
}


def _where(node: Tree[Token] | Token) -> tuple[int, int]:
    if isinstance(node, Token):
        return node.line or 1, node.column or 1
    return getattr(node.meta, "line", 1), getattr(node.meta, "column", 1)


def _condition(node: Tree[Token] | Token, depth: int) -> Condition:
    if depth > SQL_MAX_DEPTH:
        raise InvalidFilter(f"nested deeper than {SQL_MAX_DEPTH} levels", *_where(node))
    if not isinstance(node, Tree):
        raise InvalidFilter(f"{str(node)!r} is not a condition", *_where(node))
    kind, children = node.data, node.children
    if kind in ("or_", "and_"):
        left, right = (_condition(child, depth + 1) for child in children)
        if kind == "or_":
            return lambda p: left(p) is True or right(p) is True
        return lambda p: left(p) is True and right(p) is True
    if kind == "not_":
        inner = _condition(children[0], depth + 1)
        return lambda p: None if (truth := inner(p)) is None else not truth
    if kind == "boolean":
        value = _literal(node)
        return lambda _p: value is True
    if kind in ("is_null", "is_not_null"):
        operand = _operand(children[0])
        want_missing = kind == "is_null"
        return lambda p: (operand(p) is None) is want_missing
    if kind == "compare":
        return _compare(children[0], str(children[1]), children[2])
    if kind in ("between", "not_between"):
        low = _compare(children[0], ">=", children[1])
        high = _compare(children[0], "<=", children[2])
        if kind == "between":
            return lambda p: _and3(low(p), high(p))
        return lambda p: None if (t := _and3(low(p), high(p))) is None else not t
    if kind in ("in_", "not_in"):
        return _membership(children[0], children[1:], kind == "in_")
    raise InvalidFilter(f"{kind} is not a condition", *_where(node))


def _and3(left: Truth, right: Truth) -> Truth:
    """SQL's AND of two truths (within BETWEEN: unknown stays unknown)."""
    if left is False or right is False:
        return False
    return None if left is None or right is None else True


def _literal(node: Tree[Token] | Token) -> Value | None:
    """The value of a literal node; None for a property."""
    if isinstance(node, Tree) and node.data == "number":
        return float(str(node.children[0]))
    if isinstance(node, Tree) and node.data == "string":
        return str(node.children[0])[1:-1].replace("''", "'")
    if isinstance(node, Tree) and node.data == "boolean":
        return str(node.children[0]).upper() == "TRUE"
    return None


def _operand(node: Tree[Token] | Token) -> Operand:
    """The property an operand reads (a literal: its text)."""
    if isinstance(node, Tree) and node.data == "property":
        name = str(node.children[0])
        return lambda p: p.get(name)
    raise InvalidFilter("IS NULL needs a property, not a literal", *_where(node))


def _as_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _as_boolean(text: str) -> bool | None:
    lowered = text.lower()
    return True if lowered == "true" else False if lowered == "false" else None


def _coerce(raw: str, like: Value) -> Value | None:
    """A property's text as the type of ``like`` (None: it is not of that type)."""
    if isinstance(like, bool):
        return _as_boolean(raw)
    if isinstance(like, float):
        return _as_number(raw)
    return raw


_ORDERINGS: Final[dict[str, Callable[[float, float], bool]]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _compare(
    left_node: Tree[Token] | Token, comparator: str, right_node: Tree[Token] | Token
) -> Condition:
    left, right = _literal(left_node), _literal(right_node)
    for node, value in ((left_node, left), (right_node, right)):
        if comparator in _ORDERINGS and value is not None and not isinstance(value, float):
            raise InvalidFilter(f"{comparator} compares numbers, not {_show(value)}", *_where(node))
    if left is not None and right is not None:
        truth = _apply(left, comparator, right)
        return lambda _p: truth
    if left is None and right is None:
        read_left, read_right = _operand(left_node), _operand(right_node)
        return lambda p: _properties(read_left(p), comparator, read_right(p))
    if left is None:
        read, literal, flipped = _operand(left_node), right, False
    else:
        read, literal, flipped = _operand(right_node), left, True
    assert literal is not None

    def compare(properties: Mapping[str, str]) -> Truth:
        raw = read(properties)
        if raw is None:
            return None
        value = _coerce(raw, literal)
        if value is None:
            return False
        return _apply(literal, comparator, value) if flipped else _apply(value, comparator, literal)

    return compare


def _properties(left: str | None, comparator: str, right: str | None) -> Truth:
    """Two properties compared: as numbers when both are, else as strings (= and <> only)."""
    if left is None or right is None:
        return None
    a, b = _as_number(left), _as_number(right)
    if a is not None and b is not None:
        return _apply(a, comparator, b)
    return False if comparator in _ORDERINGS else _apply(left, comparator, right)


def _apply(left: Value, comparator: str, right: Value) -> bool:
    if comparator == "=":
        return left == right and type(left) is type(right)
    if comparator == "<>":
        return not (left == right and type(left) is type(right))
    if isinstance(left, bool) or isinstance(right, bool):
        return False
    if not isinstance(left, float) or not isinstance(right, float):
        return False
    return _ORDERINGS[comparator](left, right)


def _membership(
    subject: Tree[Token] | Token, items: list[Tree[Token] | Token], inside: bool
) -> Condition:
    read = _operand(subject)
    values = [_literal(item) for item in items]
    strings = frozenset(v for v in values if isinstance(v, str))
    numbers = frozenset(v for v in values if isinstance(v, float) and not isinstance(v, bool))
    if len(strings) + len(numbers) != len(values):
        raise InvalidFilter("IN lists strings or numbers, not TRUE/FALSE", *_where(items[0]))

    def member(properties: Mapping[str, str]) -> Truth:
        raw = read(properties)
        if raw is None:
            return None
        number = _as_number(raw) if numbers else None
        found = raw in strings or (number is not None and number in numbers)
        return found is inside

    return member


def _show(value: Value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return f"the string {value!r}"

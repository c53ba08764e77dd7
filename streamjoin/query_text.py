"""Predicates written as text, for the command line: ``r.a < s.a AND r.b > s.b``.

Conditions are joined by ``AND`` (any case), ``&``, ``&&`` or a comma, and by ``OR`` (any
case), which binds looser than ``AND``; parentheses group, as in SQL:
``(r.a < s.a AND r.b > s.b) OR r.k = s.k`` (:class:`~streamjoin.query.Predicate`: filters
apply to the whole join, not inside one side of an OR). Each condition is one of

- ``r.X OP s.Y`` with ``OP`` one of ``<  <=  >  >=  ==  =  !=``; written the other way round
  (``s.Y OP r.X``) it is turned around; ``X OP Y`` without prefixes means ``r.X OP s.Y``
  (so ``a<a,b>b`` is ``r.a < s.a AND r.b > s.b``); either side may add or subtract a
  constant, ``r.start + 10 <= s.end`` (but ``!=``), decided on the difference
  ``s.end - r.start >= 10``;
- ``|r.X - s.Y| <= EPS`` (a band);
- ``s.Y - r.X in [LO, HI]`` (an asymmetric band);
- ``r.X OP NUMBER`` or ``s.Y OP NUMBER`` (or the number first): a filter on one side's own
  column (:class:`~streamjoin.query.Filter`).

>>> str(parse_predicate("r.start <= s.end and r.end >= s.start"))
'r.start <= s.end AND r.end >= s.start'
>>> str(parse_predicate("r.k = s.k AND (r.a < s.a OR r.b > s.b)"))
'r.k == s.k AND (r.a < s.a OR r.b > s.b)'
"""

from __future__ import annotations

import re

from streamjoin.query import (
    Filter,
    Predicate,
    band,
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
    not_equal,
)

_OPS = {
    "<": less,
    "<=": less_equal,
    ">": greater,
    ">=": greater_equal,
    "==": equal,
    "=": equal,
    "!=": not_equal,
}
_INEQUALITIES = {"<": less, "<=": less_equal, ">": greater, ">=": greater_equal}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "=": "=", "!=": "!="}
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NAME = r"[A-Za-z_]\w*"
#: the tokens around conditions: brackets, OR, and AND, &, && or a comma outside ``[lo, hi]``
#: (the keywords not part of a name such as ``r.order``)
_TOKENS = re.compile(
    r"\s*(\(|\)|(?<![\w.])or(?![\w.])|(?<![\w.])and(?![\w.])|&&?|,(?![^\[]*\]))\s*",
    re.IGNORECASE,
)
_BAND = re.compile(rf"\|\s*r\.({_NAME})\s*-\s*s\.({_NAME})\s*\|\s*<=\s*({_NUM})")
_RANGE = re.compile(rf"s\.({_NAME})\s*-\s*r\.({_NAME})\s+in\s+\[\s*({_NUM})\s*,\s*({_NUM})\s*\]")
_TERM = rf"(?:([rs])\.)?({_NAME})(?:\s*([-+])\s*({_NUM}))?"
_COMPARE = re.compile(rf"{_TERM}\s*(<=|>=|==|!=|<|>|=)\s*{_TERM}")
_FILTER = re.compile(rf"([rs])\.({_NAME})\s*(<=|>=|==|!=|<|>|=)\s*({_NUM})")
_FILTER_FLIPPED = re.compile(rf"({_NUM})\s*(<=|>=|==|!=|<|>|=)\s*([rs])\.({_NAME})")


def parse_predicate(text: str) -> Predicate:
    """The :class:`~streamjoin.query.Predicate` ``text`` writes (module docstring).

    Raises
    ------
    ValueError
        Naming the condition that could not be read, or where the brackets or an operator
        are out of place.
    """
    tokens = [t for t in _TOKENS.split(text.strip()) if t.strip()]
    if not tokens:
        raise ValueError("the query is empty; write e.g. 'r.a < s.a AND r.b > s.b'")
    parser = _Parser(tokens, text)
    pred = _as_predicate(parser.disjunction())
    if parser.at < len(tokens):
        raise ValueError(f"cannot read {text!r}: {tokens[parser.at]!r} has no opening bracket")
    return pred


class _Parser:
    """Recursive descent over the tokens: ``disjunction := conjunction (OR conjunction)*``,
    ``conjunction := factor (AND factor)*``, ``factor := ( disjunction ) | condition``."""

    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens, self.text, self.at = tokens, text, 0

    def _peek(self) -> str:
        return self.tokens[self.at].lower() if self.at < len(self.tokens) else ""

    def disjunction(self):
        out = self.conjunction()
        while self._peek() == "or":
            self.at += 1
            out = out | self.conjunction()
        return out

    def conjunction(self):
        out = self.factor()
        while self._peek() in ("and", "&", "&&", ","):
            self.at += 1
            out = out & self.factor()
        return out

    def factor(self):
        token = self._peek()
        if token == "(":
            self.at += 1
            out = self.disjunction()
            if self._peek() != ")":
                raise ValueError(f"cannot read {self.text!r}: a '(' is not closed")
            self.at += 1
            return out
        if token in ("", ")", "or", "and", "&", "&&", ","):
            where = f"before {self.tokens[self.at]!r}" if token else "at the end"
            raise ValueError(f"cannot read {self.text!r}: a condition is missing {where}")
        self.at += 1
        return _condition(self.tokens[self.at - 1].strip())


def _as_predicate(p) -> Predicate:
    if isinstance(p, Filter):
        return Predicate((), (p,))
    return p if isinstance(p, Predicate) else Predicate((p,))


def _number(text: str) -> int | float:
    """An integer literal as an int (exact beyond 2**53), anything else as a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _condition(text: str):
    if m := _FILTER.fullmatch(text):
        return Filter(m[1], m[2], "==" if m[3] == "=" else m[3], _number(m[4]))
    if m := _FILTER_FLIPPED.fullmatch(text):
        op = _FLIP[m[2]]
        return Filter(m[3], m[4], "==" if op == "=" else op, _number(m[1]))
    if m := _BAND.fullmatch(text):
        return band(m[1], float(m[3]), m[2])
    if m := _RANGE.fullmatch(text):
        return band(m[2], None, m[1], lo=float(m[3]), hi=float(m[4]))
    if m := _COMPARE.fullmatch(text):
        left, a, sign_a, num_a, op, right, b, sign_b, num_b = m.groups()
        shift_a = float(sign_a + num_a) if num_a else 0.0
        shift_b = float(sign_b + num_b) if num_b else 0.0
        sides = (left or "r", right or "s")
        if sides == ("s", "r"):
            a, b, op, shift_a, shift_b = b, a, _FLIP[op], shift_b, shift_a
        elif sides != ("r", "s"):
            raise ValueError(
                f"cannot read {text!r}: a condition compares r's attribute with s's "
                "(r.x < s.y), not two of one stream"
            )
        shift = shift_a - shift_b  # r.a + c1 OP s.b + c2  <=>  r.a + (c1 - c2) OP s.b
        if not shift:
            return _OPS[op](a, b)
        if op in ("==", "="):  # s.b - r.a == c: a band of one value
            return band(a, None, b, lo=shift, hi=shift)
        if op == "!=":
            raise ValueError(f"cannot read {text!r}: != takes no constant; write r.x != s.y")
        return _INEQUALITIES[op](a, b, shift=shift)
    raise ValueError(
        f"cannot read the condition {text!r}; write r.x < s.y (<, <=, >, >=, ==, !=), "
        "|r.x - s.y| <= eps, s.y - r.x in [lo, hi], or a filter r.x < 5"
    )

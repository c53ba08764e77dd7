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
- any other comparison of sums, differences, products and quotients of ``r.X``, ``s.Y``
  and numbers, without brackets: ``r.k + s.k < 10``, ``r.a * 2 - s.b >= r.c``, a residual
  function (:func:`~streamjoin.query.where`, :class:`TextResidual`) that reads the named
  columns of both sides.

>>> str(parse_predicate("r.start <= s.end and r.end >= s.start"))
'r.start <= s.end AND r.end >= s.start'
>>> str(parse_predicate("r.k = s.k AND (r.a < s.a OR r.b > s.b)"))
'r.k == s.k AND (r.a < s.a OR r.b > s.b)'
"""

from __future__ import annotations

import re

import numpy as np

from streamjoin.query import (
    Filter,
    Predicate,
    Residual,
    band,
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
    not_equal,
    where,
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
    if isinstance(p, Residual):
        return Predicate((), (), (), (p,))
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
    if residual := TextResidual.parse(text):
        return where(residual, residual.columns)
    raise ValueError(
        f"cannot read the condition {text!r}; write r.x < s.y (<, <=, >, >=, ==, !=), "
        "|r.x - s.y| <= eps, s.y - r.x in [lo, hi], a filter r.x < 5, or arithmetic over "
        "r.x, s.y and numbers compared (r.k + s.k < 10)"
    )


_ARITH_TOKEN = re.compile(rf"\s*(?:([rs])\.({_NAME})|({_NUM})|([-+*/]))")
_COMPARISON = re.compile(r"(<=|>=|==|!=|<|>|=)")
_NUMPY_OPS = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "=": np.equal,
    "!=": np.not_equal,
}


class TextResidual:
    """A comparison of two arithmetic expressions over ``r.X``, ``s.Y`` and numbers, read from
    text (``r.k + s.k < 10``), as the function of a :func:`~streamjoin.query.where`.

    ``*`` and ``/`` bind tighter than ``+`` and ``-``, left to right; ``/`` divides as
    floats. Integer columns and literals are computed as integers, exactly: in int64 while
    every value fits in 31 bits, else as Python integers (so no sum or product wraps around).
    """

    def __init__(self, text: str, left: list, op: str, right: list) -> None:
        self.text, self.left, self.op, self.right = text, left, op, right
        self.__name__ = text
        self.columns = tuple(dict.fromkeys(v for kind, v in left + right if kind in "rs"))

    @classmethod
    def parse(cls, text: str) -> TextResidual | None:
        """The residual ``text`` writes, or None if it is not one."""
        parts = _COMPARISON.split(text)
        if len(parts) != 3:
            return None
        left, right = cls._expression(parts[0]), cls._expression(parts[2])
        if left is None or right is None:
            return None
        if not any(kind in "rs" for kind, _ in left + right):
            return None
        return cls(text, left, parts[1], right)

    @staticmethod
    def _expression(text: str) -> list | None:
        """``[(kind, value), …]`` in the order written: ``("r"|"s", column)``,
        ``("n", number)``, ``("op", "+-*/")``, alternating operand and operator."""
        out, at, text = [], 0, text.strip()
        while at < len(text):
            m = _ARITH_TOKEN.match(text, at)
            if m is None or m.end() == at:
                return None
            if m[1]:
                out.append((m[1], m[2]))
            elif m[3]:
                out.append(("n", _number(m[3])))
            else:
                out.append(("op", m[4]))
            at = m.end()
        operands = out[0::2]
        if not out or len(out) % 2 == 0 or any(kind == "op" for kind, _ in operands):
            return None
        if any(kind != "op" for kind, _ in out[1::2]):
            return None
        return out

    def __call__(self, r, s) -> np.ndarray:
        sides = {"r": r, "s": s}
        n = len(r)

        def value(kind, v):
            if kind == "n":
                return v
            column = sides[kind][v]
            wide = len(column) and (column.max() >= 2**31 or column.min() <= -(2**31))
            if column.dtype.kind == "i" and wide:
                return column.astype(object)
            return column

        def evaluate(tokens):
            terms, signs, product = [], [], value(*tokens[0])
            for i in range(1, len(tokens), 2):
                op, operand = tokens[i][1], value(*tokens[i + 1])
                if op == "*":
                    product = product * operand
                elif op == "/":
                    product = np.true_divide(product, operand)
                else:
                    terms.append(product)
                    signs.append(op)
                    product = operand
            terms.append(product)
            total = terms[0]
            for sign, term in zip(signs, terms[1:], strict=True):
                total = total + term if sign == "+" else total - term
            return total

        kept = _NUMPY_OPS[self.op](evaluate(self.left), evaluate(self.right))
        return np.broadcast_to(np.asarray(kept, dtype=np.bool_), (n,)).copy()

    def __repr__(self) -> str:
        return f"TextResidual({self.text!r})"

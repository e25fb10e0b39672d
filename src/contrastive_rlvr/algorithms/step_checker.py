"""Exact step checker for arithmetic: a process scorer for VeriGate (:mod:`.verigate`).

Pure Python, no model: :class:`ArithmeticStepScorer` scores each reasoning
step 1.0 when its arithmetic is right and 0.0 when not, following the chain
of a left-to-right prompt such as ``5+9+3=`` (the arithmetic task's format)
or, for free text, checking every ``=`` it holds (:func:`equations_right`).
Numbers are compared exactly (fractions), never as floats.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

_NUMBER = r"\d+(?:\.\d+)?"
_TOKEN = re.compile(rf"\s*({_NUMBER}|[-+*/()])")
_INT = r"-?\d+"
_BINARY = rf"({_INT})\s*([-+*])\s*({_INT})"
_CHAIN_STEP = re.compile(rf"^\s*{_BINARY}\s*=\s*({_INT})((?:\s*[-+*]\s*{_INT}\s*=\s*{_INT})*)\s*$")
_CHAIN_LINK = re.compile(rf"\s*([-+*])\s*({_INT})\s*=\s*({_INT})")
_CHAIN_PROMPT = re.compile(rf"^\s*{_INT}(?:\s*[-+*]\s*{_INT})+\s*=\s*$")
_ARITH_CHARS = set("0123456789.+-*/() ")


def _tokens(expr: str) -> list[str]:
    """The tokens of an arithmetic expression; [] if it has none or a character that is
    not one."""
    tokens, pos = [], 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            return []
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def _evaluate(expr: str) -> Fraction | None:
    """Exact value of an arithmetic expression (+ - * / and parentheses, usual
    precedence, unary minus); None if it does not parse or divides by zero."""
    tokens, at = _tokens(expr), 0
    if not tokens:
        return None

    def peek() -> str | None:
        return tokens[at] if at < len(tokens) else None

    def take() -> str:
        nonlocal at
        at += 1
        return tokens[at - 1]

    def atom() -> Fraction:
        tok = take() if peek() is not None else ""
        if tok == "-":
            return -atom()
        if tok == "(":
            value = sum_expr()
            if take() != ")":
                raise ValueError
            return value
        if tok and tok[0].isdigit():
            return Fraction(tok)
        raise ValueError

    def product() -> Fraction:
        value = atom()
        while peek() in ("*", "/"):
            op, rhs = take(), atom()
            value = value * rhs if op == "*" else value / rhs
        return value

    def sum_expr() -> Fraction:
        value = product()
        while peek() in ("+", "-"):
            op, rhs = take(), product()
            value = value + rhs if op == "+" else value - rhs
        return value

    try:
        value = sum_expr()
    except (ValueError, IndexError, ZeroDivisionError):
        return None
    return value if at == len(tokens) else None


def _normalise_ops(text: str) -> str:
    """``×``/``·`` and an ``x`` between numbers read as ``*``, ``÷`` as ``/``,
    ``−`` as ``-``; thousands separators are not supported."""
    text = text.replace("×", "*").replace("·", "*").replace("÷", "/").replace("−", "-")
    return re.sub(r"(?<=\d)\s*[xX]\s*(?=\d)", "*", text)


def _tail_expression(text: str) -> str | None:
    """The longest arithmetic expression that ends ``text`` (ignoring trailing spaces)."""
    text = text.rstrip()
    start = len(text)
    while start > 0 and text[start - 1] in _ARITH_CHARS:
        start -= 1
    run = text[start:]
    for k in range(len(run)):
        candidate = run[k:].strip()
        if candidate and _evaluate(candidate) is not None:
            return candidate
    return None


def _head_expression(text: str) -> str | None:
    """The longest arithmetic expression that starts ``text`` (ignoring leading spaces)."""
    text = text.lstrip()
    end = 0
    while end < len(text) and text[end] in _ARITH_CHARS:
        end += 1
    run = text[:end]
    for k in range(len(run), 0, -1):
        candidate = run[:k].strip()
        if candidate and _evaluate(candidate) is not None:
            return candidate
    return None


def _leading_number(expr: str) -> Fraction | None:
    m = re.match(rf"\s*(-?\s*{_NUMBER})", expr)
    return Fraction(m.group(1).replace(" ", "")) if m else None


def equations_right(text: str) -> list[bool]:
    """Verdict on every ``=`` of ``text`` read as arithmetic (generic rule).

    ``text`` is cut at each ``=``; the expression ending the left piece is
    compared with the expression starting the right piece, so words around
    the arithmetic are ignored (``"so 5+9=14, then 14+3=17"`` has two checks,
    both right). A check is right when both sides have the same exact value,
    or in running-total notation (``14+3=17+2=19``) when the left value equals
    the first number on the right and more arithmetic follows it. An ``=`` with
    no arithmetic on one side is not a check (it gives no verdict).
    """
    pieces = _normalise_ops(text).split("=")
    verdicts = []
    for left, right in zip(pieces, pieces[1:], strict=False):
        lhs, rhs = _tail_expression(left), _head_expression(right)
        if lhs is None or rhs is None:
            continue
        value, target = _evaluate(lhs), _evaluate(rhs)
        running = _leading_number(rhs) if re.search(r"\d\s*[-+*/]", rhs) else None
        verdicts.append(value == target or (running is not None and value == running))
    return verdicts


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _prompt_terms(prompt: str) -> list[tuple[str, int]] | None:
    """``[("", t0), (op1, t1), ...]`` of a left-to-right chain prompt such as ``5+9+3=``."""
    if not _CHAIN_PROMPT.match(prompt):
        return None
    tokens = re.findall(rf"(^|[-+*])\s*({_INT})", prompt.strip()[:-1].strip())
    return [(op, int(x)) for op, x in tokens]


class ArithmeticStepScorer:
    """Exact step checker for arithmetic chains: each step scores 1.0 if right, else 0.0.

    Two rules, chosen by the prompt:

    - *Chain prompt* (``follow_prompt=True`` and the prompt is a left-to-right
      integer expression ending in ``=``, e.g. ``5+9+3+2=``): the steps must
      reduce the prompt from the left, each ``a op b = c`` with ``a op b == c``,
      ``op b`` the next term of the prompt and ``a`` the previous step's
      written ``c`` (for the first, the value of the prompt's first two terms);
      a step may hold a running chain ``14+3=17+2=19`` (two reductions) and
      must be nothing else. An error is charged to the step that makes it, not
      to later steps that carry the wrong value on correctly. This is the rule
      of the arithmetic task's ``check_steps(completion, prompt)``
      (:mod:`contrastive_rlvr.embedded.task`, ops ``+ - *``, left to right).
    - *Otherwise*: a step is right iff it holds at least one ``=`` check and
      all are right by :func:`equations_right` (free text around the
      arithmetic is allowed); a step without any check scores
      ``no_equation_score``.
    """

    def __init__(self, *, follow_prompt: bool = True, no_equation_score: float = 0.0) -> None:
        self.follow_prompt = follow_prompt
        self.no_equation_score = no_equation_score

    def __call__(self, prompt: str, steps: Sequence[str]) -> list[float]:
        terms = _prompt_terms(prompt) if self.follow_prompt else None
        if terms is None:
            return [self._generic(step) for step in steps]
        return [1.0 if ok else 0.0 for ok in self._follow(terms, steps)]

    def _generic(self, step: str) -> float:
        verdicts = equations_right(step)
        if not verdicts:
            return self.no_equation_score
        return 1.0 if all(verdicts) else 0.0

    @staticmethod
    def _follow(terms: list[tuple[str, int]], steps: Sequence[str]) -> list[bool]:
        expected_a: int | None = _apply(terms[0][1], terms[1][0], terms[1][1])
        todo = list(terms[2:])
        verdicts = []
        for step in steps:
            m = _CHAIN_STEP.match(step)
            if m is None:
                verdicts.append(False)
                expected_a = None
                todo = todo[1:]
                continue
            links = [(int(m[1]), m[2], int(m[3]), int(m[4]))]
            for op, b, c in _CHAIN_LINK.findall(m[5]):
                links.append((links[-1][3], op, int(b), int(c)))
            ok = True
            for a, op, b, c in links:
                ok = ok and bool(todo) and todo[0] == (op, b) and a == expected_a
                ok = ok and _apply(a, op, b) == c
                todo = todo[1:]
                # The next reduction starts from what this one wrote, right or wrong.
                expected_a = c
            verdicts.append(ok)
        return verdicts

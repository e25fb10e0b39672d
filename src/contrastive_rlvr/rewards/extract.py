"""Answer extraction from model completions: plain string work, no sympy.

Order of precedence (the last occurrence wins at each step, because models
often restate or correct themselves before the final answer):

1. ``<answer>...</answer>``: the content of the last tag pair (an unclosed
   final ``<answer>`` takes the rest of the text). Inside it, a ``\\boxed{}``
   wins; otherwise the tag content itself is the answer. The tags are removed
   before parsing, so ``<answer>70</answer>`` yields ``70``, not ``70<``.
2. The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces
   matched with nesting, so ``\\boxed{\\frac{1}{2}}`` yields ``\\frac{1}{2}``.
3. The last answer line, the form DAPO-Math-17k's prompts ask for ("The last
   line of your response should be of the form Answer: $Answer"): a line that
   starts with ``Answer:`` (any case, optionally ``Final Answer:``, optionally
   in Markdown emphasis or after a heading/list/quote marker: ``**Answer:** 7``,
   ``**Answer: 7**``, ``### Final answer: 7``). The answer is the rest of that
   line; when nothing follows on it, the next non-blank line (DAPO's own
   verifier reads ``Answer\\s*:\\s*(.+)``, whose ``\\s*`` crosses a line break).
   Around the answer, Markdown emphasis, one trailing period and one pair of
   math delimiters (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) are
   removed: ``Answer: $\\frac{1}{2}$.`` yields ``\\frac{1}{2}``. Only a line
   *starting* with the word counts, so an echoed instruction ("...of the form
   Answer: $Answer") or "the answer: 7" mid-sentence is not read.
   ``answer_line=False`` turns this step off.
4. The last answer stated in prose, as chat models end a solution ("So, the
   final answer is 4.", "The answer is $\\frac{1}{2}$."): the words ``answer
   is`` (or ``answer was``, ``answer =``; any case, ``final`` or not) followed
   by a number (``-1,234.5``, ``3/4``, after an optional currency sign) or by
   one math expression in delimiters (``$...$``, ``\\(...\\)``). What follows
   the number (units, a period) is ignored; a phrase followed by anything else
   ("the answer is that ...") states nothing, and the search goes on to step 5.
   ``answer_phrase=False`` turns this step off.
5. Optionally (``last_number_fallback=True``), the last number in the text
   (``-1,234.5``, ``3/4``).

Empty tags, an empty box (``within \\boxed{}`` echoed from the prompt) or a
last answer line with nothing after it count as absent: the search goes on to
the next step, not to an earlier tag, box or line.

Why the answer line is on by default and comes after tags and boxes: it is the
only way DAPO-Math-17k's completions state their answer, so the BiCC paper's
recipes (recipes/paper/) score that dataset's format with the default
``math_verify`` reward and no setting; and since it is tried only when a
completion has no ``<answer>`` and no ``\\boxed{}``, every completion that has
one of those is scored exactly as before the line was read (a completion with
both a box and an answer line is scored by its box). The only completions whose
score can change are those that stated their answer on an answer line alone,
which were counted as stating nothing.

Why the prose phrase is on by default: a chat model asked to reason step by
step and box its answer (SmolLM2-135M-Instruct, the models people try first)
often ends in prose instead ("So, the final answer is 4."); read with steps
1-3 only, every one of its completions scores 0, every group's rewards are
equal and a run learns nothing, without a word. The phrase names its answer
as plainly as an ``Answer:`` line, so it is read; the last-number fallback
guesses (a number in the last sentence of a cut-off completion is not an
answer) and stays opt-in. Training (``train``'s ``--answer_phrase``,
``--answer_line``, ``--last_number_fallback``) and ``eval`` (the same
options) read answers with these same steps and defaults
(:class:`AnswerReading`).

Before extraction, and for gold answers in :func:`normalize_answer`, other
Unicode spellings of ASCII are mapped to it (:func:`normalize_unicode`):
every decimal digit (``１２``, Arabic-Indic ``١٢``, Devanagari ``१२`` are
``12``), the full-width forms of ASCII (``１／２`` is ``1/2``), the Arabic
decimal and thousands separators, and invisible format characters (zero-width
space, joiners, direction marks, byte-order mark, soft hyphen) are removed,
so ``1\\u200b2`` is ``12``. Nothing else changes: ``x²`` and ``½`` stay as
written (mapping them would need LaTeX, not a character table).

Extraction runs in the calling process; only math-verify's parsing and
comparison run in the worker pool.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
# A number as the last-number fallback sees it: optional sign, digits with
# optional thousands commas, optional decimals, optional "/denominator".
# An answer line (module doc, step 3): at a line start, optional list/heading/quote marks
# and emphasis, optional "final", the word "answer" (any case), optional emphasis, ":",
# optional closing emphasis. What follows on the line is the answer.
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_\-]*(?:final[ \t]+)?answer[ \t]*[*_]*[ \t]*:[ \t]*[*_]*",
    re.IGNORECASE | re.MULTILINE,
)
# Math delimiters around a stated answer, the longer "$$" before "$".
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
# A prose statement of the answer (module doc, step 4): "answer is", "answer was",
# "answer =" anywhere in a sentence, "final" or not ("the answer: 7" mid-sentence is
# not read, as for the answer line: an echoed instruction reads so).
_ANSWER_PHRASE = re.compile(r"\banswer\s*(?:is|was|=)[ \t]*:?[ \t]*[*_]*", re.IGNORECASE)
# What a phrase's answer may be: one delimited math expression, or a number after an
# optional currency sign (the thousands commas of a number are kept and removed later).
_PHRASE_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$|\\\((.+?)\\\)")
_PHRASE_NUMBER = re.compile(r"[$\u00a3\u20ac]?\s*(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)(?![\d/])")


# Full-width forms U+FF01..U+FF5E are ASCII U+0021..U+007E shifted by this much.
_FULLWIDTH_FIRST, _FULLWIDTH_LAST, _FULLWIDTH_SHIFT = 0xFF01, 0xFF5E, 0xFEE0
_SPECIAL_FORMS = {
    "\u3000": " ",  # ideographic space
    "\u066b": ".",  # Arabic decimal separator
    "\u066c": ",",  # Arabic thousands separator
}


def _ascii_form(char: str) -> str:
    """The ASCII spelling of one non-ASCII character, "" for a format character, else itself."""
    if unicodedata.category(char) == "Cf":  # zero-width space, joiners, marks, BOM
        return ""
    digit = unicodedata.decimal(char, None)  # every Unicode decimal digit (category Nd)
    if digit is not None:
        return str(digit)
    if _FULLWIDTH_FIRST <= ord(char) <= _FULLWIDTH_LAST:
        return chr(ord(char) - _FULLWIDTH_SHIFT)
    return _SPECIAL_FORMS.get(char, char)


class _AsciiTable(dict):
    """A ``str.translate`` table filled on first sight of each code point.

    Translating through a dict runs in C once a character has been seen,
    about 4x faster than a regex substitution calling Python per character
    (0.5 us per character of CJK text), and it holds only characters met.
    """

    def __missing__(self, code: int) -> str:
        self[code] = _ascii_form(chr(code))
        return self[code]


_ASCII_TABLE = _AsciiTable()


def normalize_unicode(text: str) -> str:
    """``text`` with other Unicode spellings of digits and ASCII mapped to ASCII (module doc).

    ``"１２" -> "12"``, ``"١٢" -> "12"``, ``"1\\u200b2" -> "12"``, ``"１／２" -> "1/2"``;
    ASCII text is returned as is.
    """
    if text.isascii():
        return text
    return text.translate(_ASCII_TABLE)


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The text of a completion given as a string or as chat messages.

    TRL passes conversational completions as ``[{"role": "assistant",
    "content": "..."}]``; the assistant contents are joined.
    """
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        if not isinstance(message, Mapping) or "content" not in message:
            raise ValueError(
                f"a chat completion must be a list of {{'role', 'content'}} dicts, got {message!r}"
            )
        if message.get("role", "assistant") == "assistant":
            content = message["content"]
            parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with nested braces, else None.

    ``\\boxed 5`` (no braces) yields ``5``. An unbalanced last box (the
    completion was cut off) yields None rather than an earlier box.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start == -1:
        return None
    cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    rest = text[start + len(cmd) :]
    if rest.lstrip(" ").startswith("{"):
        return _braced(rest, rest.index("{"))
    m = re.match(r" +([^\s$]+)", rest)
    return m.group(1) if m else None


def _braced(text: str, open_index: int) -> str | None:
    """The text between ``text[open_index] == "{"`` and its matching ``}``, else None.

    ``\\{`` and ``\\}`` are literal braces (sets such as ``\\{1, 2\\}``) and do not nest.
    """
    depth = 0
    for j in range(open_index, len(text)):
        if j > open_index and text[j - 1] == "\\":
            continue
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : j].strip()
    return None


def answer_tag(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` (or of a final unclosed ``<answer>``)."""
    start = text.rfind(_ANSWER_OPEN)
    if start == -1:
        return None
    body = text[start + len(_ANSWER_OPEN) :]
    end = body.find(_ANSWER_CLOSE)
    return (body if end == -1 else body[:end]).strip()


def last_answer_line(text: str) -> str | None:
    """The answer on the last ``Answer: X`` line (module doc, step 3), else None.

    ``"so 7.\\nAnswer: 7" -> "7"``, ``"**Answer:** $\\frac{1}{2}$" -> "\\frac{1}{2}"``;
    a last ``Answer:`` with nothing after it (nor on a later line) yields None.
    """
    matches = list(_ANSWER_LINE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    line, _, after = rest.partition("\n")
    if not _clean_stated(line):  # "Answer:" alone: the answer is on the next non-blank line
        line = next((ln for ln in after.split("\n") if ln.strip()), "")
    return _clean_stated(line) or None


def _clean_stated(value: str) -> str:
    """An answer line's value without Markdown emphasis, a final period or math delimiters."""
    value = value.strip().strip("*").strip()
    if value.endswith("."):
        value = value[:-1].strip().strip("*").strip()
    for left, right in _MATH_DELIMITERS:
        if value.startswith(left) and value.endswith(right) and len(value) >= len(left + right):
            return value[len(left) : len(value) - len(right)].strip()
    return value


def last_answer_phrase(text: str) -> str | None:
    """The answer of the last prose statement "... answer is X" (module doc, step 4).

    ``"So, the final answer is 4." -> "4"``, ``"The answer is $\\frac{1}{2}$." ->
    "\\frac{1}{2}"``, ``"the answer is $1,200." -> "1200"``; the last phrase followed by
    neither a number nor a delimited expression yields None (not an earlier phrase).
    """
    matches = list(_ANSWER_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    math = _PHRASE_MATH.match(rest)
    if math:
        return next(g for g in math.groups() if g is not None).strip() or None
    number = _PHRASE_NUMBER.match(rest)
    return number.group(1).replace(",", "") if number else None


def last_number(text: str) -> str | None:
    """The last number in ``text`` (commas and a trailing period stripped), else None."""
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    return matches[-1].replace(",", "").rstrip(".")


def extract_answer(
    text: str,
    *,
    last_number_fallback: bool = False,
    answer_line: bool = True,
    answer_phrase: bool = True,
) -> str | None:
    """The final answer in a completion, or None if it states none (see the module doc).

    ``answer_line=False`` skips step 3 (the ``Answer: X`` line), ``answer_phrase=False``
    step 4 (the prose "the answer is X").
    """
    text = normalize_unicode(text)
    # An empty tag pair or box ("within \\boxed{}." copied from the prompt)
    # states nothing, so the search goes on as if it were absent.
    tagged = answer_tag(text)
    if tagged:
        return last_boxed(tagged) or tagged
    boxed = last_boxed(text)
    if boxed:
        return boxed
    if answer_line:
        stated = last_answer_line(text)
        if stated:
            return stated
    if answer_phrase:
        phrased = last_answer_phrase(text)
        if phrased:
            return phrased
    if last_number_fallback:
        return last_number(text)
    return None


@dataclass(frozen=True)
class AnswerReading:
    """How completions' answers are read (module doc): the options of
    :func:`extract_answer` that ``train`` and ``eval`` both take, under the same names and
    with these same defaults."""

    answer_line: bool = True
    answer_phrase: bool = True
    last_number_fallback: bool = False

    def formats(self) -> str:
        """The forms read, in precedence order, as one phrase for messages."""
        forms = ["<answer>...</answer>", "\\boxed{...}"]
        if self.answer_line:
            forms.append("an 'Answer: X' line")
        if self.answer_phrase:
            forms.append("'the answer is X' in prose")
        if self.last_number_fallback:
            forms.append("the last number")
        return ", ".join(forms[:-1]) + " or " + forms[-1]

    def how_to_widen(self) -> str:
        """What to set to read more forms (empty when every form is read)."""
        off = [f"--{name} true" for name in _READING_ORDER if not getattr(self, name)]
        if not off:
            return ""
        return "set " + " or ".join(off) + ", or instruct the model to box its answer"


#: The fields of :class:`AnswerReading`, widest-reaching last.
_READING_ORDER = ("answer_line", "answer_phrase", "last_number_fallback")
READING_FIELDS: tuple[str, ...] = _READING_ORDER


def normalize_answer(value: Any, *, field: str = "answer", where: str = "") -> str:
    """A gold answer as a string: ``27.0 -> "27"``, ``70 -> "70"``, strings stripped.

    Strings also go through :func:`normalize_unicode` (``"１２" -> "12"``).

    Benchmark files store answers as LaTeX strings, floats or ints; math-verify
    wants strings. ``where`` (e.g. ``"math500.jsonl line 3"``) prefixes errors.
    """
    prefix = f"{where}: " if where else ""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{prefix}field {field!r} must be a string or a number, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{prefix}field {field!r} is not a finite number: {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        text = normalize_unicode(value).strip()
        if not text:
            raise ValueError(f"{prefix}field {field!r} is empty")
        return text
    raise ValueError(
        f"{prefix}field {field!r} must be a string or a number, got {type(value).__name__}"
    )

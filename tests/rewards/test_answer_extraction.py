"""Answer extraction and gold-answer normalisation: pure string work, no worker pool."""

import pytest

from contrastive_rlvr.rewards import (
    completion_text,
    extract_answer,
    has_format,
    last_boxed,
    last_number,
    normalize_answer,
    normalize_unicode,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is \\boxed{42}.", "42"),
        # nested braces: the whole fraction, not "\\frac{1"
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        # the last box wins (models revise themselves)
        ("first \\boxed{3}, no wait: \\boxed{4}", "4"),
        # escaped braces of a set do not close the box
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{\\text{(C)}}", "\\text{(C)}"),
        ("\\fbox{7}", "7"),
        ("\\boxed 5$", "5"),
        # cut off inside the last box: no answer rather than an earlier one
        ("\\boxed{1} then \\boxed{\\frac{2}{", None),
        ("no box here", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # tags touching the number: unwrapped, so "70" and not "70<" or ">70"
        ("<answer>70</answer>", "70"),
        ("reasoning...<answer> 1{,}000 </answer>", "1{,}000"),
        # a box inside the tags wins over the surrounding words
        ("<answer>The answer is \\boxed{\\frac{3}{4}}</answer>", "\\frac{3}{4}"),
        # tags take precedence over a box outside them
        ("\\boxed{1} <answer>2</answer>", "2"),
        # the last pair of tags
        ("<answer>1</answer> hmm <answer>-3</answer>", "-3"),
        # an unclosed final tag takes the rest
        ("<answer>12", "12"),
        ("<answer></answer>", None),
        ("plain \\boxed{9}", "9"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_last_number_fallback_only_when_asked():
    text = "She pays 3 * 6 = 18 dollars, so 1,250.5 in total."
    assert extract_answer(text) is None
    assert extract_answer(text, last_number_fallback=True) == "1250.5"
    # an empty box (the prompt's "within \boxed{}" echoed) does not hide the number
    echoed = "The answer is 120. Put it within \\boxed{}."
    assert extract_answer(echoed, last_number_fallback=True) == "120"
    # ...and "The answer is 120" states it in prose (step 4, on by default)
    assert extract_answer(echoed) == "120"
    assert extract_answer(echoed, answer_phrase=False) is None
    # a boxed answer beats the fallback
    assert extract_answer("\\boxed{7} and 8", last_number_fallback=True) == "7"
    assert last_number("x is -3/4.") == "-3/4"
    assert last_number("no digits") is None


def test_completion_text_from_chat_messages():
    msgs = [{"role": "assistant", "content": "so \\boxed{5}"}]
    assert completion_text(msgs) == "so \\boxed{5}"
    assert completion_text("plain") == "plain"
    with pytest.raises(ValueError, match="role"):
        completion_text([{"text": "no content key"}])


@pytest.mark.parametrize(
    ("value", "expected"),
    [(27.0, "27"), (70, "70"), (" \\frac{14}{3} ", "\\frac{14}{3}"), (0.5, "0.5"), (-3.0, "-3")],
)
def test_normalize_answer(value, expected):
    assert normalize_answer(value) == expected


@pytest.mark.parametrize("bad", [None, True, "", "   ", float("nan"), [1]])
def test_normalize_answer_rejects(bad):
    with pytest.raises(ValueError, match="field 'answer'"):
        normalize_answer(bad, where="f.jsonl line 3")


@pytest.mark.parametrize(
    ("text", "style", "expected"),
    [
        ("so \\boxed{3}", "boxed", True),
        ("so 3", "boxed", False),
        ("<answer>3</answer>", "answer_tag", True),
        ("<answer>3", "answer_tag", False),
        ("<think>a</think>\n<answer>3</answer>", "think_answer", True),
        ("<think>a</think> extra <answer>3</answer>", "think_answer", False),
        ("<think>a</think><answer> </answer>", "think_answer", False),
    ],
)
def test_has_format(text, style, expected):
    assert has_format(text, style) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\uff11\uff12", "12"),  # full-width digits
        ("\u0661\u0662", "12"),  # Arabic-Indic
        ("\u06f1\u06f2", "12"),  # extended Arabic-Indic (Persian, Urdu)
        ("\u0967\u0968", "12"),  # Devanagari
        ("\uff11" + "2", "12"),  # mixed widths
        ("1\u200b2", "12"),  # zero-width space
        ("1\u200c2\u200d", "12"),  # zero-width non-joiner and joiner
        ("\u200e12\u200f", "12"),  # left-to-right and right-to-left marks
        ("\ufeff12\u2060", "12"),  # byte-order mark, word joiner
        ("1\u00ad2", "12"),  # soft hyphen
        ("\uff11\uff12\uff0e\uff15", "12.5"),  # full-width full stop
        ("\uff11\uff0f\uff12", "1/2"),  # full-width solidus
        ("\uff0d\uff13", "-3"),  # full-width hyphen-minus
        ("\u0661\u0662\u066b\u0665", "12.5"),  # Arabic decimal separator
        ("\u0661\u066c\u0660\u0660\u0660", "1,000"),  # Arabic thousands separator
        # left alone: not another spelling of an ASCII character
        ("x\u00b2", "x\u00b2"),
        ("\u00bd", "\u00bd"),
        ("\\pi r^2", "\\pi r^2"),
        ("\u03c0", "\u03c0"),
    ],
)
def test_normalize_unicode(text, expected):
    assert normalize_unicode(text) == expected


def test_unicode_digits_in_extraction_and_gold():
    assert extract_answer("\\boxed{\uff11\uff12}") == "12"
    assert extract_answer("<answer>\u0661\u0662</answer>") == "12"
    assert extract_answer("so 1\u200b2 apples", last_number_fallback=True) == "12"
    # the last number, Arabic-Indic: one number, not the digits of two
    assert extract_answer("\u0663 + \u0669 = \u0661\u0662", last_number_fallback=True) == "12"
    assert normalize_answer(" \uff11\uff12 ") == "12"


# -- the answer line (DAPO-Math-17k's "The last line ... of the form Answer: $Answer") ----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 + 4 = 7, so\nAnswer: 7", "7"),
        # the math delimiters DAPO's "$Answer" invites are removed, LaTeX kept
        ("Half of it.\nAnswer: $\\frac{1}{2}$", "\\frac{1}{2}"),
        ("Answer: \\(x + 1\\)", "x + 1"),
        ("Answer: $$12$$.", "12"),
        # the last answer line wins (the model corrected itself)
        ("Answer: 3\nNo, I dropped a sign.\nAnswer: -3", "-3"),
        # any case; "Final answer" too
        ("ANSWER: 7", "7"),
        ("answer: 7", "7"),
        ("Final Answer: 12", "12"),
        # Markdown emphasis and list / heading marks around the word or the value
        ("**Answer:** 7", "7"),
        ("**Answer: 7**", "7"),
        ("**Answer**: 7", "7"),
        ("Answer: **7**.", "7"),
        ("### Answer: 7", "7"),
        ("- Answer: 7", "7"),
        # the value is the rest of the line: a decimal keeps its point
        ("Answer: 7.5\nThat is all.", "7.5"),
        # "Answer:" alone on its line: the answer is on the next non-blank line
        ("Answer:\n\n  7  ", "7"),
        # only a line that starts with the word: an echoed instruction is no answer
        ("The last line should be of the form Answer: $Answer", None),
        ("so the answer: 7", None),
    ],
)
def test_the_last_answer_line_is_read(text, expected):
    assert extract_answer(text) == expected


def test_an_empty_last_answer_line_states_nothing():
    assert extract_answer("I am not sure.\nAnswer:") is None
    assert extract_answer("Answer: $ $") is None
    # not an earlier line either: the last one stated nothing
    assert extract_answer("Answer: 4\nHmm.\nAnswer:   ") is None
    # and the last-number fallback, when asked for, goes on as after an empty box
    assert extract_answer("3 + 4 = 7.\nAnswer:", last_number_fallback=True) == "7"


def test_tags_and_boxes_win_over_an_answer_line_wherever_it_is():
    # a completion with a box or tags is scored as before the line was read
    assert extract_answer("\\boxed{5}\nAnswer: 7") == "5"
    assert extract_answer("Answer: 7\nso \\boxed{5}") == "5"
    assert extract_answer("Answer: \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_answer("<answer>2</answer>\nAnswer: 3") == "2"
    # an empty box (echoed from the prompt) does not hide the line
    assert extract_answer("Put it within \\boxed{}.\nAnswer: 9") == "9"
    # the line beats the last-number fallback
    assert extract_answer("3 + 4 = 7 apples\nAnswer: 8", last_number_fallback=True) == "8"


def test_answer_line_false_reads_tags_and_boxes_only():
    assert extract_answer("Answer: 7", answer_line=False) is None
    assert extract_answer("Answer: 7", answer_line=False, last_number_fallback=True) == "7"
    assert extract_answer("\\boxed{5}\nAnswer: 7", answer_line=False) == "5"

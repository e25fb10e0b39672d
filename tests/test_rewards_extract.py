"""Answer extraction and gold-answer normalisation: pure string work, no worker pool."""

import pytest

from contrastive_rlvr.rewards import (
    completion_text,
    extract_answer,
    has_format,
    last_boxed,
    last_number,
    normalize_answer,
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
    assert extract_answer(echoed) is None
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

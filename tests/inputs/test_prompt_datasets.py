"""Prompt datasets: field mapping, GSM8K answers, malformed rows, skip-bad-rows."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contrastive_rlvr.data import gsm8k_final_answer, load_prompts


def write_jsonl(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_field_mapping_problem_question_prompt(tmp_path):
    f = write_jsonl(
        tmp_path / "p.jsonl",
        [
            json.dumps({"problem": "P1", "answer": "\\frac{1}{2}"}),
            json.dumps({"question": "Q2", "answer": 3.0}),
            json.dumps({"prompt": "R3", "final_answer": 4}),
            "",  # blank lines are not rows
        ],
    )
    loaded = load_prompts(f)
    assert loaded.dataset["prompt"] == ["P1", "Q2", "R3"]
    assert loaded.dataset["answer"] == ["\\frac{1}{2}", "3", "4"]
    assert loaded.dataset["id"] == ["0", "1", "2"]
    assert loaded.skipped == 0


def test_explicit_fields_and_chat_prompts(tmp_path):
    msgs = [{"role": "user", "content": "hi"}]
    f = write_jsonl(tmp_path / "p.jsonl", [json.dumps({"q": msgs, "sol": "9", "uid": "a"})])
    ds = load_prompts(f, prompt_field="q", answer_field="sol", id_field="uid").dataset
    assert ds["prompt"] == [msgs] and ds["answer"] == ["9"] and ds["id"] == ["a"]


def test_gsm8k_answers():
    assert gsm8k_final_answer("3 + 4 = <<3+4=7>>7\n#### 7") == "7"
    # thousands separators go, decimals and signs stay
    assert gsm8k_final_answer("...\n#### 1,250") == "1250"
    assert gsm8k_final_answer("#### -2.5") == "-2.5"
    assert gsm8k_final_answer("no marker") is None


def test_gsm8k_format_modes(tmp_path):
    f = write_jsonl(
        tmp_path / "g.jsonl",
        [json.dumps({"question": "q", "answer": "so 2+2=4\n#### 4"})],
    )
    assert load_prompts(f).dataset["answer"] == ["4"]  # auto
    assert load_prompts(f, answer_format="plain").dataset["answer"] == ["so 2+2=4\n#### 4"]
    g = write_jsonl(tmp_path / "h.jsonl", [json.dumps({"question": "q", "answer": "4"})])
    with pytest.raises(ValueError, match=r"h\.jsonl line 1: field 'answer' has no '####"):
        load_prompts(g, answer_format="gsm8k")


BAD_ROWS = [
    # (line content, what the error must name)
    ('{"problem": "ok", "answer": "1"}', None),
    ('{"problem": "x", "answer": ', "line 2: invalid JSON"),
    ('{"problem": "no answer"}', "line 3: missing field 'answer'"),
    ('{"answer": "1"}', "line 4: missing field 'prompt'"),
    ('{"problem": "", "answer": "1"}', "line 5: field 'problem' is empty"),
    ('{"problem": "p", "answer": null}', "line 6: field 'answer' must be a string or a number"),
    ('["a", "list"]', "line 7: expected a JSON object"),
    ('{"problem": 5, "answer": "1"}', "line 8: field 'problem' must be a string"),
    ('{"problem": "fine", "answer": 2}', None),
]


@pytest.mark.parametrize("bad_line", [i for i, (_, msg) in enumerate(BAD_ROWS) if msg])
def test_malformed_row_error_names_file_line_field(tmp_path, bad_line):
    lines = [BAD_ROWS[0][0], BAD_ROWS[bad_line][0]]
    f = write_jsonl(tmp_path / "data.jsonl", lines)
    expected = BAD_ROWS[bad_line][1].replace(f"line {bad_line + 1}", "line 2")
    with pytest.raises(ValueError) as err:
        load_prompts(f)
    assert f"{f} {expected}" in str(err.value)


def test_skip_bad_rows_counts_and_logs(tmp_path, caplog):
    f = write_jsonl(tmp_path / "data.jsonl", [line for line, _ in BAD_ROWS])
    with caplog.at_level("WARNING"):
        loaded = load_prompts(f, skip_bad_rows=True)
    # 9 rows, 2 good: 7 skipped
    assert loaded.skipped == 7
    assert loaded.dataset["prompt"] == ["ok", "fine"]
    assert loaded.dataset["id"] == ["0", "8"]  # ids keep the row position
    assert "skipped 7 bad rows" in caplog.text


def test_parquet_rows_are_named_by_row(tmp_path):
    path = tmp_path / "d.parquet"
    table = pa.table({"question": ["a", "b", "c"], "answer": ["1", None, "3"]})
    pq.write_table(table, path)
    with pytest.raises(ValueError, match=r"d\.parquet row 2: field 'answer'"):
        load_prompts(path)
    loaded = load_prompts(path, skip_bad_rows=True)
    assert loaded.skipped == 1 and loaded.dataset["answer"] == ["1", "3"]


def test_limit_and_missing_sources(tmp_path, monkeypatch):
    rows = [json.dumps({"problem": str(i), "answer": i}) for i in range(5)]
    f = write_jsonl(tmp_path / "p.jsonl", rows)
    assert load_prompts(f, limit=2).dataset["prompt"] == ["0", "1"]
    with pytest.raises(ValueError, match="file not found"):
        load_prompts(tmp_path / "missing.jsonl")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        load_prompts("someone/some-dataset")
    with pytest.raises(ValueError, match="unsupported file type"):
        (tmp_path / "x.txt").write_text("a,b\n")
        load_prompts(tmp_path / "x.txt")


# ---------------------------------------------------------------- encodings

GOOD = b'{"problem": "P", "answer": "1"}\n'


def test_invalid_utf8_names_file_line_and_byte(tmp_path):
    f = tmp_path / "bad.jsonl"
    # line 2 is Latin-1: "caf\xe9" is not UTF-8 ("é" is 0xc3 0xa9 there)
    f.write_bytes(GOOD + b'{"problem": "caf\xe9", "answer": "2"}\n' + GOOD)
    with pytest.raises(ValueError) as err:
        load_prompts(f)
    # 0xe9 follows the 16 characters of '{"problem": "caf': column 17
    assert str(err.value) == (
        f"{f} line 2: invalid UTF-8 (byte 0xe9 at column 17); save the file as UTF-8"
    )


def test_invalid_utf8_column_counts_characters(tmp_path):
    f = tmp_path / "bad.jsonl"
    # "é" (2 bytes) is one column; the lone continuation byte 0x80 comes after
    # '{"problem": "é' = 14 characters: column 15
    f.write_bytes('{"problem": "é'.encode() + b'\x80", "answer": "1"}\n')
    with pytest.raises(ValueError, match=r"line 1: invalid UTF-8 \(byte 0x80 at column 15\)"):
        load_prompts(f)


def test_skip_bad_rows_skips_and_counts_invalid_utf8(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(GOOD + b'{"problem": "\xff", "answer": "2"}\n' + GOOD.replace(b"P", b"Q"))
    loaded = load_prompts(f, skip_bad_rows=True)
    assert loaded.skipped == 1
    assert loaded.dataset["prompt"] == ["P", "Q"]
    assert loaded.dataset["id"] == ["0", "2"]


def test_utf16_file_is_named_as_such(tmp_path):
    f = tmp_path / "u16.jsonl"
    f.write_bytes(GOOD.decode().encode("utf-16"))  # with its byte-order mark
    with pytest.raises(ValueError, match="line 1: invalid UTF-8 .* UTF-16 byte-order mark"):
        load_prompts(f)


@pytest.mark.parametrize("skip_bad_rows", [False, True])
def test_byte_order_mark_is_accepted(tmp_path, skip_bad_rows):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + GOOD + GOOD.replace(b"P", b"Q"))
    loaded = load_prompts(f, skip_bad_rows=skip_bad_rows)
    # line 1 is a row like any other: parsed, not dropped
    assert loaded.skipped == 0
    assert loaded.dataset["prompt"] == ["P", "Q"]
    assert loaded.dataset["answer"] == ["1", "1"]


def test_json_file_encodings(tmp_path):
    f = tmp_path / "bom.json"
    f.write_bytes(b'\xef\xbb\xbf[{"problem": "P", "answer": "1"}]')
    assert load_prompts(f).dataset["prompt"] == ["P"]
    g = tmp_path / "bad.json"
    g.write_bytes(b'[\n{"problem": "P", "answer": "1"},\n{"problem": "\xff", "answer": "2"}\n]')
    # A .json file is one document: no row to skip, an error even with skip_bad_rows.
    with pytest.raises(ValueError) as err:
        load_prompts(g, skip_bad_rows=True)
    assert str(err.value) == (
        f"{g} line 3: invalid UTF-8 (byte 0xff at column 14); save the file as UTF-8"
    )


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "user", "content": "1+1="}, {"role": "assistant", "content": None}],
         "line 2: field 'prompt' message 2 (role assistant) has content null (a tool-call turn?)"),
        ([{"role": "system", "content": "Be brief."}],
         "line 2: field 'prompt' holds no user message (roles: system)"),
    ],
)  # fmt: skip
def test_a_tool_call_turn_or_a_system_only_prompt_names_the_row(tmp_path, messages, message):
    path = tmp_path / "chat.jsonl"
    good = {"prompt": [{"role": "user", "content": "2+2="}], "answer": "4"}
    bad = {"prompt": messages, "answer": "2"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_prompts(path)


def test_an_integer_beyond_64_bits_in_an_extra_column_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"prompt": "1+1=", "answer": "2", "big": 1}, {"prompt": "2+2=", "answer": "4",
                                                          "big": 2**80}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"line 2: column 'big' holds the integer \d+, beyond 64"):
        load_prompts(path)

"""The embedded default's character tokenizer: ids by hand, round trips, padding, save/reload."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from contrastive_rlvr.algorithms import BiCCTemplate
from contrastive_rlvr.embedded.tokenizer import (
    bicc_phrases,
    build_char_tokenizer,
    load_char_tokenizer,
)

# Ids: <pad>=0, <bos>=1, <eos>=2, <unk>=3, then printable ASCII from the space
# (id 4) in code-point order, so a character c has id 4 + ord(c) - 32, and
# the newline comes last: 4 + 95 = 99.
PAD, BOS, EOS, UNK = 0, 1, 2, 3


def char_id(c: str) -> int:
    return 99 if c == "\n" else 4 + ord(c) - 32


def test_vocabulary_and_special_ids():
    tok = build_char_tokenizer()
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert len(tok) == 4 + 95 + 1  # specials + printable ASCII + newline
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (
        PAD,
        BOS,
        EOS,
        UNK,
    )
    assert tok.padding_side == "left"


def test_encode_by_hand():
    tok = build_char_tokenizer()
    # '5' = 4 + 53 - 32 = 25, '+' = 4 + 43 - 32 = 15, '9' = 29, '=' = 4 + 61 - 32 = 33;
    # special tokens on: <bos> first (as TRL encodes plain-text prompts), no <eos>.
    assert tok("5+9=")["input_ids"] == [BOS, 25, 15, 29, 33]
    assert tok("5+9=", add_special_tokens=False)["input_ids"] == [25, 15, 29, 33]
    # Newline, space and letters: 'A' = 4 + 65 - 32 = 37, ' ' = 4, 'z' = 4 + 122 - 32 = 94.
    assert tok("A z\n", add_special_tokens=False)["input_ids"] == [37, 4, 94, 99]
    assert [char_id(c) for c in "A z\n"] == [37, 4, 94, 99]


def test_unknown_character_is_unk_and_decoding_skips_specials():
    tok = build_char_tokenizer()
    ids = tok("a\u00e9b", add_special_tokens=False)["input_ids"]
    assert ids == [char_id("a"), UNK, char_id("b")]
    assert tok.decode([BOS, *ids, EOS, PAD], skip_special_tokens=True) == "ab"


def test_bicc_framing_round_trips_one_token_per_character():
    tok = build_char_tokenizer()
    t = BiCCTemplate()
    text = t.header_correct + t.item_prefix.format(index=1) + "14+3=17" + t.item_suffix + t.footer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert UNK not in ids
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_left_padding_in_a_batch():
    tok = build_char_tokenizer()
    batch = tok(["1=", "12="], padding=True, return_tensors="pt")
    # "1=" is <bos> 1 = (3 tokens), "12=" is 4: one pad on the left of row 0.
    expected = [[PAD, BOS, char_id("1"), char_id("=")], [BOS, char_id("1"), char_id("2"), 33]]
    assert batch["input_ids"].tolist() == expected
    assert torch.equal(batch["attention_mask"], torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))


def test_save_and_reload_restores_left_padding(tmp_path):
    tok = build_char_tokenizer()
    tok.padding_side = "right"  # as a reload may come back
    tok.save_pretrained(tmp_path)
    back = load_char_tokenizer(tmp_path)
    assert back.padding_side == "left"
    text = "Attempt 1: 14+3=17\n"
    assert back(text)["input_ids"] == build_char_tokenizer()(text)["input_ids"]
    assert (back.pad_token_id, back.bos_token_id, back.eos_token_id) == (PAD, BOS, EOS)


def test_load_from_a_directory_without_tokenizer_raises(tmp_path):
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_char_tokenizer(tmp_path)


def test_phrases_become_single_tokens():
    header = "\nCorrect attempts at this problem:\n"
    tok = build_char_tokenizer([header])
    assert len(tok) == 101
    ids = tok(header + "7", add_special_tokens=False)["input_ids"]
    assert ids == [100, char_id("7")]
    assert tok.decode(ids) == header + "7"
    with pytest.raises(ValueError, match="at least 2 characters"):
        build_char_tokenizer(["x"])


def test_bicc_phrases_shrink_the_framing_and_survive_reload(tmp_path):
    t = BiCCTemplate()
    tok = build_char_tokenizer(bicc_phrases(t, max_items=8))
    # Two headers, the footer and 8 item prefixes ("\n" alone stays a character).
    assert len(tok) == 100 + 2 + 1 + 8
    tok.save_pretrained(tmp_path)
    back = load_char_tokenizer(tmp_path)
    enc = t.encode(lambda s: back(s, add_special_tokens=False)["input_ids"], 8)
    # One token per piece instead of 35, 37, 14 and 11 characters.
    assert (len(enc.header_correct), len(enc.header_wrong), len(enc.footer)) == (1, 1, 1)
    assert [len(p) for p in enc.item_prefixes] == [1] * 8
    text = t.header_wrong + t.item_prefix.format(index=2) + "14+3=18\n" + t.footer
    assert back.decode(back(text)["input_ids"], skip_special_tokens=True) == text

"""A character-level tokenizer for the embedded default task, built offline.

One token per character: the four specials, every printable ASCII character
(space through ``~``: digits, both cases of letters, all punctuation) and the
newline, so prompts, worked chains and the framing text BiCC puts around the
opposite completions ("\\nCorrect attempts at this problem:\\nAttempt 1: ...")
all encode without unknowns. Any other character maps to ``<unk>``.

The result is a real :class:`transformers.PreTrainedTokenizerFast` (built with
the ``tokenizers`` library, nothing downloaded): ``save_pretrained`` writes it
and :func:`load_char_tokenizer` reads it back. Encoding with special tokens
(the default, and what TRL's ``GRPOTrainer`` does with plain-text prompts)
prepends ``<bos>``; ``<eos>`` ends completions; ``<pad>`` is its own token.

Padding is on the left, as batched generation needs. A reloaded tokenizer may
come back padding on the right, so :func:`load_char_tokenizer` sets it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from ..algorithms import BiCCTemplate

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
#: Printable ASCII (space .. ``~``, 95 characters) and the newline.
CHARACTERS: str = "".join(chr(c) for c in range(32, 127)) + "\n"
# Real context length is set on the model; this only silences transformers'
# "sequence longer than the model" heuristics for the tokenizer alone.
MODEL_MAX_LENGTH = 1 << 20


def build_char_tokenizer(phrases: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """The character-level tokenizer, left padding, ``<bos>`` prepended on encode.

    Args:
        phrases: optional multi-character strings that each become ONE token
            (e.g. BiCC's template headers, so that framing text does not eat
            the context budget one character at a time). Empty by default:
            pure character level. A phrase is matched wherever it occurs in
            the text, before the split into characters.
    Returns:
        a tokenizer with ``len(SPECIAL_TOKENS) + len(CHARACTERS) + len(phrases)``
        tokens (100 with no phrases), ids in that order.
    """
    for i, phrase in enumerate(phrases):
        if len(phrase) < 2:
            raise ValueError(f"phrases[{i}] = {phrase!r}: a phrase needs at least 2 characters")
    if len(set(phrases)) != len(phrases):
        raise ValueError(f"phrases has duplicates: {list(phrases)!r}")

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(CHARACTERS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every character is its own pre-token; `[\s\S]` also matches the newline.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Tokens are single characters (or phrases): decoding is concatenation.
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        truncation_side="left",
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )
    if phrases:
        tokenizer.add_tokens(list(phrases))
    return tokenizer


def bicc_phrases(template: BiCCTemplate | None = None, max_items: int = 16) -> list[str]:
    """BiCC's framing pieces as phrases for :func:`build_char_tokenizer`.

    At one token per character the default template's framing costs
    35 + 14 tokens (header and footer) plus 12 per attempt ("Attempt 1: " and
    the newline), about half of a 102-token context budget; as phrases it
    costs 2 plus 2 per attempt, leaving the budget to the attempts themselves.
    Pieces of one character (the newline after each attempt) stay characters.
    A template other than the one the phrases came from still encodes, one
    token per character.
    """
    t = template or BiCCTemplate()
    pieces = [t.header_correct, t.header_wrong, t.footer]
    pieces += [t.item_prefix.format(index=i + 1) for i in range(max_items)]
    pieces.append(t.item_suffix)
    return list(dict.fromkeys(p for p in pieces if len(p) >= 2))


def load_char_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Reload a tokenizer saved with ``save_pretrained``, padding set back to the left."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise ValueError(f"{path}: no tokenizer.json (expected a save_pretrained directory)")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    return tokenizer

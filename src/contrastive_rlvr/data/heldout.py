"""The held-out split by problem (:func:`split_heldout`): rows with the same prompt
(:func:`prompt_key`) stay on one side."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from datasets import Dataset


@dataclass(frozen=True)
class HeldoutSplit:
    """A held-out split by problem (:func:`split_heldout`): row positions in the dataset
    given, each list in the dataset's order.

    ``heldout``: one row per held-out problem (its first); ``train``: every row whose
    prompt is not held out, repeats kept; ``problems``: distinct prompts in the dataset;
    ``repeats``: rows whose prompt an earlier row already has; ``dropped``: the other
    rows of held-out problems, in neither list.
    """

    heldout: list[int]
    train: list[int]
    problems: int
    repeats: int
    dropped: int


def prompt_key(prompt: Any) -> bytes:
    """Rows with the same prompt have the same key: a 16-byte digest of the string, or of
    the message list as canonical JSON (keys sorted), exactly as the rows hold them."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def split_heldout(dataset: Dataset, heldout_size: int, batch_size: int = 4096) -> HeldoutSplit:
    """The first ``heldout_size`` distinct prompts of ``dataset`` (already in its seeded
    order) held out, with every row that repeats one of them kept out of training.

    Hub copies repeat problems (DAPO-Math-17k's processed copy has each of its ~17k
    problems about a hundred times), so a split by rows would put copies of one problem
    on both sides. Prompts are compared exactly as loaded (:func:`prompt_key`), before
    any instruction is added (the same for every row). With no repeated prompt the split
    is the split by rows: ``heldout`` is ``range(heldout_size)``, ``train`` the rest.
    ``heldout_size`` counts problems; the caller checks that some are left to train on.
    """
    held: set[bytes] = set()
    seen: set[bytes] = set()
    heldout: list[int] = []
    train: list[int] = []
    repeats = dropped = 0
    position = 0
    for batch in dataset.select_columns(["prompt"]).iter(batch_size=batch_size):
        for prompt in batch["prompt"]:
            key = prompt_key(prompt)
            if key in seen:
                repeats += 1
                if key in held:
                    dropped += 1
                else:
                    train.append(position)
            else:
                seen.add(key)
                if len(held) < heldout_size:
                    held.add(key)
                    heldout.append(position)
                else:
                    train.append(position)
            position += 1
    return HeldoutSplit(heldout, train, len(seen), repeats, dropped)


#: ``heldout_size``'s default, fitted to a file too small for it (:func:`split_for`).
DEFAULT_HELDOUT = 100
#: A small file holds out one in this many of its distinct prompts by default.
SMALL_FILE_SHARE = 5  # one in five


def fitted_heldout_size(problems: int, needed: int) -> int:
    """The held-out size of the default ``heldout_size`` for a dataset of ``problems``
    distinct prompts when one generation batch needs ``needed`` of them:
    :data:`DEFAULT_HELDOUT` where that leaves ``needed`` to train on, else a fifth of the
    prompts (at least 1), and fewer where the batch needs the rest (0 when it needs all)."""
    if problems - DEFAULT_HELDOUT >= needed:
        return DEFAULT_HELDOUT
    size = max(1, problems // SMALL_FILE_SHARE)
    return max(0, min(size, problems - needed))


def split_for(
    dataset: Dataset, heldout_size: int, needed: int
) -> tuple[HeldoutSplit, int, str | None]:
    """The held-out split of ``dataset`` (in its seeded order), the size used and, when
    the default size was fitted to a small file, the one line that says so. Any other
    size is used as it is (the caller refuses one that leaves too few rows)."""
    split = split_heldout(dataset, heldout_size)
    if heldout_size != DEFAULT_HELDOUT:
        return split, heldout_size, None
    size = fitted_heldout_size(split.problems, needed)
    if size == DEFAULT_HELDOUT:
        return split, size, None
    split = split_heldout(dataset, size)
    note = (
        f"{split.problems} distinct prompts, too few to hold out heldout_size="
        f"{DEFAULT_HELDOUT} and keep the {needed} prompt(s) one generation batch needs: "
        f"holding out {size} for the held-out avg@n"
        + (" (none: every prompt is needed to train)" if size == 0 else "")
        + "; --heldout_size N sets another size, 0 turns the held-out scoring off"
    )
    return split, size, note

"""How many tokens the loss's forwards process, so that a run shows what BiCC costs.

BiCC's conditioned prompts ``[q ; O_opp]`` carry the group's opposite attempts, often
longer than the prompt and the completion together; the packed forward
(:mod:`.packed_prefix`) encodes each distinct prompt once. The wall-clock of the loss
phase mixes both with the machine's load; token counts do not. Two numbers per kind of
prompt (``"plain"``, ``"conditioned"``), summed over the forwards made inside the loss of
one optimizer step (every micro-batch, every process; gradient and no-gradient forwards
alike, e.g. a stop-gradient teacher), logged by the trainer as:

- ``tokens/loss_rows_<kind>``: the rows' tokens as each row is fed, its real prompt
  tokens and its completion's (``attention_mask``: padding not counted) -- what one
  forward per row encodes, whatever form runs;
- ``tokens/loss_forward_<kind>``: the tokens the forward that ran encoded: the rows' for
  the per-row forward; for the packed one each distinct prompt's shared part once
  (``P_u - 1`` tokens) plus every row's segment (its last prompt token and its
  completion up to its last scored token, the last one left out); for the two-pass cache
  form each distinct prompt less its last token, then every row's last prompt token and
  completion.

Counting reads the masks only: the forwards and their numbers are unchanged
(tests/shared_forward/test_tokens.py, worked by hand). The ratio of these counts is the
bound a token-bound phase's time ratio can reach (benchmarks/loss_overhead.py prints it
next to each measured ratio; docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, get_args

import torch

from .prefix import distinct_rows

#: Which prompts a forward reads (BiCC's conditioned ones, or the plain ones).
PromptKind = Literal["plain", "conditioned"]
KINDS = get_args(PromptKind)
#: The logged key of the rows' tokens and of the encoded tokens, per kind of prompt.
ROWS_KEYS = {"plain": "tokens/loss_rows_plain", "conditioned": "tokens/loss_rows_conditioned"}
FORWARD_KEYS = {
    "plain": "tokens/loss_forward_plain",
    "conditioned": "tokens/loss_forward_conditioned",
}


def row_tokens(attention_mask: torch.Tensor) -> torch.Tensor:
    """Real tokens of the rows (B, P + C) as TRL feeds them: prompt and completion, padding
    left out. A 0-dim tensor on the mask's device (no host sync until it is read)."""
    return attention_mask.sum()


def packed_tokens(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    chunk_rows: int | None = None,
) -> int:
    """Tokens the packed forward encodes (without the packed rows' tail padding): per
    distinct prompt its real tokens less the last, per row ``kept`` tokens (its last
    prompt token, then its completion up to its last scored token, that one left out; at
    least 1), as :func:`~.packed_prefix.build_packed_layout` lays them out. With
    ``chunk_rows`` (no-gradient calls) each chunk packs its own prompts, so a prompt split
    over two chunks counts twice, as it is encoded twice."""
    batch = prompt_ids.size(0)
    if chunk_rows is not None and chunk_rows < batch:
        tensors = (prompt_ids, prompt_mask, completion_mask)
        return sum(
            packed_tokens(*(t[i : i + chunk_rows] for t in tensors))
            for i in range(0, batch, chunk_rows)
        )
    first, _ = distinct_rows(prompt_ids, prompt_mask)
    shared = int((prompt_mask[first].sum(1) - 1).sum())
    columns = torch.arange(completion_mask.size(1), device=completion_mask.device)
    kept = (torch.where(completion_mask.bool(), columns, -1).amax(1) + 1).clamp(min=1)
    return shared + int(kept.sum())


def cache_tokens(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_mask: torch.Tensor
) -> int:
    """Tokens the two-pass cache form (:func:`~.prefix.shared_prefix_logps`) encodes: pass
    1 each distinct prompt less its last column, pass 2 every row's last prompt token and
    its completion (real tokens)."""
    first, _ = distinct_rows(prompt_ids, prompt_mask)
    head = int(prompt_mask[first, :-1].sum())
    return head + int(prompt_mask[:, -1].sum() + completion_mask.sum())


class LossForwardTokens:
    """The tallies of one optimizer step: forwards count only inside :meth:`counting`
    (the trainer wraps its loss in it, not the transfer probe's extra forward nor the
    stages' passes); :meth:`take` returns the step's metrics and starts the next step.

    A kind is logged from the first step it is seen on, every step after (0 on a step
    without it), so that a mean over a logging interval is a mean over its steps."""

    def __init__(self) -> None:
        self.on = False
        self._rows: dict[str, torch.Tensor | int] = dict.fromkeys(KINDS, 0)
        self._encoded: dict[str, torch.Tensor | int] = dict.fromkeys(KINDS, 0)
        self._seen: dict[str, int] = dict.fromkeys(KINDS, 0)

    @contextmanager
    def counting(self, on: bool = True) -> Iterator[None]:
        """Forwards inside count (when ``on``: the trainer passes ``mode == "train"``)."""
        before, self.on = self.on, on
        try:
            yield
        finally:
            self.on = before

    def add(self, kind: str, rows: torch.Tensor | int, encoded: torch.Tensor | int) -> None:
        """One forward of ``kind``: its rows' tokens and the tokens it encoded."""
        if not self.on:
            return
        self._rows[kind] = self._rows[kind] + rows
        self._encoded[kind] = self._encoded[kind] + encoded
        self._seen[kind] = 1

    def take(
        self,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        device: torch.device | str = "cpu",
    ) -> dict[str, float]:
        """The step's counts under their logged keys, summed over processes by ``reduce``
        (a sum all-reduce; every process calls it, with the same tensor shape), and reset."""
        values = [int(v) for k in KINDS for v in (self._rows[k], self._encoded[k])]
        values += [self._seen[k] for k in KINDS]
        total = torch.tensor(values, dtype=torch.long, device=device)
        if reduce is not None:
            total = reduce(total)
        total = total.tolist()
        self._rows = dict.fromkeys(KINDS, 0)
        self._encoded = dict.fromkeys(KINDS, 0)
        out = {}
        for i, kind in enumerate(KINDS):
            if total[2 * len(KINDS) + i] > 0:
                self._seen[kind] = 1  # seen on some process: logged from now on, everywhere
                out[ROWS_KEYS[kind]] = float(total[2 * i])
                out[FORWARD_KEYS[kind]] = float(total[2 * i + 1])
        return out

"""Process scorers for VeriGate backed by a process reward model (PRM).

The exact arithmetic checker needs no model and lives in the algorithm core
(:class:`contrastive_rlvr.algorithms.ArithmeticStepScorer`); this module wraps
a user's PRM behind the same interface, ``(prompt, steps) -> one score per
step`` (:class:`~contrastive_rlvr.algorithms.ProcessScorer`).

I/O of a Hugging Face PRM given by a local path (nothing is downloaded):

- loaded lazily, on the first call, with ``AutoTokenizer`` and
  ``AutoModelForSequenceClassification`` (``local_files_only=True``);
- step j is scored on the text
  ``prompt + prompt_separator + step_separator.join(steps[: j + 1])``: the
  prompt and every step up to and including j;
- the score is the probability of the "step is right" class:
  ``softmax(logits)[positive_label]`` for a model with 2 or more labels,
  ``sigmoid(logit)`` for a single-logit model;
- the prefixes of one completion go through the model in batches of
  ``batch_size``, padded (the model pools the last non-pad token); a text
  longer than ``max_length`` tokens is cut from the left, so the step being
  scored is always kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

ScoreFn = Callable[[str, Sequence[str]], Sequence[float]]


class PRMScorer:
    """A process scorer from a callable or a local sequence-classification PRM.

    Args:
        model: a callable ``(prompt, steps) -> scores`` used as is, or the path
            of a local Hugging Face model directory (I/O in the module docstring).
        step_separator: joins the steps of a prefix (the text they came from
            was split on it, e.g. a newline for the ``lines`` rule).
        prompt_separator: between the prompt and the first step.
        positive_label: the class index of "step is right" (2+ labels).
        device: where the model runs.
        batch_size: prefixes per forward pass.
        max_length: longest input in tokens (None: the tokenizer's limit).
    """

    def __init__(
        self,
        model: ScoreFn | str | Path,
        *,
        step_separator: str = "\n",
        prompt_separator: str = "\n",
        positive_label: int = 1,
        device: str | torch.device = "cpu",
        batch_size: int = 16,
        max_length: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"PRMScorer: batch_size must be >= 1, got {batch_size}")
        self._fn = model if callable(model) else None
        self.path = None if callable(model) else Path(model)
        if self.path is not None and not self.path.is_dir():
            raise ValueError(f"PRMScorer: model path {str(self.path)!r} is not a directory")
        self.step_separator = step_separator
        self.prompt_separator = prompt_separator
        self.positive_label = positive_label
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.max_length = max_length
        self._tokenizer = None
        self._model = None

    def __call__(self, prompt: str, steps: Sequence[str]) -> list[float]:
        if not steps:
            return []
        if self._fn is not None:
            scores = [float(s) for s in self._fn(prompt, steps)]
        else:
            scores = self._score_with_model(prompt, steps)
        if len(scores) != len(steps):
            raise ValueError(f"PRMScorer: got {len(scores)} scores for {len(steps)} steps")
        return scores

    def prefixes(self, prompt: str, steps: Sequence[str]) -> list[str]:
        """The texts the model scores, one per step (module docstring)."""
        return [
            prompt + self.prompt_separator + self.step_separator.join(steps[: j + 1])
            for j in range(len(steps))
        ]

    def _load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(self.path, local_files_only=True)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        # The model finds each row's last real token through the pad id.
        model.config.pad_token_id = tokenizer.pad_token_id
        tokenizer.truncation_side = "left"
        num_labels = model.config.num_labels
        if num_labels > 1 and not 0 <= self.positive_label < num_labels:
            raise ValueError(
                f"PRMScorer: positive_label={self.positive_label} but the model at "
                f"{str(self.path)!r} has {num_labels} labels"
            )
        self._tokenizer, self._model = tokenizer, model.to(self.device).eval()

    @torch.no_grad()
    def _score_with_model(self, prompt: str, steps: Sequence[str]) -> list[float]:
        if self._model is None:
            self._load()
        texts = self.prefixes(prompt, steps)
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self._tokenizer(
                texts[start : start + self.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=self.max_length is not None,
                max_length=self.max_length,
            ).to(self.device)
            logits = self._model(**batch).logits.float()  # (N, num_labels)
            if logits.shape[-1] == 1:
                probs = torch.sigmoid(logits[:, 0])
            else:
                probs = torch.softmax(logits, dim=-1)[:, self.positive_label]
            scores.extend(probs.tolist())
        return scores

"""Sampling completions: the one Hugging Face ``generate`` loop of the project (held-out
scoring during ``train``, the embedded task's evaluation and warm start, ``eval``), and
vLLM for ``eval`` when installed.

:class:`HFGenerator` holds the loop (:meth:`HFGenerator._sample_rows`: prompts left-padded,
``batch_size`` rows per ``generate`` call, no top-k, greedy at temperature 0) and draws in
one of two ways:

- :meth:`~HFGenerator.generate`: one completion per prompt, ``torch.manual_seed(seed)``
  before each batch of prompts, so sample j of every problem is drawn with seed j, as in
  the papers' evaluation (seeds 0..n-1); a sample is reproducible for the same batch
  composition. ``eval`` and the held-out avg@n of ``train`` on the user's data.
- :meth:`~HFGenerator.sample`: ``n`` completions per prompt, rows problem-major (problem
  i's samples are rows ``i*n .. i*n + n-1``), torch seeded once with ``seed`` under a
  forked RNG (the caller's RNG state is left as it was), so the draws depend on ``seed``
  and ``batch_size``. The embedded task's avg@n and its reading warm start.

:class:`VLLMGenerator` gives every request its own ``seed``, so a sample depends on
nothing else (``eval --backend vllm``, GPU machines only).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class Generator(Protocol):
    def generate(self, prompts: Sequence[str], seed: int) -> list[str]: ...


def build_prompt(
    tokenizer: Any, problem: str, instruction: str = DEFAULT_INSTRUCTION, chat: bool = True
) -> str:
    """The text fed to the model: the chat template (when the tokenizer has one) or plain text."""
    content = f"{problem}\n{instruction}" if instruction else problem
    if chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
    return f"{content}\n"


def vllm_available() -> bool:
    """vLLM is installed and a CUDA device is visible."""
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


class HFGenerator:
    """Batched ``model.generate`` with left padding, on whatever device the model is.

    ``temperature=0`` decodes greedily; otherwise it samples at ``temperature`` from the
    ``top_p`` nucleus of the whole vocabulary (``top_k=0``: not ``generate``'s default 50),
    with ``settings`` (more ``generate`` keywords: a training run's ``top_k``, ``min_p``,
    ``repetition_penalty`` and ``generation_kwargs``, :func:`.trainer.config.sampling_settings`)
    over those.
    ``chat``: the prompts were rendered with a chat template, which wrote BOS and the other
    special tokens already (none are added). ``stop_at_eos``: pass the tokenizer's
    ``<eos>`` to ``generate`` and cut each completion at its first one (the embedded
    task); otherwise the model's ``generation_config`` says when to stop and the special
    tokens are dropped from the text.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        batch_size: int,
        chat: bool,
        stop_at_eos: bool = False,
        settings: dict[str, Any] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.settings = dict(settings or {})
        self.on_batch = on_batch  # called with the rows of each finished generate call
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.temperature, self.top_p = temperature, top_p
        # A chat template already wrote BOS and the other special tokens.
        self.add_special_tokens = not chat
        self.stop_at_eos = stop_at_eos
        # Generation appends after the last column: prompts must end there.
        self.tokenizer.padding_side = "left"

    def generate(self, prompts: Sequence[str], seed: int) -> list[str]:
        """One completion per prompt (same order), torch seeded with ``seed`` before each
        batch of ``batch_size`` prompts."""
        return self._sample_rows(list(prompts), seed=seed)

    def sample(self, prompts: Sequence[str], *, n: int, seed: int) -> list[list[str]]:
        """``n`` completions per prompt (a list per prompt): rows problem-major in batches
        of ``batch_size`` rows, one torch stream seeded with ``seed`` for all of them,
        under a forked RNG (the caller's state is left as it was)."""
        rows = [p for p in prompts for _ in range(n)]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            texts = self._sample_rows(rows, seed=None)
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]

    @torch.no_grad()
    def _sample_rows(self, rows: list[str], *, seed: int | None) -> list[str]:
        """The loop: one completion per row, ``batch_size`` rows per ``generate`` call;
        torch seeded with ``seed`` before each call, or not at all (None: the caller
        seeded the stream once)."""
        # Scoring samples the model as it is, not as training leaves it: dropout off (a
        # trainer hands over its model in training mode), the caller's mode restored.
        was_training = self.model.training
        self.model.eval()
        try:
            return self._sample_rows_in_eval(rows, seed=seed)
        finally:
            self.model.train(was_training)

    def _sample_rows_in_eval(self, rows: list[str], *, seed: int | None) -> list[str]:
        out: list[str] = []
        device = next(self.model.parameters()).device
        # top_k=0: sample from the whole nucleus, not generate's default top 50.
        sampling: dict[str, Any] = {"do_sample": False}
        if self.temperature > 0:
            sampling = {"do_sample": True, "top_k": 0}
            sampling.update(temperature=self.temperature, top_p=self.top_p)
            sampling.update(self.settings)
        if self.stop_at_eos:
            sampling["eos_token_id"] = self.tokenizer.eos_token_id
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            enc = self.tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                add_special_tokens=self.add_special_tokens,
            ).to(device)
            if seed is not None:
                torch.manual_seed(seed)
            tokens = self.model.generate(
                **enc,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                **sampling,
            )
            new = tokens[:, enc["input_ids"].shape[1] :]
            out.extend(self._texts(new))
            if self.on_batch is not None:
                self.on_batch(len(batch))
        return out

    def _texts(self, new: torch.Tensor) -> list[str]:
        """The completions' text, special tokens dropped; with ``stop_at_eos`` each cut at
        its first ``<eos>`` (what ``generate`` wrote after it is padding)."""
        if not self.stop_at_eos:
            return self.tokenizer.batch_decode(new, skip_special_tokens=True)
        eos = self.tokenizer.eos_token_id
        texts = []
        for ids in new.tolist():
            if eos in ids:
                ids = ids[: ids.index(eos)]
            texts.append(self.tokenizer.decode(ids, skip_special_tokens=True))
        return texts


class VLLMGenerator:
    """vLLM offline inference with one seeded request per (problem, sample).

    ``model_name`` is a model id or directory: the caller refuses the project's aliases
    and GGUF files, which vLLM does not load (``evaluation.run``)."""

    def __init__(
        self,
        model_name: str,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        dtype: str = "auto",
    ) -> None:
        from vllm import LLM  # optional dependency: GPU machines only

        self.llm = LLM(model=model_name, dtype=dtype, seed=0)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p

    def generate(self, prompts: Sequence[str], seed: int) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_new_tokens,
            seed=seed,
        )
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]

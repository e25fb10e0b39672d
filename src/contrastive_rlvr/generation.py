"""Sampling completions: Hugging Face ``generate`` (CPU or GPU), or vLLM when installed.

A generator maps a list of prompt strings and a seed to one completion per
prompt. Sample j of every problem is drawn with seed j, as in the papers'
evaluation (seeds 0..n-1):

- :class:`HFGenerator` sets ``torch.manual_seed(seed)`` before each batch of
  problems, so a sample is reproducible for the same batch composition;
- :class:`VLLMGenerator` gives every request its own ``seed``, so a sample
  depends on nothing else.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from .models import ALIASES

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
    """Batched ``model.generate`` with left padding, on whatever device the model is."""

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
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.temperature, self.top_p = temperature, top_p
        # A chat template already wrote BOS and the other special tokens.
        self.add_special_tokens = not chat
        self.tokenizer.padding_side = "left"

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], seed: int) -> list[str]:
        out: list[str] = []
        device = next(self.model.parameters()).device
        for start in range(0, len(prompts), self.batch_size):
            batch = list(prompts[start : start + self.batch_size])
            enc = self.tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                add_special_tokens=self.add_special_tokens,
            ).to(device)
            torch.manual_seed(seed)
            # top_k=0: sample from the whole nucleus, not generate's default top 50.
            sampling: dict[str, Any] = {"do_sample": False}
            if self.temperature > 0:
                sampling = {"do_sample": True, "top_k": 0}
                sampling.update(temperature=self.temperature, top_p=self.top_p)
            tokens = self.model.generate(
                **enc,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                **sampling,
            )
            new = tokens[:, enc["input_ids"].shape[1] :]
            out.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return out


class VLLMGenerator:
    """vLLM offline inference with one seeded request per (problem, sample)."""

    def __init__(
        self,
        model_name: str,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        dtype: str = "auto",
    ) -> None:
        if model_name in ALIASES or model_name.endswith(".gguf"):
            raise ValueError(f"the vLLM backend takes a model id or directory, not {model_name!r}")
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

"""Does the embedded reading warm start teach the model to read BiCC's context?

Builds the embedded model, runs the SFT warm start with ``context_frac`` (argv 1)
for ``steps`` (argv 2), then on 50 held-out problems prints the mean log-prob
change of the reference chain after three correct attempts, and of a wrong chain
after two copies of that wrong chain, both against the plain prompt (nats per
sequence). Usage: ``python benchmarks/reading_warm_start.py 0.5 800``.
"""

from __future__ import annotations

import sys
import time

import torch

from contrastive_rlvr.embedded.model import build_tiny_model
from contrastive_rlvr.embedded.sft import WarmStartConfig, context_prompt, sft_warm_start
from contrastive_rlvr.embedded.task import make_datasets, parse_prompt
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer


def sequence_logp(model, prompt: list[int], completion: list[int]) -> float:  # noqa: ANN001
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
    token_logp = logp.gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)
    return float(token_logp[len(prompt) - 1 :].sum())


def main(frac: float, steps: int) -> None:
    torch.set_num_threads(1)
    tok = build_char_tokenizer()
    train, heldout = make_datasets()
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, mlp=256, max_positions=512, seed=0)
    started = time.time()
    sft_warm_start(model, tok, train, WarmStartConfig(steps=steps, context_frac=frac))
    print(f"sft {time.time() - started:.0f} s")
    model.eval()
    correct_gain, wrong_gain = [], []
    for prompt in heldout["prompt"][:50]:
        problem = parse_prompt(prompt)
        plain = tok(prompt)["input_ids"]
        right = tok(problem.solution, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        wrong_chain = problem.chain(error_step=0, delta=1)
        wrong = tok(wrong_chain, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        shown_right = context_prompt(tok, prompt, [problem.solution] * 3, True)
        shown_wrong = context_prompt(tok, prompt, [wrong_chain] * 2, False)
        correct_gain.append(
            sequence_logp(model, shown_right, right) - sequence_logp(model, plain, right)
        )
        wrong_gain.append(
            sequence_logp(model, shown_wrong, wrong) - sequence_logp(model, plain, wrong)
        )
    print(f"reference chain after correct attempts: {sum(correct_gain) / 50:+.3f} nats")
    print(f"shown wrong chain after wrong attempts: {sum(wrong_gain) / 50:+.3f} nats")


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]))

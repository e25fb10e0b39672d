"""Loss-phase and step overhead of BiCC and RCC at realistic lengths, measured in one run.

A randomly initialised Llama-style model (about 31M parameters: hidden 768, 4
layers, 12 heads / 4 key-value heads of 64, MLP 2048, vocabulary 8192, tied
embeddings), one
generation batch of ``--groups`` groups of G = 8 rows, prompts of 128 tokens,
completions of 256-512 tokens (uniform), half of each group correct, BiCC's
conditioned prompts built by the project's ``build_bicc_prompts`` with context
ratio 0.4 of ``--max-seq-len`` 2048 (about 819 context tokens a row).

Phases timed, each in its own arm; the arms alternate (forward order on even
repeats, reversed on odd ones, after one warm-up of each) and medians are
reported:

- ``plain``: the loss forward + backward of plain GRPO (TRL's per-row forward);
- ``bicc_rows``: BiCC's conditioned prompts, one forward per row;
- ``bicc_cache``: BiCC with the two-pass key/value-cache sharing
  (``shared_forward/prefix.py``; it cannot run under gradient checkpointing);
- ``bicc_packed``: BiCC with the packed one-forward sharing (``shared_forward/packed_prefix.py``),
  split attention (the model switched by ``enable_split_attention``);
- ``bicc_packed_mask``: the same packed forward through plain SDPA with the dense 4-D mask;
- ``plain_packed``: plain GRPO groups packed (one prompt per group), split attention;
- ``bicc_packed_flex`` / ``bicc_packed_varlen``: the packed forward on the kernel forms of
  ``shared_forward/packed_kernels.py``: flex_attention with the layout's block mask (compiled on
  CUDA; CUDA only, as PyTorch 2.13 has no flex backward on CPU) and flash varlen
  (``flash_attn_varlen_func`` where importable, else its pure-torch stand-in: the arm then
  times the stand-in, said in the output);
- ``nograd_policy`` / ``nograd_ref``: a no-grad forward of the plain batch through
  the policy / through a second copy of the model (RCC's pi_old(o|q) and
  pi_ref(o|q); the policy one is also BiCC paper mode's pi_old(o|q));
- ``optimizer``: AdamW step + zero_grad;
- ``generate``: the policy sampling the group's completions for the plain prompts
  (HF ``generate`` with the key/value cache, eval mode, no gradient, every row the
  batch's mean completion length), the part of a real step every arm shares.

Whole steps are sums of these phase medians, since the phases run one after the
other. Without generation (reward scoring, which every arm shares, is left out):
GRPO = plain + optimizer; RCC today = plain + nograd_policy + nograd_ref +
optimizer; RCC with delta from a pass the step makes (the trainer's
``rcc_delta_pass='auto'``) = plain + nograd_ref + optimizer; BiCC (paper ratio mode)
= bicc_packed + nograd_policy + optimizer; GRPO with ``beta > 0`` = plain + nograd_ref +
optimizer, its reference forward made once (TRL's scoring pass, reused by the log-prob
stage; a second pass would add another nograd_ref: the ratio ``grpo+kl, reference
once/twice``). With the ``generate`` arm, the same sums plus generate.

Next to each ratio, its token bound (``token_bounds``): the ratio the phases would give if
each loss phase took the plain one's time in proportion to the real tokens its forward
encodes (counted as the trainer logs ``tokens/loss_forward_<kind>``), each no-grad forward of
the plain rows a third of the plain loss phase (a backward is about two forwards; a quarter
under checkpointing, which re-runs the forward), the optimizer and generation as measured.
Measured above the bound: time the tokens do not explain (a slower attention, its square
term); below: fixed costs the tokens do not carry.

Peak memory of each loss phase: on CUDA ``torch.cuda.max_memory_allocated``
above the memory allocated before it; on CPU the peak resident set size above
the resident size before it (Linux ``VmHWM``, reset through
``/proc/self/clear_refs`` before each phase, with glibc's mmap threshold fixed
at 64 KiB and ``malloc_trim`` before each phase so that freed tensors leave
the resident set). Both are measured on the timed repeats, the median kept.

    python benchmarks/loss_overhead.py            # CPU, float32, 1 thread
    python benchmarks/loss_overhead.py --quick    # shorter shapes, for a smoke run
    python benchmarks/loss_overhead.py --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from contrastive_rlvr.algorithms.bicc import BiCCTemplate, build_bicc_prompts
from contrastive_rlvr.shared_forward.packed_kernels import (
    FLEX_ATTENTION,
    VARLEN_ATTENTION,
    enable_kernel_form,
    flash_varlen_kernel,
)
from contrastive_rlvr.shared_forward.packed_prefix import (
    SPLIT_ATTENTION,
    build_packed_layout,
    enable_split_attention,
    packed_prefix_logps,
    supports_packed_prefix,
)
from contrastive_rlvr.shared_forward.prefix import shared_prefix_logps
from contrastive_rlvr.shared_forward.tokens import cache_tokens, packed_tokens, row_tokens

TARGETS = {
    "loss bicc_packed/plain, checkpointing on": 1.15,
    "step rcc/plain": 1.10,
    "memory bicc_packed/plain": 1.2,
}
PAD = 0
MMAP_THRESHOLD = -3  # glibc mallopt M_MMAP_THRESHOLD
RESET_PEAK_RSS = "5"  # /proc/self/clear_refs: reset VmHWM to the current RSS


@dataclass
class Shapes:
    prompt: int = 128
    completion_min: int = 256
    completion_max: int = 512
    group: int = 8
    groups: int = 1
    max_seq_len: int = 2048
    context_ratio: float = 0.4
    hidden: int = 768
    layers: int = 4
    heads: int = 12
    kv_heads: int = 4
    intermediate: int = 2048
    vocab: int = 8192


QUICK = Shapes(prompt=32, completion_min=48, completion_max=96, max_seq_len=320, layers=2)
# Arms run by default in each setting (--all-arms: every arm in both, as the GPU check
# does; plain_packed and bicc_packed_mask are left out of the CPU default to keep the run
# short). Phases that do not depend on checkpointing (no-grad forwards, optimizer) run
# once, with it off.
DEFAULT_ARMS = {
    "off": [
        "plain",
        "bicc_rows",
        "bicc_cache",
        "bicc_packed",
        "nograd_policy",
        "nograd_ref",
        "optimizer",
        "generate",
    ],
    "on": ["plain", "bicc_rows", "bicc_packed"],
}
PROFILE_ROWS = 12  # operators listed per profiled arm


def add_compact_head(model: LlamaForCausalLM, temperature: float = 1.0) -> None:
    """A stand-in for TRL's ``add_fused_lm_head`` where ``trl.trainer`` cannot be imported
    (the GPU check does not install TRL and its dataset dependencies): the same contract
    (``labels`` or ``shift_labels`` with ``fused_lm_head=True`` return per-token
    ``log_probs``, 0 where the label is -100), with the logits of the labelled positions
    only (in float32), as TRL projects them on CUDA. Every arm uses the same head."""
    import types

    original = model.forward

    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, **kwargs):
        if not fused_lm_head:
            return original(*args, labels=labels, **kwargs)
        hidden = self.base_model(*args, use_cache=False, **kwargs).last_hidden_state
        if shift_labels is None:
            hidden, shift_labels = hidden[:, :-1], labels[:, 1:]
        mask = shift_labels != -100
        logits = self.get_output_embeddings()(hidden[mask]).float() / temperature  # (N, V)
        logp = torch.log_softmax(logits, -1).gather(1, shift_labels[mask].unsqueeze(1))
        out = logp.new_zeros(mask.shape).masked_scatter(mask, logp.squeeze(1))
        return types.SimpleNamespace(log_probs=out)

    model.forward = types.MethodType(forward, model)


def attach_head(model: LlamaForCausalLM, head: str) -> None:
    if head == "trl":
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model, temperature=1.0)
    else:
        add_compact_head(model, temperature=1.0)


def default_head() -> str:
    try:
        import trl.trainer.utils  # noqa: F401
    except ImportError:
        return "compact"
    return "trl"


def build_model(
    shapes: Shapes, dtype: torch.dtype, device: str, seed: int, head: str = "trl"
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=shapes.vocab,
        hidden_size=shapes.hidden,
        intermediate_size=shapes.intermediate,
        num_hidden_layers=shapes.layers,
        num_attention_heads=shapes.heads,
        num_key_value_heads=shapes.kv_heads,
        max_position_embeddings=shapes.max_seq_len,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    attach_head(model, head)
    return model


def build_batch(shapes: Shapes, device: str, seed: int) -> dict[str, torch.Tensor]:
    """Plain and BiCC-conditioned prompts of one generation batch, completions, advantages."""
    gen = torch.Generator().manual_seed(seed)
    rows = shapes.group * shapes.groups
    prompts, completions = [], []
    for _ in range(shapes.groups):
        q = torch.randint(3, shapes.vocab, (shapes.prompt,), generator=gen).tolist()
        prompts += [q] * shapes.group
    lengths = torch.randint(
        shapes.completion_min, shapes.completion_max + 1, (rows,), generator=gen
    )
    for n in lengths.tolist():
        completions.append(torch.randint(3, shapes.vocab, (n,), generator=gen).tolist())
    rewards = torch.tensor([float(i % 2) for i in range(rows)])  # half of each group correct
    template = BiCCTemplate().encode(lambda s: [3 + ord(c) % 200 for c in s], shapes.group)
    bicc = build_bicc_prompts(
        prompts,
        completions,
        rewards,
        shapes.group,
        template,
        budget=int(shapes.context_ratio * shapes.max_seq_len),
        pad_token_id=PAD,
        framing="inside",
    )
    width = int(lengths.max())
    completion_ids = torch.full((rows, width), PAD, dtype=torch.long)
    completion_mask = torch.zeros((rows, width), dtype=torch.long)
    for i, c in enumerate(completions):
        completion_ids[i, : len(c)] = torch.tensor(c)
        completion_mask[i, : len(c)] = 1
    advantages = rewards - rewards.view(-1, shapes.group).mean(1).repeat_interleave(shapes.group)
    batch = {
        "prompt_ids": torch.tensor(prompts),
        "prompt_mask": torch.ones(rows, shapes.prompt, dtype=torch.long),
        "bicc_prompt_ids": bicc.input_ids,
        "bicc_prompt_mask": bicc.attention_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }
    return {k: v.to(device) for k, v in batch.items()}


def per_row_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """TRL's per-row loss forward (``_get_per_token_logps_and_entropies``, one chunk)."""
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attn = torch.cat([prompt_mask, completion_mask], 1)
    labels = ids.masked_fill(attn == 0, -100)
    labels[:, : prompt_ids.size(1)] = -100
    out = model(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -completion_ids.size(1) :]


def loss_phase(model, batch, prompt: str, forward: Callable) -> None:
    """Forward + backward of a GRPO-style token-mean policy-gradient loss."""
    mask = batch["completion_mask"]
    logp = forward(
        model, batch[f"{prompt}_ids"], batch[f"{prompt}_mask"], batch["completion_ids"], mask
    )
    ratio = torch.exp(logp - logp.detach())
    loss = -(ratio * batch["advantages"].unsqueeze(1) * mask).sum() / mask.sum()
    loss.backward()


class PeakMemory:
    """Peak memory of a phase above what was in use before it (bytes)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        if not self.cuda:
            self.libc = ctypes.CDLL("libc.so.6")
            self.libc.mallopt(MMAP_THRESHOLD, 64 * 1024)

    @staticmethod
    def _status(key: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {key} in /proc/self/status")

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.before = torch.cuda.memory_allocated()
        else:
            self.libc.malloc_trim(0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write(RESET_PEAK_RSS)
            self.before = self._status("VmRSS:")

    def stop(self) -> int:
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.before
        return self._status("VmHWM:") - self.before


def dense_mask_logps(model, *tensors):
    """The packed forward through plain SDPA with the dense 4-D mask."""
    config = model.config
    config._attn_implementation = "sdpa"
    try:
        return packed_prefix_logps(model, *tensors)
    finally:
        config._attn_implementation = SPLIT_ATTENTION


_KERNEL_NAMES: dict[str, str] = {}


@contextmanager
def kernel_form(model, form: str):
    """The policy on a kernel form of the packed forward (over SDPA for the calls without
    the layout) for the block: forward and backward, so that checkpointing's recomputation
    runs the same attention."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = "sdpa"
    try:
        if form not in _KERNEL_NAMES:
            _KERNEL_NAMES[form] = enable_kernel_form(model, form=form)
        config._attn_implementation = _KERNEL_NAMES[form]
        yield
    finally:
        config._attn_implementation = before


KERNEL_ARMS = {"bicc_packed_flex": FLEX_ATTENTION, "bicc_packed_varlen": VARLEN_ATTENTION}
UNAVAILABLE: dict[str, str] = {}  # kernel arms whose check failed here, and why


def check_equal(policy, batch) -> None:
    """The packed log-probs (split and dense-mask attention) against the per-row ones on
    this batch, in this dtype and on this device: the largest difference on scored tokens."""
    tensors = [batch[k] for k in ("bicc_prompt_ids", "bicc_prompt_mask", "completion_ids")]
    mask = batch["completion_mask"]
    with torch.no_grad():
        rows = per_row_logps(policy, *tensors, mask)
        forms = [("split", None), ("dense mask", None)] + list(KERNEL_ARMS.items())
        for name, form in forms:
            forward = dense_mask_logps if name == "dense mask" else packed_prefix_logps
            label = name.removeprefix("bicc_packed_")
            try:
                with kernel_form(policy, form) if form else nullcontext():
                    diff = ((forward(policy, *tensors, mask) - rows) * mask).abs().max()
            except Exception as err:  # a kernel form this machine cannot run: say so, go on
                if form is None:
                    raise
                UNAVAILABLE[name] = f"{type(err).__name__}: {err}"
                print(f"  packed ({label}): unavailable here ({UNAVAILABLE[name]})")
                continue
            print(f"  packed ({label}) vs per-row log-probs: max |difference| {diff:.2e}")
    print(f"  varlen kernel: {flash_varlen_kernel()[1]}")


def make_arms(policy, reference, optimizer, batch, checkpointing: bool) -> dict[str, Callable]:
    def nograd(model):
        with torch.no_grad():
            per_row_logps(
                model,
                batch["prompt_ids"],
                batch["prompt_mask"],
                batch["completion_ids"],
                batch["completion_mask"],
            )

    def step_optimizer():
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def generate():
        # As the trainer samples: eval mode (no checkpointing replay), no gradient, the
        # key/value cache; every row as long as the batch's mean completion.
        length = int(batch["completion_mask"].sum(1).float().mean())
        policy.eval()
        with torch.no_grad():
            policy.generate(
                input_ids=batch["prompt_ids"],
                attention_mask=batch["prompt_mask"],
                do_sample=True,
                max_new_tokens=length,
                min_new_tokens=length,
                pad_token_id=PAD,
                use_cache=True,
            )
        policy.train()

    def kernel_arm(form: str) -> Callable:
        def run():
            with kernel_form(policy, form):
                return loss_phase(policy, batch, "bicc_prompt", packed_prefix_logps)

        return run

    arms = {
        "plain": lambda: loss_phase(policy, batch, "prompt", per_row_logps),
        "plain_packed": lambda: loss_phase(policy, batch, "prompt", packed_prefix_logps),
        "bicc_rows": lambda: loss_phase(policy, batch, "bicc_prompt", per_row_logps),
        "bicc_cache": lambda: loss_phase(policy, batch, "bicc_prompt", shared_prefix_logps),
        "bicc_packed": lambda: loss_phase(policy, batch, "bicc_prompt", packed_prefix_logps),
        "bicc_packed_mask": lambda: loss_phase(policy, batch, "bicc_prompt", dense_mask_logps),
        **{arm: kernel_arm(form) for arm, form in KERNEL_ARMS.items()},
        "nograd_policy": lambda: nograd(policy),
        "nograd_ref": lambda: nograd(reference),
        "optimizer": step_optimizer,
        "generate": generate,
    }
    if not str(next(policy.parameters()).device).startswith("cuda"):
        del arms["bicc_packed_flex"]  # no flex backward on CPU (PyTorch 2.13)
    for arm in UNAVAILABLE:
        arms.pop(arm, None)
    if checkpointing:
        # Under checkpointing HF drops the key/value cache the two-pass form needs (the
        # trainer falls back to per-row there).
        del arms["bicc_cache"]
    return arms


def run_setting(opts, shapes: Shapes, checkpointing: bool, dtype: torch.dtype) -> dict:
    device = opts.device
    policy = build_model(shapes, dtype, device, seed=0, head=opts.head)
    reference = build_model(shapes, dtype, device, seed=0, head=opts.head)
    reference.eval().requires_grad_(False)
    if checkpointing:
        policy.activation_checkpointing_enable({"use_reentrant": False})
    policy.train()
    enable_split_attention(policy)
    ok, reason = supports_packed_prefix(policy)
    if not ok:
        raise SystemExit(f"packed forward unsupported: {reason}")
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    batch = build_batch(shapes, device, seed=1)
    if not checkpointing or opts.checkpointing == "on":
        check_equal(policy, batch)
    arms = make_arms(policy, reference, optimizer, batch, checkpointing)
    setting = "on" if checkpointing else "off"
    wanted = opts.arms or (list(arms) if opts.all_arms else DEFAULT_ARMS[setting])
    if not opts.arms and checkpointing and "off" in opts.checkpointing.split(","):
        # Sampling runs in eval mode, the same with or without checkpointing: once is enough
        # (the GPU check's --all-arms runs both settings inside its time limit).
        wanted = [a for a in wanted if a != "generate"]
    arms = {k: v for k, v in arms.items() if k in wanted or k == "plain"}
    if opts.profile:
        profile(arms, [a for a in opts.profile if a in arms], device)
        return {}
    memory = PeakMemory(device)
    times: dict[str, list[float]] = {a: [] for a in arms}
    peaks: dict[str, list[int]] = {a: [] for a in arms}
    names = list(arms)
    for p in policy.parameters():  # AdamW creates its state on the first step: not timed
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for repeat in range(-opts.warmup, opts.repeats):  # negative repeats: warm-up, not kept
        order = names if repeat % 2 == 0 else names[::-1]
        for name in order:
            optimizer.zero_grad(set_to_none=True)
            if name == "optimizer":  # a step on gradients of every parameter
                for p in policy.parameters():
                    p.grad = torch.zeros_like(p)
            memory.start()
            started = time.perf_counter()
            arms[name]()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - started
            peak = memory.stop()
            if repeat >= 0:
                times[name].append(elapsed)
                peaks[name].append(peak)
            if opts.verbose:
                print(f"    {name}: {elapsed:.3f} s, {peak / 2**20:.0f} MiB", flush=True)
        print(
            f"  checkpointing={'on' if checkpointing else 'off'}: repeat {repeat + 1} done "
            f"({time.perf_counter() - opts.started:.0f} s)",
            flush=True,
        )
    layout = build_packed_layout(
        batch["bicc_prompt_ids"],
        batch["bicc_prompt_mask"],
        batch["completion_ids"],
        batch["completion_mask"],
    )
    return {
        "time_s": {a: statistics.median(t) for a, t in times.items()},
        "peak_mib": {a: statistics.median(p) / 2**20 for a, p in peaks.items()},
        "tokens": {
            "plain": int(batch["prompt_ids"].numel() + batch["completion_ids"].numel()),
            "bicc_rows": int(batch["bicc_prompt_ids"].numel() + batch["completion_ids"].numel()),
            "bicc_packed": layout.tokens,
        },
        "real_tokens": arm_tokens(batch),
        "params_m": sum(p.numel() for p in policy.parameters()) / 1e6,
    }


def arm_tokens(batch: dict[str, torch.Tensor]) -> dict[str, int]:
    """The real tokens each loss arm's forward encodes (padding left out), counted as the
    trainer counts them for ``tokens/loss_forward_<kind>`` (``shared_forward/tokens.py``)."""
    mask = batch["completion_mask"]
    plain = (batch["prompt_ids"], batch["prompt_mask"])
    bicc = (batch["bicc_prompt_ids"], batch["bicc_prompt_mask"])
    packed = packed_tokens(*bicc, mask)
    return {
        "plain": int(row_tokens(torch.cat([plain[1], mask], 1))),
        "plain_packed": packed_tokens(*plain, mask),
        "bicc_rows": int(row_tokens(torch.cat([bicc[1], mask], 1))),
        "bicc_cache": cache_tokens(*bicc, mask),
        "bicc_packed": packed,
        "bicc_packed_mask": packed,
        **dict.fromkeys(KERNEL_ARMS, packed),
    }


def profile(arms: dict[str, Callable], names: list[str], device: str) -> None:
    """Where the time of each named arm goes: torch.profiler's operators by self time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])
    sort = "self_cuda_time_total" if device != "cpu" else "self_cpu_time_total"
    for name in names:
        arms[name]()  # warm-up
        with torch_profile(activities=activities) as prof:
            arms[name]()
        print(f"\nprofile of {name}:")
        print(prof.key_averages().table(sort_by=sort, row_limit=PROFILE_ROWS))


STEP_PHASES = ("nograd_policy", "nograd_ref", "optimizer")
OPTIONAL_PHASES = ("generate",)  # with it, the whole steps are also given with generation


def steps(t: dict[str, float], phases: dict[str, float]) -> dict[str, float]:
    """Whole-step ratios from phase medians, without generation and, when the ``generate``
    phase ran, with it too; {} when a phase is missing."""
    if not all(k in phases for k in STEP_PHASES) or "bicc_packed" not in t:
        return {}
    out = {}
    for suffix, shared in (("", 0.0), (" with generation", phases.get("generate"))):
        if shared is None:
            continue
        grpo = t["plain"] + phases["optimizer"] + shared
        bicc = t["bicc_packed"] + phases["optimizer"] + shared
        out |= {
            f"grpo_s{suffix}": grpo,
            f"rcc/plain today{suffix}": (grpo + phases["nograd_policy"] + phases["nograd_ref"])
            / grpo,
            f"rcc/plain, delta from a pass the step makes{suffix}": (grpo + phases["nograd_ref"])
            / grpo,
            f"bicc_packed/plain, paper ratio mode{suffix}": (bicc + phases["nograd_policy"]) / grpo,
            f"bicc_packed/plain, consistent ratio mode{suffix}": bicc / grpo,
            # beta > 0: the KL's reference forward once (TRL's scoring pass, which the
            # log-prob stage reuses) against the same forward made again by the stage.
            f"grpo+kl, reference once/twice{suffix}": (grpo + phases["nograd_ref"])
            / (grpo + 2 * phases["nograd_ref"]),
        }
    return out


#: The time of a no-gradient forward of the plain rows, as a share of the plain loss phase
#: (forward + backward), by FLOPs: a backward costs about two forwards, and under gradient
#: checkpointing re-runs the forward first.
FORWARD_SHARE = {False: 1 / 3, True: 1 / 4}


def token_bounds(
    t: dict[str, float],
    phases: dict[str, float],
    tokens: dict[str, int],
    checkpointing: bool = False,
) -> dict[str, float]:
    """What each ratio would be if every loss-side phase took time in proportion to the
    tokens it encodes (attention's part that grows with the square of the length aside):
    each loss arm ``tokens[arm] / tokens["plain"]`` times the plain loss phase, each
    no-gradient forward of the plain rows :data:`FORWARD_SHARE` of it, the optimizer and
    generation as measured (no arm changes them). The same arithmetic as the measured
    ratios (:func:`steps`), so every key of theirs has its bound: ``loss <arm>/plain`` and
    the whole steps. A measured ratio above its bound is time the tokens do not explain
    (a slower kernel, the square term); below it, fixed costs the tokens do not carry."""
    plain = t["plain"]
    scaled = {arm: plain * tokens[arm] / tokens["plain"] for arm in t if arm in tokens}
    share = FORWARD_SHARE[checkpointing]
    shares = {k: plain * share for k in ("nograd_policy", "nograd_ref") if k in phases}
    out = {f"loss {arm}/plain": scaled[arm] / plain for arm in scaled if arm != "plain"}
    return out | {f"step {k}": v for k, v in steps(scaled, phases | shares).items()}


def report(results: dict, opts) -> dict:
    """Print every arm's medians and the ratios; return the ratios."""
    phases: dict[str, float] = {}
    for r in results.values():
        phases.update({k: v for k, v in r["time_s"].items() if k in STEP_PHASES + OPTIONAL_PHASES})
    summary: dict[str, dict[str, float]] = {}
    for setting, r in results.items():
        t, m = r["time_s"], r["peak_mib"]
        print(
            f"\ncheckpointing {setting}: median of {opts.repeats} (seconds, peak MiB above start)"
        )
        for arm in t:
            print(f"  {arm:17s} {t[arm]:9.3f} s  {m[arm]:9.1f} MiB")
        bounds = token_bounds(t, phases, r["real_tokens"], checkpointing=setting == "on")
        ratios: dict[str, float] = {}
        for arm in (
            "plain_packed",
            "bicc_rows",
            "bicc_cache",
            "bicc_packed_mask",
            *KERNEL_ARMS,
            "bicc_packed",
        ):
            if arm in t:
                ratios[f"loss {arm}/plain"] = t[arm] / t["plain"]
                ratios[f"memory {arm}/plain"] = m[arm] / m["plain"] if m["plain"] > 0 else 0.0
                print(
                    f"  loss {arm}/plain: time {ratios[f'loss {arm}/plain']:.3f} "
                    f"(token bound {bounds[f'loss {arm}/plain']:.3f}), "
                    f"peak memory {ratios[f'memory {arm}/plain']:.3f}"
                )
        step = steps(t, phases)
        for suffix in ("", " with generation"):
            if f"grpo_s{suffix}" not in step:
                continue
            head = suffix.strip() or "without generation"
            print(f"  whole step {head}: GRPO {step[f'grpo_s{suffix}']:.3f} s")
            for name, value in step.items():
                if (
                    not name.startswith("grpo_s")
                    and name.endswith(suffix)
                    and (suffix or not name.endswith(" with generation"))
                ):
                    bound = bounds[f"step {name}"]
                    print(f"    {name.removesuffix(suffix)}: {value:.3f} (token bound {bound:.3f})")
        ratios.update({f"step {k}": v for k, v in step.items()})
        tok, real = r["tokens"], r["real_tokens"]
        print(
            f"  tokens a forward (real, then with padding): plain {real['plain']} / "
            f"{tok['plain']}, bicc per row {real['bicc_rows']} / {tok['bicc_rows']}, bicc "
            f"packed {real['bicc_packed']} / {tok['bicc_packed']}, bicc cache "
            f"{real['bicc_cache']}; model {r['params_m']:.1f}M parameters"
        )
        summary[setting] = ratios | {f"bound {k}": v for k, v in bounds.items()}
    on = summary.get("on", {})
    rcc_step = "step rcc/plain, delta from a pass the step makes"
    with_generation = f"{rcc_step} with generation" in on
    checks = {
        "loss bicc_packed/plain, checkpointing on": on.get("loss bicc_packed/plain"),
        "memory bicc_packed/plain": on.get("memory bicc_packed/plain"),
        "step rcc/plain": on.get(f"{rcc_step} with generation" if with_generation else rcc_step),
    }
    step_kind = "with generation" if with_generation else "without generation (pessimistic)"
    print(f"\ntargets (checkpointing on; RCC's whole step {step_kind}):")
    for name, value in checks.items():
        if value is not None:
            verdict = "ok" if value <= TARGETS[name] else "ABOVE TARGET"
            print(f"  {name:42s} {value:.3f}  (target <= {TARGETS[name]}: {verdict})")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"shapes": vars(opts.shapes), "results": results, "ratios": summary}, f)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short shapes, 2 layers, 1 repeat")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)"
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per arm (3)")
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed rounds of every arm (CUDA 1, CPU 0)"
    )
    parser.add_argument("--checkpointing", default="off,on", help="'off', 'on' or 'off,on'")
    parser.add_argument("--groups", type=int, default=None, help="groups of G per batch (1)")
    parser.add_argument("--completion-max", type=int, default=None)
    parser.add_argument("--arms", default="", help="comma-separated subset (plain always runs)")
    parser.add_argument("--verbose", action="store_true", help="print every arm's every run")
    parser.add_argument("--all-arms", action="store_true", help="every arm in both settings")
    parser.add_argument(
        "--head",
        choices=["trl", "compact"],
        default=None,
        help="log-prob head: TRL's add_fused_lm_head, or the compact stand-in (default: TRL's "
        "when trl.trainer imports)",
    )
    parser.add_argument("--profile", default="", help="comma-separated arms to profile instead")
    parser.add_argument("--json", default="", help="also write the results to this file")
    opts = parser.parse_args(argv)
    opts.shapes = QUICK if opts.quick else Shapes()
    if opts.groups:
        opts.shapes.groups = opts.groups
    if opts.completion_max:
        opts.shapes.completion_max = opts.completion_max
    opts.repeats = opts.repeats or (1 if opts.quick else 3)
    if opts.warmup is None:
        opts.warmup = 0 if opts.device == "cpu" else 1
    opts.arms = [a for a in opts.arms.split(",") if a]
    opts.profile = [a for a in opts.profile.split(",") if a]
    opts.head = opts.head or default_head()
    opts.started = time.perf_counter()
    torch.set_num_threads(opts.threads)
    dtype = getattr(torch, opts.dtype)
    if opts.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name()}", flush=True)
    print(
        f"loss_overhead: {vars(opts.shapes)}, device {opts.device}, {opts.dtype}, "
        f"{opts.threads} thread(s), torch {torch.__version__}, head {opts.head}",
        flush=True,
    )
    results = {}
    for setting in opts.checkpointing.split(","):
        if setting not in ("off", "on"):
            raise SystemExit(f"--checkpointing: expected 'off', 'on' or 'off,on', got {setting!r}")
        results[setting] = run_setting(opts, opts.shapes, setting == "on", dtype)
    if not opts.profile:
        report(results, opts)
    print(f"\ntotal {time.perf_counter() - opts.started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

"""The premise command: a run's model, data, rewards and BiCC settings, sampled and
measured (:func:`run_premise`): seeded group sampling, the run's rewards as TRL calls them,
and the options checked before any model loads."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..algorithms.bicc_rows import BiCCRowBuilder
from .measure import CONTROLS, Conditioning, Group, PremiseResult, measure

#: Prompts per ``generate`` call (their G completions each).
GENERATE_PROMPTS = 8


def sample_groups(
    model: Any,
    prompt_ids: Sequence[list[int]],
    *,
    group: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    pad_token_id: int,
    end_ids: Sequence[int],
    batch: int,
    seed: int,
    top_k: int = 0,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    extra: dict[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[list[int]]]:
    """``group`` sampled completions per prompt (token ids cut after the first end id,
    which is kept; a completion that never ends keeps all ``max_new_tokens``), ``batch``
    prompts per ``generate`` call, left-padded; seeded, so a rerun draws the same. The
    sampling settings are TRL's (``top_k=0``: no top-k filter, the policy's own
    distribution, as RL samples it); ``extra``: a run's other ``generation_kwargs``, over
    them as in training. ``on_batch`` is called with the completions of each finished
    ``generate`` call (progress)."""
    sampling: dict[str, Any] = dict(
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        repetition_penalty=repetition_penalty,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad_token_id,
        eos_token_id=list(end_ids) or None,
    )
    if min_p is not None:
        sampling["min_p"] = min_p
    sampling.update(extra or {})
    device = next(model.parameters()).device
    ends = set(end_ids)
    out: list[list[list[int]]] = []
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    try:
        for start in range(0, len(prompt_ids), batch):
            chunk = [p for p in prompt_ids[start : start + batch] for _ in range(group)]
            width = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
            att = torch.zeros_like(ids)
            for i, p in enumerate(chunk):
                ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                att[i, width - len(p) :] = 1
            with torch.no_grad():
                gen = model.generate(
                    input_ids=ids.to(device), attention_mask=att.to(device), **sampling
                )[:, width:].tolist()
            cut = []
            for g in gen:
                stop = next((k for k, t in enumerate(g) if t in ends), None)
                cut.append(g if stop is None else g[: stop + 1])
            out += [cut[k : k + group] for k in range(0, len(cut), group)]
            if on_batch is not None:
                on_batch(len(chunk))
    finally:
        torch.random.set_rng_state(generator_state)
    return out


def total_rewards(
    rewards: Sequence[Callable[..., Any]],
    weights: Sequence[float] | None,
    prompt: Any,
    texts: Sequence[str],
    columns: dict[str, Any],
) -> list[float]:
    """Each completion's weighted sum of the rewards, called as TRL calls them (the raw
    prompt repeated, the completions as text, or as assistant messages for a chat prompt,
    every other dataset column as a keyword); a None (not scored) counts as nothing, and a
    completion no function scored gets NaN (never correct)."""
    n = len(texts)
    completions: list[Any] = list(texts)
    if isinstance(prompt, list):
        completions = [[{"role": "assistant", "content": t}] for t in texts]
    extra = {c: [v] * n for c, v in columns.items()}
    totals = [0.0] * n
    scored = [False] * n
    for k, fn in enumerate(rewards):
        w = 1.0 if weights is None else float(weights[k])
        values = fn([prompt] * n, completions, **extra)
        for i, v in enumerate(values):
            if v is not None and math.isfinite(float(v)):
                totals[i] += w * float(v)
                scored[i] = True
    return [t if s else float("nan") for t, s in zip(totals, scored, strict=True)]


#: The run settings ``premise.json`` records, as the config names them.
SETTINGS = tuple(
    "model dataset base_config num_generations max_completion_length temperature top_p top_k "
    "min_p repetition_penalty generation_kwargs reward_threshold seed bicc_context_ratio "
    "bicc_max_seq_len "
    "bicc_placement bicc_framing_budget bicc_truncation bicc_pairing".split()
)


def run_premise(
    config: Any, *, problems: int, control: str, echo: Callable[[str], None] = print
) -> PremiseResult:
    """The premise of ``config``'s run (an :class:`~contrastive_rlvr.RLVRConfig`: model,
    data, rewards, sampling and every ``bicc_*`` setting of the conditioned prompts) on the
    first ``problems`` prompts of its training rows (the seeded order training uses).
    Writes ``premise.json``, ``premise.txt`` (the printed table) and ``samples.jsonl`` into
    ``config.output_dir``; the embedded model's warm start is built there (or reused)."""
    import time
    from pathlib import Path

    from ..algorithms.bicc_rows import chat_renderer, end_token_ids
    from ..errors import UserError
    from ..run.command import load_run_inputs
    from ..run.heldout import ProgressLog
    from ..run.preflight import preflight
    from ..run_files import open_atomic
    from ..trainer.config import sampling_settings
    from .transfer import start_transfer

    check_options(problems, control, config)
    echo(
        f"premise: model {config.model}, G={config.num_generations}, "
        f"max_completion_length={config.max_completion_length}, "
        f"temperature={config.temperature}, top_p={config.top_p}, "
        f"bicc_placement={config.bicc_placement}, bicc_context_ratio="
        f"{config.bicc_context_ratio}, bicc_max_seq_len={config.bicc_max_seq_len}, "
        f"control={control}; training-only fields play no part"
    )
    torch.set_num_threads(config.torch_threads)
    started = time.perf_counter()
    out = Path(config.output_dir)
    check_premise_folder(out)  # before any model: a folder it cannot or may not write
    out.mkdir(parents=True, exist_ok=True)
    # premise trains nothing: no check of the held-out split or of a batch's rows
    parts = load_run_inputs(config, out, preflight(config, training=False))
    model, tokenizer = parts["model"], parts["tokenizer"]
    if torch.cuda.is_available():
        model.to("cuda")
    model.eval()
    rewards = parts["rewards"]
    if not all(callable(f) and not isinstance(f, torch.nn.Module) for f in rewards):
        raise UserError(
            "premise scores completions with reward functions; a reward model in rewards is "
            "not supported here: give the run's reward functions"
        )
    rows = parts["train"]
    if len(rows) < problems:
        echo(f"the training rows hold {len(rows)} problems, fewer than problems={problems}")
    rows = rows.select(range(min(problems, len(rows))))
    render = chat_renderer(tokenizer, _template_kwargs(config))
    raw_prompts = list(rows["prompt"])
    if any(isinstance(p, list) for p in raw_prompts) and render is None:
        raise UserError("the prompts are chat messages but the tokenizer has no chat template")
    prompt_ids = [
        render(p) if isinstance(p, list) else list(tokenizer(p)["input_ids"]) for p in raw_prompts
    ]
    generation_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    end_ids = end_token_ids(tokenizer.eos_token_id, generation_eos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_ids[0]
    G = config.num_generations
    settings = sampling_settings(config)  # as training samples (generation_kwargs too)
    progress = ProgressLog("premise", total=G * len(prompt_ids), unit="completions", log=echo)
    progress.start(f"{len(prompt_ids)} problems x {G}, {GENERATE_PROMPTS} problems a call")
    samples = sample_groups(
        model,
        prompt_ids,
        group=G,
        max_new_tokens=config.max_completion_length,
        temperature=settings.pop("temperature"),
        top_p=settings.pop("top_p"),
        top_k=settings.pop("top_k"),
        min_p=settings.pop("min_p", None),
        repetition_penalty=settings.pop("repetition_penalty"),
        extra=settings,
        on_batch=progress.advance,
        pad_token_id=pad,
        end_ids=end_ids,
        batch=GENERATE_PROMPTS,
        seed=config.seed,
    )
    progress.finish()
    took = time.perf_counter() - started
    echo(f"sampled {len(samples)} problems x {G} ({took:.0f} s since the start, loading included)")
    columns = [c for c in rows.column_names if c != "prompt"]
    groups: list[Group] = []
    unscored = 0
    with open_atomic(out, "samples.jsonl") as f:
        for i, row in enumerate(rows):
            texts = [tokenizer.decode(c, skip_special_tokens=True) for c in samples[i]]
            scores = total_rewards(
                rewards, config.reward_weights, raw_prompts[i], texts, {c: row[c] for c in columns}
            )
            correct = [math.isfinite(s) and s > config.reward_threshold for s in scores]
            messages = raw_prompts[i] if isinstance(raw_prompts[i], list) else None
            groups.append(Group(prompt_ids[i], samples[i], correct, messages))
            truncated = [not (c and c[-1] in end_ids) for c in samples[i]]
            record = {
                "problem": i,
                "prompt": raw_prompts[i],
                "completions": texts,
                "rewards": scores,
                "correct": correct,
                "truncated": truncated,
            }
            f.write(json.dumps(record, default=str) + "\n")
            unscored += sum(not math.isfinite(x) for x in scores)
    if unscored == G * len(groups):
        raise UserError(
            f"nothing was scored: the rewards ({', '.join(config.rewards)}) returned None or "
            f"a non-number for all {unscored} completions; check that they read the "
            f"completions and the answer column (the samples are in {out / 'samples.jsonl'})"
        )
    builder, cond = _conditioning(config, model, tokenizer, end_ids, pad, render)
    result = measure(
        model,
        groups,
        cond,
        budget=lambda g: builder.budget(len(g.prompt_ids), cond.max_positions),
        control=control,
        log=echo,
    )
    result.transfer = start_transfer(
        model,
        groups,
        cond,
        budget=lambda g: builder.budget(len(g.prompt_ids), cond.max_positions),
        taught=config.bicc_distill_rows,
    )
    truncated = sum(not (c and c[-1] in end_ids) for g in groups for c in g.completions)
    causes = premise_causes(groups, truncated, config.max_completion_length)  # printed by cli
    result.settings = {name: getattr(config, name) for name in SETTINGS} | {
        "truncated_completions": truncated / max(1, G * len(groups)),
        "causes": causes,
        "device": str(next(model.parameters()).device),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    return result


def _conditioning(
    config: Any, model: Any, tokenizer: Any, end_ids: list[int], pad: int, render: Any
) -> tuple[BiCCRowBuilder, Conditioning]:
    """The run's BiCC rows (its ``bicc_*`` settings) and how the premise conditions on them."""
    from ..algorithms.bicc_rows import template_encoder

    template = config.bicc_template.encode(
        template_encoder(tokenizer), max_items=config.num_generations
    )
    builder = BiCCRowBuilder(
        template=template,
        context_ratio=config.bicc_context_ratio,
        max_seq_len=config.bicc_max_seq_len,
        max_completion_length=config.max_completion_length,
        truncation=config.bicc_truncation,
        placement=config.bicc_placement,
        threshold=0.5,  # Group.correct is already the run's partition, passed as 1 / 0
        strip_token_ids=frozenset({*end_ids, pad}),
        framing=config.bicc_framing_budget,
        pairing=config.bicc_pairing,
    )
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    cond = Conditioning(
        builder,
        pad_token_id=pad,
        max_positions=positions if isinstance(positions, int) else None,
        render=render,
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    return builder, cond


#: The files premise writes into its output folder.
PREMISE_FILES = ("premise.json", "premise.txt", "samples.jsonl")


def check_premise_folder(out: Path) -> None:
    """The folder can be written, and none of :data:`PREMISE_FILES` there is a link or a
    file no run of this project wrote (checked before the model loads)."""
    from ..input_checks import check_output_dir
    from ..run_files import check_replaceable

    check_output_dir(out)
    for name in PREMISE_FILES:
        check_replaceable(out, name)


def premise_causes(groups: Sequence[Group], truncated: int, max_length: int) -> dict[str, str]:
    """What ``train`` would report as a cause of learning nothing, found in the premise's
    own samples (name -> message, as ``summary.json``'s ``learning_signal.causes``):
    ``truncated``, completions cut at the length limit (a cut completion rarely states its
    answer, so it counts as wrong); ``collapsed``, groups whose completions were all right
    or all wrong (they have no opposite attempts, so they measure nothing). Each is named
    whenever it touches a tenth of the samples or more, not only over half as in
    ``train``: the premise's interval rests on the few mixed groups."""
    causes: dict[str, str] = {}
    total = sum(len(g.completions) for g in groups)
    if total and truncated / total >= SAMPLE_SHARE:
        causes["truncated"] = (
            f"{truncated} of {total} completions ({truncated / total:.0%}) were cut at "
            f"max_completion_length={max_length}; a cut completion rarely states its answer "
            "and counts as wrong: raise max_completion_length, or ask the model for shorter "
            "answers (a lower temperature rambles less)"
        )
    wrong = sum(1 for g in groups if not any(g.correct))
    right = sum(1 for g in groups if all(g.correct))
    if groups and (wrong + right) / len(groups) >= SAMPLE_SHARE:
        causes["collapsed"] = (
            f"{wrong + right} of {len(groups)} groups had every completion wrong ({wrong}) or "
            f"every one right ({right}): they have no opposite attempts and measure nothing; "
            + (
                "all wrong: the task is too hard for the model, or the reward does not read "
                "its answers (samples.jsonl shows both)"
                if wrong >= right
                else "all right: the task is too easy for the model"
            )
        )
    return causes


#: The share of the premise's samples (or groups) from which a cause is named.
SAMPLE_SHARE = 0.1


def check_options(problems: int, control: str, config: Any) -> None:
    """The premise's own options and the run settings it needs, before any model loads."""
    from ..errors import UserError

    if control not in CONTROLS:
        raise UserError(f"control={control!r} is not one of {', '.join(CONTROLS)}")
    if problems < 2:
        raise UserError(f"problems={problems}: the interval needs at least 2 problems")
    if config.num_generations < 2:
        raise UserError(
            f"num_generations={config.num_generations}: a group needs 2 completions or more"
        )
    if not config.temperature > 0:
        raise UserError(
            f"temperature={config.temperature}: the premise samples groups; give a "
            "temperature above 0"
        )


def _template_kwargs(config: Any) -> dict | None:
    kwargs = getattr(config, "chat_template_kwargs", None) or None
    return json.loads(kwargs) if isinstance(kwargs, str) else kwargs

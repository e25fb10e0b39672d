"""Will BiCC help on this model? Its premise, measured without training.

BiCC scores a correct completion ``o+`` of a group as the continuation of
``[q ; O-]`` (the group's wrong attempts in the context) and a wrong one ``o-``
as the continuation of ``[q ; O+]``. It can only help if the model *uses* that
context: after the wrong attempts a correct completion should gain probability
relative to a wrong one after the correct attempts. This module measures that
on the model as it is, with the training run's own conditioned prompts
(:class:`~contrastive_rlvr.algorithms.bicc_rows.BiCCRowBuilder`, the builder
both engines call), in minutes:

1. sample ``G`` completions for each of ``problems`` prompts (the run's sampling
   settings), score them with the run's rewards and keep the groups with both
   outcomes (correct: total reward above ``reward_threshold``, as training
   partitions them);
2. per completion, ``d = log pi(o | [q ; C]) - log pi(o | q)`` for two contexts
   ``C``: the opposite attempts (BiCC's), and a **control** with the same framing
   that carries no information about which answer is right for this problem:

   * ``other_problem`` (default): the opposite attempts of *another* problem
     (the next two-sided one, in order); every row has one;
   * ``same_sign``: the other attempts of the completion's own side, under the
     header BiCC gives that side; a row alone on its side has none;

3. per problem, ``contrast = mean d(o+) - mean d(o-)`` for each context, and
   ``net = contrast(opposite) - contrast(control)``: what the opposite attempts
   do beyond seeing attempts at all (arXiv 2606.11709: a privileged context
   teaches its style rather than the task unless a control context is
   subtracted);
4. over problems (the independent units): mean and 95% Student t interval of
   each quantity, per token (``d`` divided by the completion's token count, the
   verdict's unit) and per sequence (the sum).

Verdict on ``net`` per token: interval above 0, **premise shown**; below 0,
**reversed** (the opposite attempts move the model toward the wrong answers);
otherwise **not shown**; fewer than two usable problems, **undetermined**. The
initial gap between a model and its context-conditioned self predicts what
conditioning on that context can gain (arXiv 2605.30070); a model with no gap
here gives BiCC's conditioned share nothing to learn from. docs/bicc.md,
"Will BiCC help on my model?", has what it predicted against training runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .algorithms.bicc_rows import BiCCRowBuilder
from .stats import mean_ci

#: The control contexts (``--control``); the first is the default.
CONTROLS = ("other_problem", "same_sign")
#: The verdicts, on the net contrast's interval.
SHOWN, NOT_SHOWN, REVERSED, UNDETERMINED = "premise shown", "not shown", "reversed", "undetermined"
#: The quantities averaged per problem, then over problems.
QUANTITIES = ("opp_pos", "opp_neg", "ctrl_pos", "ctrl_neg", "contrast", "control", "net")
#: How the table names them.
LABELS = {
    "opp_pos": "d(o+), opposite attempts",
    "opp_neg": "d(o-), opposite attempts",
    "ctrl_pos": "d(o+), control",
    "ctrl_neg": "d(o-), control",
    "contrast": "contrast d(o+) - d(o-), opposite",
    "control": "contrast d(o+) - d(o-), control",
    "net": "net: opposite minus control",
}


@dataclass
class Group:
    """One problem's sampled group.

    Attributes:
        prompt_ids: the plain prompt as the model reads it (chat-rendered for messages).
        completions: G completions as token ids, cut after the first end token (kept).
        correct: G flags, total reward above the threshold.
        messages: the prompt's chat messages (None: a text prompt).
    """

    prompt_ids: list[int]
    completions: list[list[int]]
    correct: list[bool]
    messages: list[dict] | None = None

    @property
    def two_sided(self) -> bool:
        return any(self.correct) and not all(self.correct)


@dataclass
class Conditioning:
    """How the conditioned prompts are built: the run's row builder and what it needs.

    Attributes:
        rows: the training run's :class:`BiCCRowBuilder` (budget, framing, placement,
            truncation, pairing, stripped ids).
        pad_token_id: the tokenizer's pad id.
        max_positions: the model's window (caps the context as in training), or None.
        render, decode: chat messages -> ids, and ids -> text (user-turn placement).
    """

    rows: BiCCRowBuilder
    pad_token_id: int
    max_positions: int | None = None
    render: Callable[[list[dict]], list[int]] | None = None
    decode: Callable[[list[int]], str] | None = None

    def prompts(
        self, group: Group, attempts: Group, *, budget: int
    ) -> tuple[list[list[int]], list[int]]:
        """The conditioned prompt of every row of ``attempts`` with ``group``'s question:
        the rows of a fake group holding ``group``'s prompt and ``attempts``' completions
        and outcomes, built exactly as training builds a group's rows (a correct row reads
        ``attempts``' wrong completions under the wrong-attempts header, and vice versa).
        Returns the prompts (row order of ``attempts``) and the context tokens each added."""
        n = len(attempts.completions)
        rewards = torch.tensor([1.0 if c else 0.0 for c in attempts.correct])
        chat = {}
        if group.messages is not None:
            chat = dict(messages=[group.messages] * n, render=self.render, decode=self.decode)
        built, _ = self.rows.build(
            [group.prompt_ids] * n,
            attempts.completions,
            rewards,
            n,
            pad_token_id=self.pad_token_id,
            budget=budget,
            max_positions=self.max_positions,
            longest_prompt=len(group.prompt_ids),
            **chat,
        )
        mask = built.attention_mask.bool()
        out = [built.input_ids[i][mask[i]].tolist() for i in range(n)]
        return out, built.context_tokens.tolist()


def completion_logps(model: Any, prompt: Sequence[int], completions: Sequence[Sequence[int]]):
    """Summed log-prob of each completion after ``prompt``: a (n,) float tensor.

    One forward over ``n`` rows ``prompt + completion``, right-padded (positions stay
    0..L-1 for every real token); padding contributes nothing."""
    device = next(model.parameters()).device
    prompt = list(prompt)
    width = max(len(c) for c in completions)
    ids = torch.zeros(len(completions), len(prompt) + width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, c in enumerate(completions):
        row = prompt + list(c)
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        att[i, : len(row)] = 1
    ids, att = ids.to(device), att.to(device)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits[:, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float(), -1)  # (n, width, vocab)
    target = ids[:, len(prompt) :]
    token = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (n, width)
    return (token * att[:, len(prompt) :]).sum(1).cpu()


def _scores(model: Any, prompts: Sequence[list[int]], rows: Sequence[int], group: Group):
    """``{row: log pi(completion_row | prompts[k])}`` for ``rows[k]``, one forward per
    distinct prompt (the rows of one side share theirs under the partition pairing)."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for prompt, row in zip(prompts, rows, strict=True):
        by_prompt.setdefault(tuple(prompt), []).append(row)
    out = {}
    for prompt, members in by_prompt.items():
        lp = completion_logps(model, prompt, [group.completions[r] for r in members])
        out.update({r: float(v) for r, v in zip(members, lp, strict=True)})
    return out


def _side_index(correct: Sequence[bool]) -> list[int]:
    """Each row's index among the rows of its own side (0, 1, ... in row order)."""
    seen = {True: 0, False: 0}
    out = []
    for c in correct:
        out.append(seen[c])
        seen[c] += 1
    return out


def measure_group(
    model: Any,
    group: Group,
    cond: Conditioning,
    *,
    budget: int,
    control: str,
    other: Group | None = None,
) -> dict[str, Any]:
    """Per row of a two-sided ``group``: ``opp`` and ``ctrl`` log-prob shifts (nats, the
    completion's sum) and its token count; ``ctx``: context tokens added per row.

    ``control="other_problem"`` reads ``other``'s attempts (``group``'s k-th row of a side
    takes the conditioned prompt of ``other``'s ``k mod n``-th row of that side, so it reads
    what a row of that side of ``other`` reads); ``"same_sign"`` the other rows of its own
    side, framed as BiCC frames the opposite side for it."""
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    n = len(group.completions)
    rows = list(range(n))
    plain = completion_logps(model, group.prompt_ids, group.completions)
    opposite, added = cond.prompts(group, group, budget=budget)
    opp = _scores(model, opposite, rows, group)
    ctrl: dict[int, float] = {}
    if control == "other_problem":
        if other is None or not other.two_sided:
            raise ValueError("control 'other_problem' needs another two-sided group")
        prompts, _ = cond.prompts(group, other, budget=budget)
        side_rows = {s: [i for i, c in enumerate(other.correct) if c == s] for s in (True, False)}
        index = _side_index(group.correct)
        picked = [side_rows[group.correct[r]][index[r] % len(side_rows[group.correct[r]])]
                  for r in rows]  # fmt: skip
        ctrl = _scores(model, [prompts[p] for p in picked], rows, group)
    else:
        for r in rows:
            mates = [k for k in rows if k != r and group.correct[k] == group.correct[r]]
            if not mates:
                continue  # alone on its side: no same-sign context exists
            # A fake group: this row on its side, its mates on the other, so the row reads
            # them under the header BiCC shows its side.
            fake = Group(
                group.prompt_ids,
                [group.completions[r]] + [group.completions[k] for k in mates],
                [group.correct[r]] + [not group.correct[r]] * len(mates),
                group.messages,
            )
            prompts, _ = cond.prompts(group, fake, budget=budget)
            ctrl[r] = float(completion_logps(model, prompts[0], [group.completions[r]])[0])
    return {
        "opp": {r: opp[r] - float(plain[r]) for r in rows},
        "ctrl": {r: ctrl[r] - float(plain[r]) for r in ctrl},
        "tokens": {r: len(group.completions[r]) for r in rows},
        "ctx": added,
    }


def group_summary(correct: Sequence[bool], measured: dict[str, Any], unit: str) -> dict:
    """One problem's means: ``opp_pos`` / ``opp_neg`` (over its correct / wrong rows),
    ``ctrl_pos`` / ``ctrl_neg`` (over the rows that have a control), ``contrast``,
    ``control`` and ``net`` (None where a side has no control). ``unit``: ``"token"``
    (each row's shift divided by its token count) or ``"sequence"``."""
    if unit not in ("token", "sequence"):
        raise ValueError(f"unit must be 'token' or 'sequence', got {unit!r}")

    def value(kind: str, r: int) -> float:
        d = measured[kind][r]
        return d / measured["tokens"][r] if unit == "token" else d

    def mean(kind: str, side: bool) -> float | None:
        vals = [value(kind, r) for r, c in enumerate(correct) if c == side and r in measured[kind]]
        return sum(vals) / len(vals) if vals else None

    out = {
        "opp_pos": mean("opp", True),
        "opp_neg": mean("opp", False),
        "ctrl_pos": mean("ctrl", True),
        "ctrl_neg": mean("ctrl", False),
    }
    out["contrast"] = out["opp_pos"] - out["opp_neg"]
    both = out["ctrl_pos"] is not None and out["ctrl_neg"] is not None
    out["control"] = out["ctrl_pos"] - out["ctrl_neg"] if both else None
    out["net"] = out["contrast"] - out["control"] if both else None
    return out


def interval(values: Sequence[float], level: float = 0.95) -> dict | None:
    """Mean and Student t interval over problems (None: no values; bounds None: one)."""
    if not values:
        return None
    ci = mean_ci(list(values), level)
    half = ci.half_width
    return {
        "mean": ci.mean,
        "low": None if half is None else ci.mean - half,
        "high": None if half is None else ci.mean + half,
        "n": ci.n,
        "level": level,
    }


def verdict(net: dict | None) -> str:
    """The plain verdict on the net contrast's interval (:data:`SHOWN`, ...)."""
    if net is None or net["low"] is None:
        return UNDETERMINED
    if net["low"] > 0:
        return SHOWN
    if net["high"] < 0:
        return REVERSED
    return NOT_SHOWN


@dataclass
class PremiseResult:
    """Everything one measurement found (``to_dict`` is premise.json)."""

    control: str
    problems: int
    group_size: int
    accuracy: float
    two_sided: int
    per_problem: list[dict] = field(default_factory=list)
    per_token: dict = field(default_factory=dict)
    per_sequence: dict = field(default_factory=dict)
    mean_context_tokens: float = 0.0
    verdict: str = UNDETERMINED
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "control": self.control,
            "problems": self.problems,
            "group_size": self.group_size,
            "accuracy": self.accuracy,
            "two_sided_problems": self.two_sided,
            "mean_context_tokens": self.mean_context_tokens,
            "per_token": self.per_token,
            "per_sequence": self.per_sequence,
            "settings": self.settings,
            "per_problem": self.per_problem,
        }


def measure(
    model: Any,
    groups: Sequence[Group],
    cond: Conditioning,
    *,
    budget: Callable[[Group], int],
    control: str = CONTROLS[0],
    log: Callable[[str], None] | None = None,
) -> PremiseResult:
    """The premise over ``groups`` (one per problem): :func:`measure_group` on each
    two-sided group, then the means and intervals over problems and the verdict.
    ``budget(group)``: the context budget of a group's rows (training's rule)."""
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    model.eval()
    usable = [k for k, g in enumerate(groups) if g.two_sided]
    per_problem: list[dict] = []
    context: list[int] = []
    for pos, k in enumerate(usable):
        group = groups[k]
        other = groups[usable[(pos + 1) % len(usable)]] if len(usable) > 1 else None
        if control == "other_problem" and other is None:
            break  # one two-sided group has no other problem to borrow from
        m = measure_group(model, group, cond, budget=budget(group), control=control, other=other)
        context += [m["ctx"][r] for r in range(len(group.completions))]
        row = {
            "problem": k,
            "accuracy": sum(group.correct) / len(group.correct),
            "control_from": usable[(pos + 1) % len(usable)] if control == "other_problem" else k,
            "token": group_summary(group.correct, m, "token"),
            "sequence": group_summary(group.correct, m, "sequence"),
        }
        per_problem.append(row)
        if log is not None:
            t = row["token"]
            log(
                f"problem {k}: accuracy {row['accuracy']:.2f}, per token: contrast "
                f"{t['contrast']:+.3f}, control {_fmt(t['control'])}, net {_fmt(t['net'])}"
            )
    tables = {}
    for unit in ("token", "sequence"):
        tables[unit] = {
            q: interval([p[unit][q] for p in per_problem if p[unit][q] is not None])
            for q in QUANTITIES
        }
    accuracy = sum(sum(g.correct) / len(g.correct) for g in groups) / max(len(groups), 1)
    return PremiseResult(
        control=control,
        problems=len(groups),
        group_size=len(groups[0].completions) if groups else 0,
        accuracy=accuracy,
        two_sided=len(usable),
        per_problem=per_problem,
        per_token=tables["token"],
        per_sequence=tables["sequence"],
        mean_context_tokens=sum(context) / len(context) if context else 0.0,
        verdict=verdict(tables["token"]["net"]),
    )


def _fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:+.{digits}f}"


def _cell(ci: dict | None, digits: int) -> str:
    if ci is None:
        return "n/a (no problem)"
    if ci["low"] is None:
        return f"{_fmt(ci['mean'], digits)} (n=1, no interval)"
    return (
        f"{_fmt(ci['mean'], digits)} [{_fmt(ci['low'], digits)}, {_fmt(ci['high'], digits)}]"
        f" n={ci['n']}"
    )


#: What each verdict means, printed under it.
MEANINGS = {
    SHOWN: "shown the opposite attempts, the model moves toward the correct completions "
    "beyond what the control context does: BiCC's conditioned scores carry a signal",
    NOT_SHOWN: "the opposite attempts move the model no more toward the correct completions "
    "than the control does (the interval holds 0): BiCC's conditioned share has no "
    "measured signal to add on this model and task",
    REVERSED: "the opposite attempts move the model toward the wrong completions, beyond the "
    "control: BiCC's conditioned share would push against the reward",
    UNDETERMINED: "fewer than two problems had both correct and wrong completions (and a "
    "control): raise --problems, or num_generations, or pick problems the model solves "
    "sometimes",
}


def format_table(result: PremiseResult, title: str = "") -> str:
    """The printed report: per-token and per-sequence tables and the verdict."""
    lines = [title] if title else []
    lines.append(
        f"{result.problems} problems x G={result.group_size}, accuracy {result.accuracy:.3f}, "
        f"{result.two_sided} with both outcomes; control: {result.control}; "
        f"context {result.mean_context_tokens:.1f} tokens per conditioned row (opposite)"
    )
    lines.append(
        "d = log pi(o | [q ; context]) - log pi(o | q); o+ correct, o- wrong; mean over "
        "problems [95% t interval]"
    )
    for unit, digits, table in (
        ("nats per token", 3, result.per_token),
        ("nats per sequence", 2, result.per_sequence),
    ):
        lines.append(f"\n{unit}")
        width = max(len(v) for v in LABELS.values())
        for q in QUANTITIES:
            lines.append(f"  {LABELS[q]:<{width}}  {_cell(table.get(q), digits)}")
    lines.append(f"\nverdict (net per token): {result.verdict.upper()}")
    lines.append(f"  {MEANINGS[result.verdict]}")
    return "\n".join(lines)


def dump(result: PremiseResult) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


# ---------------------------------------------------------------------------------------
# The command: a run's model, data, rewards and BiCC settings, sampled and measured.


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
) -> list[list[list[int]]]:
    """``group`` sampled completions per prompt (token ids cut after the first end id,
    which is kept; a completion that never ends keeps all ``max_new_tokens``), ``batch``
    prompts per ``generate`` call, left-padded; seeded, so a rerun draws the same. The
    sampling settings are TRL's (``top_k=0``: no top-k filter, the policy's own
    distribution, as RL samples it)."""
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
                    input_ids=ids.to(device),
                    attention_mask=att.to(device),
                    do_sample=True,
                    temperature=temperature,
                    top_p=top_p,
                    top_k=top_k,
                    repetition_penalty=repetition_penalty,
                    **({} if min_p is None else {"min_p": min_p}),
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad_token_id,
                    eos_token_id=list(end_ids) or None,
                )[:, width:].tolist()
            cut = []
            for g in gen:
                stop = next((k for k, t in enumerate(g) if t in ends), None)
                cut.append(g if stop is None else g[: stop + 1])
            out += [cut[k : k + group] for k in range(0, len(cut), group)]
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

    from .algorithms.bicc_rows import chat_renderer, end_token_ids, template_encoder
    from .errors import UserError
    from .trainer.run import load_run_inputs

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
    out.mkdir(parents=True, exist_ok=True)
    parts = load_run_inputs(config, out)
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
    samples = sample_groups(
        model,
        prompt_ids,
        group=G,
        max_new_tokens=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=config.top_k or 0,
        min_p=config.min_p,
        repetition_penalty=config.repetition_penalty,
        pad_token_id=pad,
        end_ids=end_ids,
        batch=GENERATE_PROMPTS,
        seed=config.seed,
    )
    took = time.perf_counter() - started
    echo(f"sampled {len(samples)} problems x {G} ({took:.0f} s since the start, loading included)")
    columns = [c for c in rows.column_names if c != "prompt"]
    groups: list[Group] = []
    with (out / "samples.jsonl").open("w") as f:
        for i, row in enumerate(rows):
            texts = [tokenizer.decode(c, skip_special_tokens=True) for c in samples[i]]
            scores = total_rewards(
                rewards, config.reward_weights, raw_prompts[i], texts, {c: row[c] for c in columns}
            )
            correct = [math.isfinite(s) and s > config.reward_threshold for s in scores]
            messages = raw_prompts[i] if isinstance(raw_prompts[i], list) else None
            groups.append(Group(prompt_ids[i], samples[i], correct, messages))
            truncated = [not (c and c[-1] in end_ids) for c in samples[i]]
            record = {"problem": i, "prompt": raw_prompts[i], "completions": texts,
                      "rewards": scores, "correct": correct, "truncated": truncated}  # fmt: skip
            f.write(json.dumps(record, default=str) + "\n")
    template = config.bicc_template.encode(template_encoder(tokenizer), max_items=G)
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
    result = measure(
        model,
        groups,
        cond,
        budget=lambda g: builder.budget(len(g.prompt_ids), cond.max_positions),
        control=control,
        log=echo,
    )
    truncated = sum(not (c and c[-1] in end_ids) for g in groups for c in g.completions)
    result.settings = {
        "model": config.model,
        "dataset": config.dataset,
        "base_config": config.base_config,
        "num_generations": G,
        "max_completion_length": config.max_completion_length,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "min_p": config.min_p,
        "repetition_penalty": config.repetition_penalty,
        "reward_threshold": config.reward_threshold,
        "seed": config.seed,
        "bicc_context_ratio": config.bicc_context_ratio,
        "bicc_max_seq_len": config.bicc_max_seq_len,
        "bicc_placement": config.bicc_placement,
        "bicc_framing_budget": config.bicc_framing_budget,
        "bicc_truncation": config.bicc_truncation,
        "bicc_pairing": config.bicc_pairing,
        "truncated_completions": truncated / max(1, G * len(groups)),
        "device": str(next(model.parameters()).device),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    return result


def check_options(problems: int, control: str, config: Any) -> None:
    """The premise's own options and the run settings it needs, before any model loads."""
    from .errors import UserError

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


__all__ = [
    "CONTROLS",
    "Conditioning",
    "Group",
    "PremiseResult",
    "completion_logps",
    "format_table",
    "group_summary",
    "interval",
    "measure",
    "measure_group",
    "run_premise",
    "verdict",
]

"""The premise's measurement: a problem's sampled group, the conditioned prompts built by
the run's row builder, the log-prob shifts under the opposite and the control contexts, the
per-problem means, their intervals over problems and the verdict (:func:`measure`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..algorithms.bicc_rows import BiCCRowBuilder
from ..stats import mean_ci

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
        picked = [
            side_rows[group.correct[r]][index[r] % len(side_rows[group.correct[r]])] for r in rows
        ]
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
    #: ``bicc/transfer_cos`` at the start weights per BiCC form (premise/transfer.py).
    transfer: dict | None = None

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
            "transfer_cos_at_start": self.transfer,
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

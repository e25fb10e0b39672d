"""The premise's printed report (:func:`format_table`: the per-token and per-sequence
tables and the verdict with what it means) and ``premise.json`` (:func:`dump`)."""

from __future__ import annotations

import json

from .measure import (
    LABELS,
    NOT_SHOWN,
    QUANTITIES,
    REVERSED,
    SHOWN,
    UNDETERMINED,
    PremiseResult,
    _fmt,
)


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


#: Which BiCC form, if any, to run on this model, by verdict (the evidence:
#: docs/results/bicc-forms, docs/bicc.md "Does BiCC reach the policy that samples?").
ADVICE = {
    SHOWN: "run: --bicc true (the distill form, the default) against plain GRPO with "
    "`contrastive-rlvr compare`; on the one task where the premise was shown no form beat "
    "GRPO in 100 or 300 steps (distill +0.5 +- 1.7 pp at 300, the paper's conditioned form "
    "-16.5 +- 7.2)",
    NOT_SHOWN: "run: plain GRPO (--bicc false), or --bicc true (the distill form at weight "
    "0.1, within noise of GRPO where the premise did not hold); not the paper's form "
    "(--bicc_form conditioned), which lost 25 points on the arithmetic task and trailed "
    "GRPO by 16 on SmolLM2's word problems",
    REVERSED: "run: plain GRPO (--bicc false); every BiCC form would learn from a context "
    "that points the wrong way",
    UNDETERMINED: "run: nothing decided yet; measure again with more problems",
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
    if result.transfer is not None:
        t = result.transfer
        lines.append(
            f"\nbicc/transfer_cos at the start weights ({t['groups']} groups; cosine with plain "
            f"GRPO's gradient on the plain prompt): conditioned form {_num(t['conditioned'])}, "
            f"distill form {_num(t['distill'])}"
        )
    lines.append(f"\nverdict (net per token): {result.verdict.upper()}")
    lines.append(f"  {MEANINGS[result.verdict]}")
    lines.append(f"  {ADVICE[result.verdict]}")
    return "\n".join(lines)


def _num(value: float) -> str:
    return "n/a (a zero gradient)" if value != value else f"{value:+.3f}"


def dump(result: PremiseResult) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"

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

The package: :mod:`.measure` (the measurement and the verdict), :mod:`.command` (the
command: sampling from a run's model and scoring with its rewards), :mod:`.report` (the
printed table and premise.json).
"""

from __future__ import annotations

from .command import check_options, run_premise, sample_groups, total_rewards
from .measure import (
    CONTROLS,
    NOT_SHOWN,
    REVERSED,
    SHOWN,
    UNDETERMINED,
    Conditioning,
    Group,
    PremiseResult,
    measure,
    measure_group,
    verdict,
)
from .report import dump, format_table

__all__ = [
    "CONTROLS",
    "Conditioning",
    "Group",
    "NOT_SHOWN",
    "PremiseResult",
    "REVERSED",
    "SHOWN",
    "UNDETERMINED",
    "check_options",
    "dump",
    "format_table",
    "measure",
    "measure_group",
    "run_premise",
    "sample_groups",
    "total_rewards",
    "verdict",
]

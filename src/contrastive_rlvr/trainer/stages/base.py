"""What every stage shares: the batch it works on, the context it is given, and the
pipeline that runs the stages in order and times each one.

A stage is a small object with a ``name`` (its ``timing_s/<name>`` metric), the
batch entries it ``reads`` and ``writes``, and ``__call__(batch, ctx)``. Its
settings are constructor arguments (taken from the config in one place,
:func:`~contrastive_rlvr.trainer.stages.build.build_stages`); what it needs at
run time comes from the :class:`StageContext`: the group size, gather helpers,
log-prob forwards, TRL's generate-and-score, a logger. So a stage can be run on
a hand-made batch with a hand-made context, without a trainer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

# Entries of the batch as TRL's generate-and-score leaves them (``data.*``), the
# gathered total rewards and the dataset rows the batch was generated from.
TRL_ENTRIES = frozenset(
    {
        "data.prompt_ids",
        "data.prompt_mask",
        "data.completion_ids",
        "data.completion_mask",
        "data.advantages",
        "data.num_items_in_batch",
        "data.old_per_token_logps",
        "data.ref_per_token_logps",
        "rewards",
        "prompts",
    }
)


@dataclass
class Batch:
    """A generation batch between TRL's scoring and the loss.

    Attributes:
        data: per-row entries of this process's B rows, what the loss reads (TRL's
            ``prompt_ids``, ``completion_mask``, ... plus the stages' own, e.g.
            ``advantages``, ``bicc_prompt_ids``, ``reco_weights``). Named
            ``data.<key>`` in ``reads`` / ``writes``.
        rewards: (B_global,) total reward of every row of every process, in process
            order: group statistics are taken on it.
        prompts: the B dataset rows (dicts) this process generated for; stages that
            sample again (OC-GRPO) read them.
        shared: values the stages pass to later stages and that the loss does not
            read (``old_logps``: (B, T) log pi_old(o | q) of the plain prompt;
            ``delta``: (B_global,); ``outcome_advantages``: (B_global,); ``stats``).
            Named ``shared.<key>``.
    """

    data: dict[str, Any]
    rewards: torch.Tensor
    prompts: Sequence[dict] = ()
    shared: dict[str, Any] = field(default_factory=dict)


LogpsFn = Callable[..., torch.Tensor]


@dataclass
class StageContext:
    """What a stage may use at run time besides the batch (one per batch and mode).

    Attributes:
        group_size: G, completions per prompt in this mode.
        process_index, num_processes: this process among the data-parallel ones.
        gather: concatenate a tensor over processes (dim 0), in process order.
        gather_object: the same for a list of Python objects.
        pad_across_processes: ``(tensor, dim, pad_index)`` -> padded to the widest
            process's size along ``dim``, so it can be gathered.
        reduce: ``(tensor, "sum" | "max")`` over processes.
        log: ``(key, value)`` -> a logged metric of this mode.
        policy_logps / reference_logps: no-grad per-token log-probs (B, T) of the
            completions after the prompts, ``(prompt_ids, prompt_mask, completion_ids,
            completion_mask, share_prefix=False)``; ``reference_logps`` is None when no
            frozen reference is built.
        generate_and_score: TRL's generation and scoring of dataset rows -> (batch
            dict of this process, (B_global,) total rewards), for stages that sample.
        draw_prompts: ``n`` -> n fresh dataset rows (dynamic sampling's refills).
        tokenizer: the processing class (decode, pad id).
        max_positions: the model's ``max_position_embeddings`` (None if unknown).
    """

    group_size: int
    gather: Callable[[torch.Tensor], torch.Tensor]
    gather_object: Callable[[list], list]
    log: Callable[[str, float | torch.Tensor], None]
    policy_logps: LogpsFn
    reference_logps: LogpsFn | None = None
    process_index: int = 0
    num_processes: int = 1
    pad_across_processes: Callable[..., torch.Tensor] = lambda t, dim=0, pad_index=0: t
    reduce: Callable[[torch.Tensor, str], torch.Tensor] = lambda t, reduction: t
    generate_and_score: Callable[[list[dict]], tuple[dict, torch.Tensor]] | None = None
    draw_prompts: Callable[[int], list[dict]] | None = None
    tokenizer: Any = None
    max_positions: int | None = None

    def rows(self, num_local: int) -> slice:
        """This process's rows in a gathered tensor of ``num_local`` rows per process."""
        start = self.process_index * num_local
        return slice(start, start + num_local)


class Stage(Protocol):
    """One step of the pipeline (see the module docstring)."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch: ...


class Pipeline:
    """Stages run in order on each generation batch; each timed as ``timing_s/<name>``.

    Built once; checks that every stage, and then the loss (``loss_reads``, the loss
    object's ``reads``), reads only what TRL or an earlier stage provides (optional reads
    end in ``?``)."""

    def __init__(self, stages: Sequence[Stage], loss_reads: Sequence[str] = ()) -> None:
        self.stages = list(stages)
        available = set(TRL_ENTRIES)
        readers = [(f"stage {s.name!r}", s.reads, s.writes) for s in self.stages]
        for reader, reads, writes in [*readers, ("the loss", loss_reads, ())]:
            missing = [r for r in reads if not r.endswith("?") and r not in available]
            if missing:
                raise ValueError(
                    f"{reader} reads {missing}, which no earlier stage writes "
                    f"(stages: {self.names})"
                )
            available.update(writes)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        for stage in self.stages:
            start = time.perf_counter()
            batch = stage(batch, ctx)
            ctx.log(f"timing_s/{stage.name}", time.perf_counter() - start)
        return batch

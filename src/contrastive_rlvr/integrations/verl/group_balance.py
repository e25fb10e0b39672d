"""The ``crlvr_sync`` balancing hook: with BiCC, verl balances on the conditioned lengths
the actor update sees; with ConSPO, whole groups go to the data-parallel ranks (verl
balances rows, which splits groups), after checking the settings that keep every
micro-batch made of whole groups."""

from __future__ import annotations

import torch
from verl.utils.seqlen_balancing import (
    calculate_workload,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
)

from . import transfer
from .groups import check_conspo_layout, group_rows, whole_group_order


class GroupBalance:
    """``_balance_batch`` of :class:`~.trainer.CrlvrTrainer` (a mixin before verl's
    ``PPOTrainerSync``, whose balance runs for every other estimator). Reads the trainer's
    ``config``, ``crlvr``, ``_conspo`` (:class:`~.advantage_hooks.AdvantageHooks`) and
    ``_bicc_rows`` (:class:`~.bicc_hooks.BiCCHooks`)."""

    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        if not self.crlvr.bicc or self.crlvr.bicc_form == "distill":
            # the distill form's update reads the plain rows
            return self._balance(batch, metrics, logging_prefix, keep_minibatch)
        # Balance on the lengths the actor's update will see: the conditioned rows (the
        # old / reference passes run on the plain ones). Only the local tags change, and
        # only for the balancing.
        added = self._bicc_rows(batch).context_tokens.tolist()
        plain = {key: tag["seq_len"] for key, tag in zip(batch.keys, batch.tags, strict=True)}
        for tag, extra in zip(batch.tags, added, strict=True):
            tag["seq_len"] = tag["seq_len"] + extra
        balanced = batch
        try:
            balanced = self._balance(batch, metrics, logging_prefix, keep_minibatch)
            return balanced
        finally:
            # verl's padding may return a new batch object; put the plain lengths on both.
            for meta in {id(batch): batch, id(balanced): balanced}.values():
                for key, tag in zip(meta.keys, meta.tags, strict=True):
                    if key in plain:
                        tag["seq_len"] = plain[key]

    def _balance(self, batch, metrics, logging_prefix, keep_minibatch):
        """verl's balance, or with ConSPO whole groups over the data-parallel ranks."""
        if not self._conspo:
            return super()._balance_batch(batch, metrics, logging_prefix, keep_minibatch)
        dp_size = self._actor_dp_size()
        actor = self.config.actor_rollout_ref.actor
        group_size = int(self.config.actor_rollout_ref.rollout.n)
        check_conspo_layout(
            group_size=group_size,
            shuffle=bool(actor.get("shuffle", False)),
            use_dynamic_bsz=bool(actor.get("use_dynamic_bsz", False)),
            micro_batch_size_per_gpu=actor.get("ppo_micro_batch_size_per_gpu"),
            mini_batch_size=int(actor.ppo_mini_batch_size),
            dp_size=dp_size,
        )
        multiple = self._get_required_batch_multiple(dp_size)
        if len(batch) % multiple != 0:
            raise ValueError(
                f"ConSPO: the batch has {len(batch)} rows, not a multiple of {multiple}; verl "
                "would pad it with rows that split groups. Make data.train_batch_size a "
                "multiple of actor.ppo_mini_batch_size and of the data-parallel size"
            )
        rows = group_rows([transfer.group_id(k) for k in batch.keys])
        if any(len(r) != group_size for r in rows) or len(rows) % dp_size != 0:
            raise ValueError(
                f"ConSPO needs {len(batch)} rows to form whole groups of rollout.n={group_size} "
                f"in a number divisible by the data-parallel size {dp_size}; got group sizes "
                f"{sorted({len(r) for r in rows})} and {len(rows)} groups"
            )
        seqlen = torch.tensor([tag["seq_len"] for tag in batch.tags], dtype=torch.int64)
        workload = calculate_workload(seqlen)
        group_work = [int(workload[r].sum()) for r in rows]
        parts = get_seqlen_balanced_partitions(group_work, k_partitions=dp_size, equal_size=True)
        batch.reorder(whole_group_order(parts, rows))
        group_len = [int(seqlen[r].sum()) for r in rows]
        metrics.update(
            log_seqlen_unbalance(seqlen_list=group_len, partitions=parts, prefix=logging_prefix)
        )
        return batch

    def _actor_dp_size(self) -> int:
        """Data-parallel size of the actor, as verl's ``_balance_batch`` finds it."""
        worker_group = self.actor_rollout_wg
        if "actor" not in worker_group._dispatch_info:
            worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
        return max(worker_group._dispatch_info["actor"]) + 1

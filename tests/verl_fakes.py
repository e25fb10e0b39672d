"""An in-memory TransferQueue for the verl trainer's hooks (needs .venv-verl's tensordict).

It keeps the two ways verl reads the store apart, because a hook that confuses them
stops a real run at its first update:

- the driver (``kv_batch_get`` by keys) reads any field stored for those keys;
- verl's workers read a batch through its meta: only the fields the meta lists
  (``verl.utils.transferqueue_utils.kv_batch_meta2batch_meta`` selects
  ``meta.fields``). :meth:`FakeTQ.worker_get` does what they do, and raises the
  ``KeyError`` TensorDict raises in verl's loss for a field the meta does not list.

``kv_batch_put`` returns the meta TransferQueue returns: the keys, the stored tags
and every field persisted for those keys, the written ones included.
"""

from __future__ import annotations

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict
from transfer_queue import KVBatchMeta


class FakeTQ:
    """Per key, per field, one 1-D tensor (nested on the way out, as verl keeps them) or a
    Python object such as verl's ``raw_prompt`` chat messages (a non-tensor stack)."""

    def __init__(self, rows):
        self.rows = {k: dict(v) for k, v in rows.items()}
        self.tags = {}

    def _read(self, keys, select_fields):
        out = TensorDict({}, batch_size=len(keys))
        for f in select_fields:
            values = [self.rows[k][f] for k in keys]
            if isinstance(values[0], torch.Tensor):
                out[f] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
            else:
                out[f] = NonTensorStack(*[NonTensorData(v) for v in values])
        return out

    def stored_fields(self, keys) -> list[str]:
        """The fields persisted for every one of ``keys``, in the order they were first written."""
        first = list(self.rows[keys[0]]) if keys else []
        return [f for f in first if all(f in self.rows[k] for k in keys)]

    def meta(self, keys, tags=None, partition_id="train") -> KVBatchMeta:
        """The meta verl's previous write hands to a hook: every field stored so far listed,
        and ``tags`` (stored, as that write stored them) or the stored tags."""
        if tags is not None:
            for key, tag in zip(keys, tags, strict=True):
                self.tags[key] = dict(tag)
        tags = [dict(self.tags.get(k, {})) for k in keys]
        return KVBatchMeta(
            keys=list(keys), tags=tags, partition_id=partition_id, fields=self.stored_fields(keys)
        )

    def kv_batch_get(self, keys, partition_id, select_fields):
        return self._read(keys, select_fields)

    def worker_get(self, meta: KVBatchMeta, select_fields) -> TensorDict:
        """What a verl worker reads of ``meta``: only the listed fields (all when unlisted)."""
        listed = self.stored_fields(meta.keys) if meta.fields is None else list(meta.fields)
        for f in select_fields:
            if f not in listed:
                # the message TensorDict gives in verl/workers/utils/losses.py
                raise KeyError(f'key "{f}" not found in TensorDict with keys {sorted(listed)}')
        return self._read(meta.keys, select_fields)

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        if fields is None and tags is None:
            raise ValueError("Please provide at least one parameter of `fields` or `tags`.")
        if fields is not None:
            for name in fields.keys():
                for key, value in zip(keys, fields[name].unbind(), strict=True):
                    self.rows.setdefault(key, {})[name] = value.clone()
        # TransferQueue keeps the stored tags when a put brings none
        if tags is not None:
            for key, tag in zip(keys, tags, strict=True):
                self.tags[key] = dict(tag)
        return KVBatchMeta(
            keys=list(keys),
            tags=[dict(self.tags.get(k, {})) for k in keys],
            partition_id=partition_id,
            fields=self.stored_fields(list(keys)),
        )


class FakeProbeWorkers:
    """The actor worker group's ``crlvr_transfer_probe`` as the ``crlvr_sync`` trainer calls
    it: reads, through the meta as a worker does, the prompts, advantages and (when
    listed) the teacher fields of the rows of each phase, records them in ``calls``, and
    returns ``value`` after the ``"applied"`` phase."""

    def __init__(self, store: FakeTQ, value: float = 0.5) -> None:
        self.store, self.value = store, value
        self.calls: list[dict] = []

    def crlvr_transfer_probe(self, meta: KVBatchMeta) -> dict:
        phase = meta.extra_info["crlvr_probe_phase"]
        listed = self.store.stored_fields(meta.keys) if meta.fields is None else meta.fields
        optional = ("advantages", "bicc_teacher_log_probs", "bicc_probe_advantages")
        fields = ["prompts", *(f for f in optional if f in listed)]
        got = self.store.worker_get(meta, fields)
        self.calls.append(
            {"phase": phase, **{f: [t.tolist() for t in got[f].unbind()] for f in fields}}
        )
        return {"metrics": {"bicc/transfer_cos": self.value} if phase == "applied" else {}}

"""An in-memory TransferQueue for the verl trainer's hooks (needs .venv-verl's tensordict)."""

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

    def kv_batch_get(self, keys, partition_id, select_fields):
        out = TensorDict({}, batch_size=len(keys))
        for f in select_fields:
            values = [self.rows[k][f] for k in keys]
            if isinstance(values[0], torch.Tensor):
                out[f] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
            else:
                out[f] = NonTensorStack(*[NonTensorData(v) for v in values])
        return out

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        if fields is not None:
            for name in fields.keys():
                for key, value in zip(keys, fields[name].unbind(), strict=True):
                    self.rows[key][name] = value.clone()
        tags = tags if tags is not None else [{} for _ in keys]
        for key, tag in zip(keys, tags, strict=True):
            self.tags[key] = dict(tag)
        return KVBatchMeta(keys=list(keys), tags=[dict(t) for t in tags])

"""TransferQueue access of the ``crlvr_sync`` hooks: every read and write of a batch's
fields goes through here (one module to stand a fake store in for tests).

verl's v1 trainers keep a batch's fields in TransferQueue and pass around its meta
(``KVBatchMeta``: keys, tags, the list of fields stored).
"""

from __future__ import annotations

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta


def group_id(key: str) -> str:
    """The prompt uid of a TransferQueue key ``{uid}_{session_id}_{index}``."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3:
        raise ValueError(f"unexpected TransferQueue key {key!r}; expected uid_session_index")
    return parts[0]


def fetch(batch: KVBatchMeta, fields: list[str]) -> TensorDict:
    """The fields ``fields`` of ``batch``'s rows, read by key (whatever its meta lists)."""
    return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)


def put(batch: KVBatchMeta, fields: TensorDict, tags: list[dict] | None = None) -> KVBatchMeta:
    """Write ``fields`` (and ``tags``) for ``batch``'s rows; return TransferQueue's meta of
    the write, which lists every field stored for them, the written ones included.

    verl's workers fetch only the fields a meta lists, so a hook hands on this meta, not
    the one it was given (whose list predates the write). The batch's ``extra_info``
    (what the driver tells the workers, e.g. the sampling temperature) is carried over.
    """
    meta = tq.kv_batch_put(
        keys=batch.keys, partition_id=batch.partition_id, fields=fields, tags=tags
    )
    meta.extra_info = {**(batch.extra_info or {}), **(meta.extra_info or {})}
    return meta


def nested(rows: list[torch.Tensor]) -> torch.Tensor:
    """Rows of different lengths as one jagged nested tensor (TransferQueue's layout)."""
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)

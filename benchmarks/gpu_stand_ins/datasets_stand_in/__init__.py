"""A stand-in for Hugging Face ``datasets`` in the GPU check's bundle (see ../README.md):
an in-memory, row-oriented :class:`Dataset` with the methods and attributes the training path
uses (TRL's GRPOTrainer, transformers' Trainer, the project's trainer)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

__version__ = "0.0.0+gpu-check-stand-in"
STAND_IN = True


class Dataset:
    """Rows as dicts of one set of columns."""

    def __init__(self, rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
        self._rows = [dict(row) for row in rows]
        self._columns = list(columns if columns is not None else (rows[0] if rows else []))

    @classmethod
    def from_dict(cls, mapping: dict[str, list[Any]], **_: Any) -> Dataset:
        lengths = {len(values) for values in mapping.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        return cls([{k: v[i] for k, v in mapping.items()} for i in range(n)], list(mapping))

    @classmethod
    def from_list(cls, rows: list[dict[str, Any]], **_: Any) -> Dataset:
        return cls(rows)

    @property
    def column_names(self) -> list[str]:
        return list(self._columns)

    @property
    def cache_files(self) -> list[dict[str, str]]:
        """None: the rows live in memory (TRL's telemetry reads this)."""
        return []

    @property
    def num_rows(self) -> int:
        return len(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(row) for row in self._rows)

    def __getitem__(self, key: int | slice | str | list[int]) -> Any:
        if isinstance(key, str):
            return [row[key] for row in self._rows]
        if isinstance(key, slice):
            rows = self._rows[key]
            return {c: [row[c] for row in rows] for c in self._columns}
        if isinstance(key, list):
            return {c: [self._rows[i][c] for i in key] for c in self._columns}
        return dict(self._rows[key])

    def select(self, indices: Any) -> Dataset:
        return Dataset([self._rows[i] for i in indices], self._columns)

    def shuffle(self, seed: int | None = None, **_: Any) -> Dataset:
        rows = list(self._rows)
        random.Random(seed).shuffle(rows)
        return Dataset(rows, self._columns)

    def map(self, function: Callable[[dict], dict | None], **_: Any) -> Dataset:
        rows = []
        for row in self._rows:
            update = function(dict(row))
            rows.append({**row, **(update or {})})
        columns = list(dict.fromkeys([*self._columns, *(rows[0] if rows else [])]))
        return Dataset(rows, columns)


class IterableDataset:
    """Never built in the GPU check; TRL checks ``isinstance`` against it."""


class DatasetDict(dict):
    """Never built in the GPU check; TRL checks ``isinstance`` against it."""


class IterableDatasetDict(dict):
    """Never built in the GPU check; TRL checks ``isinstance`` against it."""

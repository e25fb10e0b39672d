"""TRL's prompt sampler, made to resume past an epoch exactly.

TRL's ``RepeatSampler`` draws one permutation per epoch from its own generator,
seeded once when the sampler is built. An uninterrupted run's epoch ``e`` uses the
``e+1``-th draw; a run resumed in epoch ``e`` builds a new sampler, whose first
draw is epoch 0's permutation, so it replays epoch 0's prompt order (and diverges
at the first resumed step). The Trainer calls ``set_epoch(e)`` before each epoch:
here that draws, and throws away, the permutations of the epochs this sampler has
not drawn, so epoch ``e`` gets the permutation it would have had. An uninterrupted
run's order is TRL's, unchanged (``set_epoch`` draws nothing there).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from trl.trainer.utils import RepeatSampler


class EpochAlignedSampler(RepeatSampler):
    """A ``RepeatSampler`` whose ``set_epoch(e)`` catches its generator up to epoch ``e``."""

    draws = 0  # permutations drawn so far (one per epoch)

    @classmethod
    def from_sampler(cls, sampler: RepeatSampler) -> EpochAlignedSampler:
        aligned = cls.__new__(cls)
        aligned.__dict__.update(sampler.__dict__)
        aligned.draws = 0
        return aligned

    def set_epoch(self, epoch: int) -> None:
        while self.shuffle and self.draws < epoch:
            torch.randperm(self.num_samples, generator=self.generator)  # epoch self.draws
            self.draws += 1

    def __iter__(self) -> Iterator[int]:
        self.draws += 1
        yield from super().__iter__()


class EpochAlignedResume:
    """Trainer mixin: TRL's ``_get_train_sampler`` hook, its sampler made an
    :class:`EpochAlignedSampler` (tests/reliability/test_fault_scenarios.py resumes past two
    epochs and compares the weights bit for bit)."""

    def _get_train_sampler(self, dataset=None):
        return EpochAlignedSampler.from_sampler(super()._get_train_sampler(dataset))

"""The trainer's work on a generation batch after TRL's generation and scoring, as an
ordered list of stages (one module each); :func:`build_stages` builds the list from
the config. See docs/architecture.md for the table of stages."""

from .advantages import Advantages
from .base import Batch, Pipeline, Stage, StageContext
from .batch_diagnostics import BatchDiagnostics
from .bicc import ConditionedPrompts
from .build import RunFacts, build_stages, needs_reference
from .dynamic_sampling import DynamicSampling, PromptWalk
from .hinted_round import HintedRound
from .logprobs import LogProbPasses
from .nonfinite import RestoreSkippedRewards, SkipNonFiniteGroups
from .reco import OccurrenceWeights
from .rewards import RowRewards
from .verigate import ProcessAdvantages

__all__ = [
    "Advantages",
    "Batch",
    "BatchDiagnostics",
    "ConditionedPrompts",
    "DynamicSampling",
    "HintedRound",
    "LogProbPasses",
    "OccurrenceWeights",
    "Pipeline",
    "ProcessAdvantages",
    "PromptWalk",
    "RestoreSkippedRewards",
    "RowRewards",
    "RunFacts",
    "SkipNonFiniteGroups",
    "Stage",
    "StageContext",
    "build_stages",
    "needs_reference",
]

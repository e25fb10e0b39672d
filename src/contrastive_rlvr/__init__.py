"""contrastive-rlvr: RLVR for language models with contrastive GRPO variants.

The math lives in :mod:`contrastive_rlvr.algorithms` (pure PyTorch); the
trainer, rewards, data and command line build on it.
"""

__version__ = "0.1.0"

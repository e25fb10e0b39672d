"""TRL test-suite parity harness: TRL's own GRPO tests, offline, stock vs ``RLVRTrainer``.

See docs/trl-parity.md. ``extract`` copies the test files out of a TRL git snapshot
into the gitignored ``.trl-suite/`` folder, ``tiny_hub`` builds the offline stand-ins for
the Hub models and datasets, ``plugin`` is the pytest plugin that wires them in (and swaps
the trainer class in ``rlvr`` mode), and ``run`` runs both modes and writes the comparison.
"""

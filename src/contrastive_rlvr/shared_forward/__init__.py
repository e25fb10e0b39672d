"""The shared-prefix forward: log-probs of rows whose prompts repeat, with each distinct
prompt encoded once.

Under BiCC every row of a partition reads the same conditioned prompt, under plain GRPO
every row of a group the same prompt; these modules compute those rows' log-probs without
encoding the prompt once per row. They depend on torch and transformers only (no trainer
code), so the trainer, the benchmarks and the tests use them alike.

- :mod:`.sharing`: which form runs for a model, chosen once and logged (:class:`PromptSharing`).
- :mod:`.packed_prefix`: the packed layout, one forward with each prompt packed once.
- :mod:`.packed_kernels`: that layout's attention on flash varlen and flex_attention.
- :mod:`.probe`: the check that the packed forward equals the per-row one on a model.
- :mod:`.prefix`: the two-pass key/value-cache form.
"""

"""The procedural arithmetic task of the embedded default: chained sums with worked steps.

A problem is a left-to-right chain of one-digit operands, e.g. ``5+9+3``. The
prompt is the expression and ``=``; the completion is a worked chain whose
first left operand is the value of the first two terms and each further step
adds (or subtracts) the next term::

    prompt  5+9+3=      completion  14+3=17            (terms=3: one step)
    prompt  5+9+3+2=    completion  14+3=17,17+2=19    (terms=4: two steps)

So a problem of ``n`` terms has ``n - 2`` steps, comma-separated, each of the
form ``a op b=c``; the final number is the answer. Only ``+`` and ``-`` are
offered: they share one precedence, so left-to-right evaluation is the usual
value of the expression (``-`` may give negative numbers, written ``-6``).

The default (three terms, ``+``, operands 0..9) has only 1000 distinct
problems and every partial sum 0..18 occurs in training, so held-out accuracy
measures generalisation to unseen operand triples, not to unseen arithmetic
facts; ``terms=4`` (10,000 problems, two-step chains) is a harder variant
whose longer completions also give BiCC a larger context to work with.

Rules used by the reward and the step checker:

- the reward reads the completion, surrounding whitespace removed, as a
  *chain*: pieces separated by ``,``, each a step ``a op b = c`` (integers,
  ``op`` one of ``+ - *``, whitespace allowed around every part; ``_STEP``).
  It is 1.0 iff every piece is such a step and the last step's ``c`` equals
  the answer. The arithmetic of earlier steps is not checked: the outcome
  reward looks at the outcome only.
- :func:`check_steps` (VeriGate's exact step checker) splits on ``,`` or
  newlines, skipping blank pieces, and judges each step: right iff
  ``a op b == c``; given the prompt it must also continue the chain: ``op b``
  is the next term of the prompt, ``a`` is the previous step's written ``c``
  (for the first step, the true value of the first two terms), and there are
  no more steps than the prompt has terms to add. So an error is charged to
  the step that makes it, not to the steps that carry it on correctly. (A
  running chain ``14+3=17+2=19`` in one step counts as two reductions.)
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from datasets import Dataset

from ..algorithms import ArithmeticStepScorer, split_steps

#: Operators a task may use (one precedence level: left-to-right = usual value).
TASK_OPS = "+-"
# Above this many distinct problems the space is sampled instead of enumerated.
ENUMERATE_LIMIT = 200_000
# Wrong demonstrations are off by one of these (an off-by-one or a carry slip).
ERROR_DELTAS = (-10, -1, 1, 10)

_INT = r"-?\d+"
_STEP = re.compile(rf"^\s*({_INT})\s*([-+*])\s*({_INT})\s*=\s*({_INT})\s*$")
_PROMPT = re.compile(r"^\d+(?:[-+?]\d+)+=$")
#: What a hidden operator shows in the prompt (``TaskConfig.hidden_ops``).
HIDDEN = "?"


def rule_op(operand: int) -> str:
    """The hidden-operator task's rule: the operator before an operand is ``+`` when the
    operand is even, ``-`` when it is odd (``5?4?3=`` is ``5+4-3``)."""
    return "+" if operand % 2 == 0 else "-"


def _apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    raise ValueError(f"unknown operator {op!r}")


@dataclass(frozen=True)
class Problem:
    """One chain ``operands[0] ops[0] operands[1] ...``, ``len(ops) = len(operands) - 1``."""

    operands: tuple[int, ...]
    ops: tuple[str, ...]
    hidden: bool = False

    def __post_init__(self) -> None:
        if len(self.operands) < 3:
            raise ValueError(f"a problem needs at least 3 terms, got {self.operands}")
        if len(self.ops) != len(self.operands) - 1:
            raise ValueError(f"{len(self.operands)} operands need {len(self.operands) - 1} ops")
        bad = [op for op in self.ops if op not in TASK_OPS]
        if bad:
            raise ValueError(f"ops must be among {TASK_OPS!r}, got {bad}")
        if self.hidden and self.ops != tuple(rule_op(x) for x in self.operands[1:]):
            raise ValueError(f"a hidden-operator problem's ops follow rule_op: {self}")

    @property
    def prompt(self) -> str:
        """``5+9+3=``; with ``hidden``, ``5?9?3=``."""
        text = str(self.operands[0])
        for op, x in zip(self.ops, self.operands[1:], strict=True):
            text += f"{HIDDEN if self.hidden else op}{x}"
        return text + "="

    def partial_values(self) -> list[int]:
        """Running values after each operator: ``[5+9, 5+9+3, ...]``."""
        values = [self.operands[0]]
        for op, x in zip(self.ops, self.operands[1:], strict=True):
            values.append(_apply(values[-1], op, x))
        return values[1:]

    @property
    def answer(self) -> int:
        return self.partial_values()[-1]

    def chain(self, error_step: int | None = None, delta: int = 0) -> str:
        """The worked chain; with ``error_step``, that step's result is off by ``delta``
        and later steps carry the wrong value on correctly (as a real slip would)."""
        steps = []
        value = self.partial_values()[0]
        for k, (op, x) in enumerate(zip(self.ops[1:], self.operands[2:], strict=True)):
            result = _apply(value, op, x) + (delta if k == error_step else 0)
            steps.append(f"{value}{op}{x}={result}")
            value = result
        return ",".join(steps)

    @property
    def solution(self) -> str:
        """The reference worked chain (``14+3=17``)."""
        return self.chain()


def parse_prompt(prompt: str) -> Problem:
    """The :class:`Problem` of a prompt such as ``5+9+3=``."""
    text = prompt.strip()
    if not _PROMPT.match(text):
        raise ValueError(f"not an arithmetic-chain prompt: {prompt!r} (expected e.g. '5+9+3=')")
    tokens = re.findall(r"\d+|[-+?]", text[:-1])
    operands, ops = tuple(int(t) for t in tokens[0::2]), tuple(tokens[1::2])
    if HIDDEN not in ops:
        return Problem(operands, ops)
    if any(op != HIDDEN for op in ops):
        raise ValueError(f"a prompt hides all of its operators or none: {prompt!r}")
    return Problem(operands, tuple(rule_op(x) for x in operands[1:]), hidden=True)


def _completion_text(completion: object) -> str:
    """A completion as text: TRL passes strings, or message lists for chat datasets."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise ValueError(f"completion must be a string or a list of messages, got {completion!r}")


def parse_chain(completion: str) -> list[tuple[int, str, int, int] | None]:
    """Each comma-separated piece as ``(a, op, b, c)``, or None where malformed.

    An empty (or all-whitespace) completion has no steps: ``[]``.
    """
    text = completion.strip()
    if not text:
        return []
    steps: list[tuple[int, str, int, int] | None] = []
    for piece in text.split(","):
        m = _STEP.match(piece)
        steps.append(None if m is None else (int(m[1]), m[2], int(m[3]), int(m[4])))
    return steps


def check_steps(completion: str, prompt: str | None = None) -> list[bool]:
    """Judge every step of a worked chain, for VeriGate's process scores.

    Steps are the pieces of ``split_steps(completion, "chain")`` (separated by
    ``,`` or newlines, blank pieces skipped); each is judged by the algorithm
    core's :class:`~contrastive_rlvr.algorithms.ArithmeticStepScorer`,
    so the trainer's process scorer and this checker cannot drift apart.
    Without ``prompt``: right iff every ``=`` in the step holds. With
    ``prompt``: also the step continues the prompt's chain (rule in the module
    docstring). Returns one bool per step (``[]`` for an empty completion).
    """
    text = _completion_text(completion)
    steps = [text[start:end] for start, end in split_steps(text, "chain")]
    if prompt is None:
        scores = ArithmeticStepScorer(follow_prompt=False)("", steps)
    else:
        parse_prompt(prompt)  # a clear error for a prompt of another task
        scores = ArithmeticStepScorer(follow_prompt=True)(prompt, steps)
    return [score == 1.0 for score in scores]


def chain_answer(completion: str) -> int | None:
    """The final number of a well-formed chain, None if any piece is malformed or it is empty."""
    steps = parse_chain(completion)
    if not steps or any(s is None for s in steps):
        return None
    return steps[-1][3]


def arithmetic_reward(
    prompts: Sequence[object], completions: Sequence[object], answer: Sequence[str], **kwargs
) -> list[float]:
    """TRL reward function: 1.0 iff the completion is a well-formed chain whose final
    number equals ``answer`` (the dataset column, a string), else 0.0.

    Signature as TRL's ``GRPOTrainer`` calls reward functions (extra dataset
    columns such as ``solution`` arrive in ``kwargs`` and are ignored).
    """
    if len(completions) != len(answer):
        raise ValueError(
            f"arithmetic_reward: {len(completions)} completions but {len(answer)} answers"
        )
    rewards = []
    for completion, target in zip(completions, answer, strict=True):
        final = chain_answer(_completion_text(completion))
        rewards.append(1.0 if final is not None and str(final) == str(target).strip() else 0.0)
    return rewards


@dataclass(frozen=True)
class TaskConfig:
    """Settings of the procedural task.

    Attributes:
        terms: operands per problem (>= 3); a problem has ``terms - 2`` steps.
        ops: operators to draw from (a subset of ``"+-"``).
        max_operand: operands are drawn from ``0..max_operand``.
        heldout_size: problems in the held-out split.
        train_size: problems in the train split; None = every problem not held
            out (only when the space has at most ``ENUMERATE_LIMIT`` problems).
        seed: the split (and sampling, for large spaces) depends only on this.
        hidden_ops: the hidden-operator task (docs/bicc.md, "A task where the premise
            holds"): each operator is :func:`rule_op` of the operand after it and the prompt
            shows ``?`` in its place (``5?4?3=`` is ``5+4-3``); ``ops`` is ignored (both are
            used). The warm start's demonstrator does not know the rule (it draws each
            operator at random, :func:`noisy_solution`), so the plain prompt leaves the
            model guessing while the group's correct attempts show which operators hold.
    """

    terms: int = 3
    ops: str = "+"
    max_operand: int = 9
    heldout_size: int = 200
    train_size: int | None = None
    seed: int = 0
    hidden_ops: bool = False

    def __post_init__(self) -> None:
        if self.terms < 3:
            raise ValueError(f"TaskConfig.terms must be >= 3, got {self.terms}")
        if (
            not self.ops
            or any(op not in TASK_OPS for op in self.ops)
            or len(set(self.ops)) != len(self.ops)
        ):
            raise ValueError(
                f"TaskConfig.ops must be distinct operators from {TASK_OPS!r}, got {self.ops!r}"
            )
        if self.max_operand < 1:
            raise ValueError(f"TaskConfig.max_operand must be >= 1, got {self.max_operand}")
        if self.heldout_size < 1:
            raise ValueError(f"TaskConfig.heldout_size must be >= 1, got {self.heldout_size}")
        if self.train_size is not None and self.train_size < 1:
            raise ValueError(f"TaskConfig.train_size must be >= 1 or None, got {self.train_size}")
        wanted = self.heldout_size + (self.train_size or 1)
        if wanted > self.space_size:
            raise ValueError(
                f"TaskConfig: {self.space_size} distinct problems cannot give heldout_size="
                f"{self.heldout_size} and train_size={self.train_size or 'at least 1'}"
            )
        if self.train_size is None and self.space_size > ENUMERATE_LIMIT:
            raise ValueError(
                f"TaskConfig.train_size=None needs at most {ENUMERATE_LIMIT} distinct problems; "
                f"this space has {self.space_size}: set train_size"
            )

    @property
    def space_size(self) -> int:
        """Number of distinct problems."""
        choices = 1 if self.hidden_ops else len(self.ops) ** (self.terms - 1)
        return (self.max_operand + 1) ** self.terms * choices


def _hidden(operands: tuple[int, ...]) -> Problem:
    return Problem(operands, tuple(rule_op(x) for x in operands[1:]), hidden=True)


def _all_problems(cfg: TaskConfig) -> list[Problem]:
    digits = range(cfg.max_operand + 1)
    if cfg.hidden_ops:
        return [_hidden(o) for o in itertools.product(digits, repeat=cfg.terms)]
    return [
        Problem(operands, ops)
        for operands in itertools.product(digits, repeat=cfg.terms)
        for ops in itertools.product(cfg.ops, repeat=cfg.terms - 1)
    ]


def _random_problem(cfg: TaskConfig, rng: random.Random) -> Problem:
    operands = tuple(rng.randint(0, cfg.max_operand) for _ in range(cfg.terms))
    if cfg.hidden_ops:
        return _hidden(operands)
    return Problem(operands, tuple(rng.choice(cfg.ops) for _ in range(cfg.terms - 1)))


def split_problems(cfg: TaskConfig) -> tuple[list[Problem], list[Problem]]:
    """Deterministic, disjoint ``(train, heldout)`` problem lists for ``cfg``.

    Small spaces are enumerated and shuffled with ``random.Random(seed)``: the
    first ``heldout_size`` are held out, the next ``train_size`` (or all the
    rest) are train. Large spaces are sampled without repetition.
    """
    rng = random.Random(cfg.seed)
    if cfg.space_size <= ENUMERATE_LIMIT:
        problems = _all_problems(cfg)
        rng.shuffle(problems)
    else:
        seen: set[Problem] = set()
        problems = []
        while len(problems) < cfg.heldout_size + cfg.train_size:
            p = _random_problem(cfg, rng)
            if p not in seen:
                seen.add(p)
                problems.append(p)
    heldout = problems[: cfg.heldout_size]
    rest = problems[cfg.heldout_size :]
    train = rest if cfg.train_size is None else rest[: cfg.train_size]
    return train, heldout


def to_dataset(problems: Sequence[Problem]) -> Dataset:
    """Columns ``prompt`` (``5+9+3=``), ``answer`` (``"17"``), ``solution`` (``14+3=17``)."""
    return Dataset.from_dict(
        {
            "prompt": [p.prompt for p in problems],
            "answer": [str(p.answer) for p in problems],
            "solution": [p.solution for p in problems],
        }
    )


def make_datasets(cfg: TaskConfig | None = None) -> tuple[Dataset, Dataset]:
    """``(train, heldout)`` datasets of the task (columns as :func:`to_dataset`)."""
    train, heldout = split_problems(cfg or TaskConfig())
    return to_dataset(train), to_dataset(heldout)


def noisy_solution(problem: Problem, rng: random.Random, error_rate: float) -> str:
    """A demonstration: the reference chain, or with probability ``error_rate`` one
    step's result off by one of ``ERROR_DELTAS`` (the step chosen uniformly;
    later steps carry the error on), never negative for ``+``-only problems. For a
    hidden-operator problem the chain is worked with operators drawn at random (the
    demonstrator does not know :func:`rule_op`)."""
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
    if problem.hidden:
        # The demonstrator does not know the rule: each operator is a coin flip.
        guessed = tuple(rng.choice(TASK_OPS) for _ in problem.ops)
        problem = Problem(problem.operands, guessed)
    if rng.random() >= error_rate:
        return problem.solution
    step = rng.randrange(len(problem.ops) - 1)
    value = problem.partial_values()[step + 1]
    # Keep "-"-free chains free of negative numbers: a '-' the model never sees
    # in a prompt of the task would be a giveaway in the demonstrations.
    deltas = [d for d in ERROR_DELTAS if "-" in problem.ops or value + d >= 0]
    return problem.chain(error_step=step, delta=rng.choice(deltas))

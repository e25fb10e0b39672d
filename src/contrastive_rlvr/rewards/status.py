"""The statuses one answer check can end with, shared by the worker, pool and reward."""

CORRECT = "correct"
WRONG = "wrong"
UNPARSABLE = "unparsable"  # math-verify found no expression in the prediction
GOLD_UNPARSABLE = "gold_unparsable"
TIMEOUT = "timeout"  # the worker's alarm fired
ERROR = "error"  # math-verify raised
KILLED = "killed"  # the worker missed the parent's deadline and was killed
CRASHED = "crashed"  # the worker died while checking
NO_ANSWER = "no_answer"  # nothing to check was found in the completion
TOO_LONG = "too_long"  # the extracted answer exceeded max_answer_chars
READY = "ready"  # not a check status: a new worker's first message

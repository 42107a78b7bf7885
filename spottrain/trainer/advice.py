"""What a failed step means, in one line naming the remedy."""

from __future__ import annotations

import re

from spottrain.exits import ConfigError
from spottrain.trainer import config


def nan_advice(cfg: config.TrainConfig, compiled: str = "") -> str:
    """The usual remedies for a diverging loss, minus those already in use.

    ``compiled``: how a line names a ``KerasTask``'s ``model()``, whose compiled
    optimizer trains it (``--learning-rate`` and ``--warmup-steps`` then do nothing
    unless ``--optimizer`` replaces it, and ``--clip-norm`` is refused).
    """
    if compiled and not cfg.optimizer:
        tips = [
            f"lower the learning rate of the optimizer {compiled} compiles with, and clip it "
            "(e.g. keras.optimizers.Adam(1e-4, clipnorm=1.0))"
        ]
    else:
        tips = [f"lower --learning-rate (now {cfg.learning_rate:g})"]
        if not cfg.warmup_steps:
            tips.append("add --warmup-steps")
        if compiled:
            tips.append(f"clip with clipnorm on the optimizer {compiled} compiles with")
        elif not cfg.clip_norm:
            tips.append("set --clip-norm (e.g. 1.0)")
        if cfg.optimizer not in ("", config.DEFAULT_OPTIMIZER):
            tips.append("use --optimizer adam")
    if cfg.mixed_precision:
        tips.append("try without --mixed-precision (float16 overflows)")
    return ", ".join(tips)


def nan_in_data(step: int, found: str, what: str = "the task's train_dataset()") -> str:
    """The remedy when the batch of the NaN step holds non-finite values itself."""
    return (
        f"the batch of step {step} holds non-finite inputs: {found}; fix the task's data "
        f"(what {what} yields), not the learning rate"
    )


# Lines of a traced-function, Keras or TensorFlow runtime error that frame the cause,
# not state it.
_FRAMING = (
    "in user code",
    "File ",
    "Exception encountered",
    "Arguments received",
    "•",
    "Graph execution error",
    "Detected at node",
    "[[",
)
# The original error's own line at the end of a tf.function's "in user code:" message.
_WRAPPED = re.compile(r"^\s*\w+(?:Error|Exception): (.+)$", re.M)


def cause(error: Exception) -> str:
    """The line of a tf.function/Keras/TensorFlow error that says what is wrong."""
    text = getattr(error, "message", None) or str(error)  # an OpError's, without its node
    bold = re.search(r"\x1b\[1m(.+?)\x1b\[0m", text, re.S)
    if bold:
        return bold.group(1).strip()[:300]
    if "in user code:" in text:
        wrapped = _WRAPPED.findall(text)
        if wrapped:
            text = wrapped[-1]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(_FRAMING)] or lines or [""]
    line = re.sub(r"\x1b\[[0-9;]*m", "", lines[0])
    # Graph-mode shape errors quote the whole node ("for '{{node ...}} = Sub[...](...)'").
    line = re.sub(r" for '\{\{node .*?\}\}[^']*'", "", line)
    return re.sub(r"\s*\[\[\{\{node [^]]*\]\]|\s*\[Op:[^]]*\]", "", line)[:300]


def misfit_error(error: Exception, step: int) -> ConfigError:
    """The one line for batches that do not fit the task's model (shape, dtype, structure)."""
    return ConfigError(
        f"the task's batches do not fit its model at step {step} "
        f"({type(error).__name__}: {cause(error)})"
    )

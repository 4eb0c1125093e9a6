"""Training: masked cross-entropy, SGD / Adam, crash-safe checkpoints and the full-batch
trainer (:func:`fit`, :func:`predict`, :func:`evaluate`)."""

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    named_modules,
    named_rngs,
    read_checkpoint,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from .losses import accuracy, cross_entropy
from .optim import SGD, Adam, Optimizer
from .trainer import History, evaluate, fit, predict, resume_epoch

__all__ = [
    "cross_entropy", "accuracy",
    "Optimizer", "SGD", "Adam",
    "Checkpoint", "CheckpointError", "save_checkpoint", "load_checkpoint", "read_checkpoint",
    "named_modules", "named_rngs", "rng_states", "set_rng_states",
    "History", "fit", "predict", "evaluate", "resume_epoch",
]

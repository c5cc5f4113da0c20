"""Error codes of training, checkpoints and weight sync (in addition to the protocol's, docs/protocol.md).

``WEIGHT_SYNC_FAILED`` is raised by ``transfer`` as well (the peer never came, or sent what does not fit)."""

TRAINER_NOT_FOUND = "TRAINER_NOT_FOUND"
"""No trainer is bound to that model (``trainer_create`` first), or its model was unloaded or replaced."""
TRAINER_EXISTS = "TRAINER_EXISTS"
"""A trainer is already bound to that model (pass ``replace``)."""
NON_FINITE_LOSS = "NON_FINITE_LOSS"
"""The loss of a micro-batch was NaN or infinite; nothing was applied (details: ``step``, ``microBatch``)."""
NON_FINITE_GRADIENT = "NON_FINITE_GRADIENT"
"""The gradient norm was NaN or infinite; the optimizer did not step (details: ``step``)."""
LORA_UNAVAILABLE = "LORA_UNAVAILABLE"
"""LoRA was asked for but ``peft`` is not installed in the worker's environment."""
CHECKPOINT_NOT_FOUND = "CHECKPOINT_NOT_FOUND"
"""No checkpoint directory at that path."""
CHECKPOINT_INVALID = "CHECKPOINT_INVALID"
"""The directory is not a complete, readable checkpoint (missing or truncated files, an unreadable state)."""
CHECKPOINT_MISMATCH = "CHECKPOINT_MISMATCH"
"""A whole checkpoint of another setup: another optimizer, LoRA on one side only, other parameter names or
shapes, a format this trainer cannot load. Its files are fine: a resume must not set it aside as damaged."""
WEIGHT_SYNC_FAILED = "WEIGHT_SYNC_FAILED"
"""A weight transfer did not complete: the peer never came, timed out, or sent tensors that do not fit."""

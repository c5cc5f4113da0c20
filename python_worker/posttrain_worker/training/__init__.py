"""Training in the worker: the policy's forward with gradient, micro-batched loss and backward, optimizers and
schedules, checkpoints, and weight sync from a trainer's model to generators (docs/training.md).

Nothing here opens a socket or joins a process group: moving weights between workers is
``posttrain_worker.transfer``'s, and the methods that expose all this over the protocol are in
``posttrain_worker.methods``.
"""

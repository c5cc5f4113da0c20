"""Training in the worker: the policy's forward with gradient, micro-batched loss and backward, optimizers and
schedules, checkpoints, and weight sync from a trainer's model to generators (docs/training.md).

Nothing here reads sockets except ``zmq_transfer`` (raw tensor frames between two workers); the methods that
expose all this over the protocol are in ``posttrain_worker.methods.training``.
"""

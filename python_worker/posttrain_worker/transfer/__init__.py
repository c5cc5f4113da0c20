"""Placement and transport of weights between workers: raw tensor frames over a ZeroMQ pair
(``zmq_transfer``), and torch.distributed process groups with their weight broadcast (``distributed``).

The only package of the worker besides the server that opens sockets or joins a process group. It moves
tensors it is handed and writes what it receives through callbacks; what to send and whether the incoming
tensors fit a model (``training.weight_sync``) is decided above it, in ``methods.weights``. Training never
imports it: the algorithm code never sees placement.
"""

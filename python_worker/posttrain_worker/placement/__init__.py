"""Placement of posttrain workers beyond this machine: the Ray driver (``ray_driver``) the TS SDK runs per
Ray pool, the actor that supervises one worker process on a node (``ray_actor``), and their helpers.

Ray is the control plane here (where each worker runs, restarts); the data plane stays ZeroMQ + Arrow between
the TS side and each worker. Nothing in this package imports Ray at module import time, so the worker package
works without Ray installed; only running the driver needs it (``npx posttrain setup --extras ray``).
The driver's protocol: docs/protocol.md, "Ray driver".
"""

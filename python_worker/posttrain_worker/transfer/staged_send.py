"""Weights sent from a thread of their own (``weights_send`` with ``background``).

The compute thread copies the weights and returns at once, so the worker's next request (a train step) does
not wait for the receivers: a generator's ``weights_receive`` may queue behind a generation in flight. The
copy is the weights of that moment, whatever the next step does to the model. A failed send is logged; the
receivers report it to their callers (``WEIGHT_SYNC_FAILED`` on their timeout).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import torch

from posttrain_worker.transfer import zmq_transfer

log = logging.getLogger(__name__)


def copy_weights(pairs: Sequence[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """A detached copy of every ``(name, tensor)``: what the background send reads."""
    return [(name, tensor.detach().clone()) for name, tensor in pairs]


def send_in_background(
    endpoints: Sequence[str],
    pairs: list[tuple[str, torch.Tensor]],
    version: int,
    bucket_bytes: int,
    timeout_s: float,
    what: str,
) -> threading.Thread:
    """Starts a daemon thread sending ``pairs`` (a copy) to each endpoint in turn, with its own deadline."""

    def run() -> None:
        deadline = zmq_transfer.Deadline(timeout_s, lambda: None, what)
        try:
            for endpoint in endpoints:
                zmq_transfer.send(endpoint, pairs, version, bucket_bytes, deadline)
        except Exception:
            log.exception("%s: the background send of version %d failed", what, version)

    thread = threading.Thread(target=run, name="posttrain-weights-send", daemon=True)
    thread.start()
    return thread

"""The experiment-tracker logger: a program of its own (``python -m posttrain_worker.tracking``), one per run.

The TypeScript run (``loggers`` in its config, docs/trackers.md) starts it and writes JSON lines to its stdin;
it hands each step's metrics, sample completions and the run config to TensorBoard, W&B, MLflow and trackio
through each tracker's own library, offline and under the run directory. Nothing of the worker imports it,
and it imports nothing of the worker but the failure type: a tracker's dependencies never load in a worker.
"""

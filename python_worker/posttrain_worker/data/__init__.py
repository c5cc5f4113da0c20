"""Datasets for the TypeScript loaders: a Hub dataset (by id, through the ``datasets`` library) or a
``save_to_disk`` copy, read here and handed to TypeScript as an Arrow IPC stream (``hub_dataset``)."""

"""Error codes of dataset loading (``hub_dataset``), beside the shared ones (``posttrain_worker.errors``).

The TypeScript loader (sdk/envs/data/hub.ts) maps each code to a typed error of the same code."""

DATASETS_NOT_INSTALLED = "DATASETS_NOT_INSTALLED"
"""The ``datasets`` library cannot be imported; the message names the extra that installs it."""
DATASET_NOT_FOUND = "DATASET_NOT_FOUND"
"""No such dataset, ``save_to_disk`` directory, config or split; ``details.field`` names which
(``hub``, ``disk``, ``config`` or ``split``) and the message lists what is there when it is known."""
DATASET_NOT_CACHED = "DATASET_NOT_CACHED"
"""A Hub id that cannot be fetched (offline: ``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1``, or the hub
unreachable) and whose config is not in the ``datasets`` cache; the message names the id, config, split and
the cache directory, and says how to fill it."""
DATASET_FORMAT = "DATASET_FORMAT"
"""The dataset was found but could not be read or turned into Arrow; the message carries the library's."""

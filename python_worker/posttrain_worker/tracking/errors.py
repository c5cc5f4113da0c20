"""Error codes of the logger process, sent to the TypeScript side as ``{"type": "error", "code": ...}``."""

TRACKER_UNAVAILABLE = "TRACKER_UNAVAILABLE"
"""A tracker in ``loggers`` needs a Python package that is not installed (details: ``tracker``, ``missing``,
``install``)."""
TRACKER_FAILED = "TRACKER_FAILED"
"""A tracker's library failed to open its run (details: ``tracker``)."""

INSTALL_HINT = (
    "npx posttrain setup --extras trackers "
    "(in a checkout of posttrain: .venv/bin/pip install -e '.[trackers]')"
)
"""How to install every tracker's packages at once."""

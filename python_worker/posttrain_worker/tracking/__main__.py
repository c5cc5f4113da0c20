"""``python -m posttrain_worker.tracking``: the logger process (see ``loop.py``)."""

from __future__ import annotations

from .loop import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m posttrain_worker``: see :mod:`posttrain_worker.cli`."""

from posttrain_worker.cli import main

raise SystemExit(main())

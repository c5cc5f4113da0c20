"""``python -m posttrain_worker.models.tiny DIR ...``: see ``cli.py``."""

import sys

from posttrain_worker.models.tiny.cli import main

sys.exit(main())

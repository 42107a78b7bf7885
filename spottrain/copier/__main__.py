"""``python -m spottrain.copier``: runs the CLI."""

import sys

from spottrain.copier.cli import main

sys.exit(main())

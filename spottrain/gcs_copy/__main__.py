"""``python -m spottrain.gcs_copy``: runs the CLI."""

import sys

from spottrain.gcs_copy.cli import main

sys.exit(main())

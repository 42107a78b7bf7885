"""``python -m spottrain.profiling``: see :mod:`spottrain.profiling.cli`."""

from spottrain.profiling.cli import main
from spottrain.trainer.preemption import exit_process

exit_process(main())

"""A stand-in for the JobSet launcher whose run ends at once with a given outcome.

For the component body's unit tests (tests/unit/runtime/): what the component does
with a launcher's ``Outcome``, without a cluster; the real launcher on the real
controllers is in tests/system/gke/.
"""

from __future__ import annotations

from types import SimpleNamespace

from spottrain.runtime.train_job import launcher


def ended(outcome: launcher.Outcome, seen: list):
    """A stand-in for ``launcher.JobSetLauncher`` whose run ends with ``outcome``."""

    class Ended:
        def __init__(self, kube, sets, **options):
            seen.append((sets, options))
            self.stop = SimpleNamespace(set=lambda: None)

        def run(self):
            return outcome

    return Ended

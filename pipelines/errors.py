"""The pre-flight's one error: below the guards and the template readers, which both raise it."""

from __future__ import annotations


class GuardError(ValueError):
    """A run that would fail or hang; the message is one line naming the bad value."""

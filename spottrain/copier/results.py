"""What a copy reports: its summary, its one error type and the CLI's exit codes."""

from __future__ import annotations

import dataclasses

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# sysexits.h EX_UNAVAILABLE: the storage endpoint stayed unreachable through the retries.
EXIT_UNAVAILABLE = 69


class CopyError(Exception):
    """A copy that could not be done; the message is one line naming the bad value.

    Attributes:
        exit_code: the CLI's exit code for it (2 bad input, 1 failed files).
        summary: what was done before the error, when anything was attempted.
    """

    def __init__(self, message: str, *, exit_code: int = EXIT_USAGE, summary=None):
        super().__init__(message)
        self.exit_code = exit_code
        self.summary: CopySummary | None = summary


@dataclasses.dataclass
class CopySummary:
    """What a copy did. In a dry run, "copied" counts what would be copied.

    Attributes:
        files_copied: files transferred (and verified).
        files_skipped: files already identical at the destination.
        files_refused: files not copied on purpose: a differing destination in
            no-clobber mode, or a name unsafe for local disk.
        bytes_copied: bytes transferred.
        seconds: wall time of the whole copy.
        no_clobber: whether no-clobber mode was on.
        dry_run: whether nothing was written.
        refused: ``"<destination>: <reason>"`` per refused file.
        failed: ``"<destination>: <reason>"`` per failed file.
        planned: ``"<source> -> <destination>"`` per file copied or to be copied
            in a dry run (kept only in dry runs, to list them).
        ignored: local source paths skipped as not regular files (FIFOs,
            sockets, devices); counted in the summary line.
    """

    files_copied: int = 0
    files_skipped: int = 0
    files_refused: int = 0
    bytes_copied: int = 0
    seconds: float = 0.0
    no_clobber: bool = False
    dry_run: bool = False
    refused: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    planned: list[str] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, int | float]:
        """Returns the counters as a flat dict (for KFP Metrics)."""
        return {
            "files_copied": self.files_copied,
            "files_skipped": self.files_skipped,
            "files_refused": self.files_refused,
            "bytes_copied": self.bytes_copied,
            "seconds": round(self.seconds, 3),
        }

    def __str__(self) -> str:
        verb = "would copy" if self.dry_run else "copied"
        text = (
            f"{verb} {self.files_copied} files ({_human(self.bytes_copied)}), "
            f"skipped {self.files_skipped} identical, refused {self.files_refused}"
        )
        if self.failed:
            text += f", failed {len(self.failed)}"
        if self.ignored:
            text += f", ignored {len(self.ignored)} not regular (FIFO, socket, device)"
        return f"{text} in {self.seconds:.2f} s"


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # unreachable

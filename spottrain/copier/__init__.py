"""The copier: an idempotent, verified, parallel copy of a directory or GCS prefix.

Named for what it is, apart from the ``gcs_copy`` component that runs it as the
pipeline's copy step (``spottrain/runtime/gcs_copy.py``): it puts a dataset and an
initial checkpoint into the working directory before training. On spot nodes it is
retried, so it gives the same result however often it runs or is interrupted, and a
retry never overwrites a checkpoint that training has already advanced.

Usage::

    python -m spottrain.copier SRC DST [--no-clobber | --clobber] [-j N]
                                 [--dry-run] [--allow-empty] [--allow-refused]

    from spottrain.copier import copy
    summary = copy("gs://bucket/data", "/tmp/work/data")
    metrics = summary.to_dict()  # files_copied, files_skipped, files_refused, bytes_copied, seconds

SRC and DST are ``gs://bucket[/prefix]`` or local paths, in any combination:
gs->gs is a server-side rewrite, gs->local a download, local->gs an upload,
local->local a file copy.

What is copied:
    * A directory or prefix SRC: every file or object under it, to the same
      relative name under DST (``SRC/a/b`` -> ``DST/a/b``, like ``rsync SRC/ DST/``).
      ``gs://b/data`` means the prefix ``data/``, never ``data2/``. Zero-byte
      "folder" objects whose name ends in ``/`` are ignored.
    * A single file or object SRC (no objects under ``SRC/``): copied to DST, or
      into DST under its own name when DST ends in ``/`` or is an existing
      local directory.

Guarantees:
    * Idempotent: a destination file with the source's size and CRC32C is
      skipped, so a rerun of an unchanged tree moves 0 bytes. CRC32C comes from
      the object listing for GCS and is computed (google-crc32c) for local files
      whenever sizes match: nothing is cached, on disk or in the bucket.
    * No-clobber mode never overwrites a destination that exists and differs;
      it is reported as refused. Uploads and rewrites carry
      ``if_generation_match=0`` (or the generation that was compared), so a
      concurrent writer is not overwritten either. Default (``no_clobber=None``):
      on when the destination looks like a checkpoint directory, that is
      (a) a component of DST (bucket, prefix or local path) contains
      ``checkpoint`` or ``ckpt`` (any case), or (b) a file named ``checkpoint``
      (TensorFlow's checkpoint index) exists at any depth in SRC or DST.
      ``--clobber`` / ``no_clobber=False`` overwrites differing files.
    * Verified: every copied file's CRC32C is compared with the source's; a
      mismatch is retried and then reported as a failure, never a success.
    * Atomic on local disk: data goes to a hidden temp file
      (``.spottrain-<random>.part``) in the target directory, is fsynced, and
      renamed into place only after verification. Temp files of killed runs
      are removed by the next run into the same directory.
    * Safe: object names with ``..``, ``.`` or empty components, or absolute
      names, are refused when copying to local disk, and nothing is written
      through a symlink leading outside DST. In a local SRC, symlinks (to files
      or folders) inside SRC are followed; one leading outside SRC is refused
      before anything is copied unless ``--follow-symlinks`` is given.
      Destinations with empty, ``.`` or ``..`` path segments are refused.
      In a local DST, a symlink leading outside DST, or a FIFO, socket or
      device, at a file's path is refused (in either clobber mode) and never
      read, written through or replaced. FIFOs, sockets and devices in a local
      SRC are skipped with a warning and counted (``CopySummary.ignored``).
      Only regular files are ever opened (``safe_open``), so nothing blocks on
      a FIFO. Local names that are not UTF-8 cannot be GCS object names: an
      upload with one is refused before anything is sent.
    * Concurrent copies into one directory: a temp file is locked before any
      other copy's cleanup can remove it (see ``local_files``).
    * Transient errors (the storage client's own predicate: 408, 429, 5xx,
      connection resets, timeouts; plus corrupted transfers) are retried,
      per file, with exponential backoff and jitter.

Exit codes of the CLI:
    0: everything copied or already identical (also when files were refused and
       ``--allow-refused`` was given).
    1: some files were refused (no-clobber or unsafe names) or failed
       (verification mismatch, retries exhausted).
    2: bad input or setup: unparsable arguments, missing source or bucket,
       empty source (without ``--allow-empty``), destination not a directory,
       overlapping SRC and DST, a source symlink leaving SRC, a local name that
       is not UTF-8 in an upload (all found before anything is written), or
       permission denied (which stops the copy where it is found).
    130: interrupted (Ctrl-C stops at once; the next run cleans up).
"""

# Only re-exports. ``__all__`` is the public API; the tuning constants, exit codes
# and the summary logger are reachable from here too.
from spottrain.copier.cli import main
from spottrain.copier.gcs_io import SINGLE_SHOT_MAX as SINGLE_SHOT_MAX
from spottrain.copier.gcs_io import SLICED_DOWNLOAD_CHUNK as SLICED_DOWNLOAD_CHUNK
from spottrain.copier.gcs_io import SLICED_DOWNLOAD_THRESHOLD as SLICED_DOWNLOAD_THRESHOLD
from spottrain.copier.planner import DEFAULT_RETRIES as DEFAULT_RETRIES
from spottrain.copier.planner import DEFAULT_WORKERS as DEFAULT_WORKERS
from spottrain.copier.planner import copy
from spottrain.copier.planner import summary_log as summary_log
from spottrain.copier.results import EXIT_FAILED as EXIT_FAILED
from spottrain.copier.results import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from spottrain.copier.results import EXIT_OK as EXIT_OK
from spottrain.copier.results import EXIT_USAGE as EXIT_USAGE
from spottrain.copier.results import CopyError, CopySummary

__all__ = ["CopyError", "CopySummary", "copy", "main"]

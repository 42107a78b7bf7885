"""The ``gcs_copy`` component's body: one idempotent copy, recorded as a ``Dataset``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from spottrain import exits
from spottrain.runtime import termination
from spottrain.runtime.train import LOCATION_KEY

log = logging.getLogger(__name__)

MANIFEST = "copy_summary.json"


def component_exit(copy_code: int) -> int:
    """The copy's CLI code (``spottrain.copier.results``) as the component's exit code.

    Bad input and permission errors are fatal (a retry fails the same way); files that
    failed after the copy's own retries and an unreachable endpoint may pass on KFP's
    retry.
    """
    from spottrain.copier import EXIT_USAGE

    return exits.FATAL_CONFIG if copy_code == EXIT_USAGE else exits.UNAVAILABLE


def copy_and_record(
    src: str,
    dst: str,
    out_path: str,
    *,
    no_clobber: bool = False,
    workers: int = 32,  # = spottrain.copier.DEFAULT_WORKERS (tested)
    allow_empty: bool = False,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Copies ``src`` to ``dst`` (or into the output artifact when ``dst`` is empty).

    Args:
        src: Source folder, local or ``gs://``. Empty means nothing to copy (e.g. no
            initial checkpoint to seed), which succeeds with zero files.
        dst: Destination folder, local or ``gs://``; empty copies into ``out_path``.
        out_path: The output artifact's local path.
        no_clobber: Keep files that already exist at the destination. Seeding a
            checkpoint dir needs this: a rerun must not overwrite newer checkpoints.
        workers: Parallel transfers.
        allow_empty: Succeed when ``src`` holds no files.
        dry_run: List what would be copied without copying.

    Returns:
        The copy summary plus ``location`` (where the files are) and ``src``.
    """
    target = dst or out_path
    if not src:
        Path(out_path).mkdir(parents=True, exist_ok=True)
        log.info("src is empty: nothing to copy to %s", target)
        summary: dict[str, Any] = {
            "files_copied": 0,
            "files_skipped": 0,
            "files_refused": 0,
            "bytes_copied": 0,
            "seconds": 0.0,
        }
    else:
        from spottrain import copier

        log.info("copying %s -> %s (no_clobber=%s)", src, target, no_clobber)
        summary = copier.copy(
            src,
            target,
            no_clobber=no_clobber,
            workers=workers,
            dry_run=dry_run,
            allow_empty=allow_empty,
        ).to_dict()
    summary = {**summary, "src": src, LOCATION_KEY: target}
    if dst:
        # The files live at dst; the artifact records where, for downstream steps.
        Path(out_path).mkdir(parents=True, exist_ok=True)
        (Path(out_path) / MANIFEST).write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary


def run_component(*, copied, src: str, dst: str, metrics=None, **kwargs: Any) -> None:
    """The ``gcs_copy`` component body.

    Args:
        copied: The ``Output[Dataset]``; holds the files when ``dst`` is empty.
        metrics: The ``Output[Metrics]`` for the copy summary's numbers.
        src: Source folder.
        dst: Destination folder or empty.
        **kwargs: ``no_clobber``, ``workers``, ``allow_empty``, ``dry_run``.
    """
    from spottrain.copier import CopyError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        summary = copy_and_record(src, dst, copied.path, **kwargs)
    except CopyError as err:
        code = component_exit(err.exit_code)
        log.error("%s", err)  # one line, not a traceback
        termination.mark_exit(code, str(err))
        raise SystemExit(code) from None
    if not dst:
        # Downstream reads the artifact's own path; a recorded location would be the
        # executor's local path, meaningless on another node.
        summary.pop(LOCATION_KEY)
    copied.metadata.update({k: v for k, v in summary.items() if v is not None})
    if metrics is not None:
        for key in ("files_copied", "files_skipped", "files_refused", "bytes_copied", "seconds"):
            metrics.log_metric(key, float(summary[key]))
    log.info("copy summary: %s", json.dumps(summary, sort_keys=True))

"""The ``gcs_copy`` component: an idempotent folder copy, safe on preemptible nodes."""

from kfp import dsl
from kfp.dsl import Dataset, Metrics, Output

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def gcs_copy(
    src: str,
    copied: Output[Dataset],
    metrics: Output[Metrics],
    dst: str = "",
    no_clobber: bool = False,
    workers: int = 32,  # = spottrain.copier.DEFAULT_WORKERS (tested)
    allow_empty: bool = False,
    dry_run: bool = False,
):
    """Copies a folder (local or gs://) with checksums; rerunning it is harmless.

    Args:
        src: Source folder, local or gs://. Empty copies nothing and succeeds.
        copied: The copied files when dst is empty; otherwise a pointer to dst
            (metadata "location") that the train component reads from.
        metrics: Files copied, skipped and refused (no-clobber), bytes and seconds.
        dst: Destination folder, local or gs://. Empty copies into the output artifact.
        no_clobber: Keep files already at the destination (seeding a checkpoint dir).
        workers: Parallel transfers.
        allow_empty: Succeed when src holds no files.
        dry_run: Report what would be copied without copying.
    """
    from spottrain.runtime.gcs_copy import run_component

    run_component(
        copied=copied,
        metrics=metrics,
        src=src,
        dst=dst,
        no_clobber=no_clobber,
        workers=workers,
        allow_empty=allow_empty,
        dry_run=dry_run,
    )

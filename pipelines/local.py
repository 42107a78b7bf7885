"""The preemptible pipeline end to end on this machine: kfp.local plus fake GCS.

``python -m spottrain.pipelines run-local`` starts fake-gcs-server, uploads the
digits image folder to an emulated bucket and runs the *same* pipeline function
as on GKE under ``kfp.local`` (``SubprocessRunner(use_venv=False)``): copy from
``gs://`` -> train with local MWMS workers and one injected preemption -> KFP's
own retry resumes from the checkpoint. Only the placement differs: no GPUs and a
one-second backoff (kfp.local ignores the kfp-kubernetes settings anyway).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spottrain import placement
from spottrain.ledger import usage
from spottrain.pipelines.console import Console
from spottrain.runtime.report import figures
from spottrain.trainer.train_lib import SUMMARY_FILE

BUCKET = "spottrain-demo"
# Small enough for 2 cores in well under 5 minutes, big enough to learn digits.
DEFAULTS: dict[str, Any] = dict(
    backbone="small_cnn",
    weights="none",
    image_size=32,
    batch_size_per_replica=16,
    train_steps=120,
    learning_rate=0.003,
    save_every_steps=20,
)
DEFAULT_PREEMPT_AT = 50
DEFAULT_LIMIT = 600
LOCAL_COPY_PLACEMENT = placement.COPY_PLACEMENT.with_(backoff="1s")
_RETRY_LOG = re.compile(r"Task (\S+) failed \(attempt (\d+)/(\d+)\)")
_FAILED_LOG = re.compile(r"Task (\S+) finished with status (\S+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _TaskLog(logging.Filter):
    """Reads kfp.local's log lines (its only record of retries and task states).

    A filter on the root logger, not a handler: kfp.local swaps the root handlers
    while it runs a task.
    """

    def __init__(self):
        super().__init__()
        self.retries: dict[str, int] = {}
        self.failed: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = _ANSI.sub("", record.getMessage())
        match = _RETRY_LOG.search(message)
        if match:
            task = match.group(1).strip("'")
            self.retries[task] = self.retries.get(task, 0) + 1
        match = _FAILED_LOG.search(message)
        if match:
            task = match.group(1).strip("'")
            if match.group(2) == "FAILURE":
                self.failed.add(task)
            else:
                self.failed.discard(task)
        return True


@dataclass
class LocalResult:
    """What a local pipeline run produced."""

    out: Path
    ok: bool
    seconds: float
    params: dict[str, Any]
    retries: dict[str, int] = field(default_factory=dict)
    failed_tasks: list[str] = field(default_factory=list)
    model_dir: Path | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    # The run's spent, saved and lost, or why they are unknown (ledger.totals).
    cost: dict[str, Any] = field(default_factory=dict)
    profile_report: Path | None = None
    attempts_page: Path | None = None
    profile_page: Path | None = None
    profile_findings: list[str] = field(default_factory=list)
    log: Path | None = None
    error: str = ""

    def report(self) -> str:
        """A human summary of the run."""
        lines = [
            "",
            f"== spottrain local pipeline: {'SUCCEEDED' if self.ok else 'FAILED'} "
            f"in {self.seconds:.0f} s ==",
        ]
        if self.error:
            lines.append(f"error:          {self.error}")
        for task, count in sorted(self.retries.items()):
            lines.append(f"retries:        {task} failed {count}x and was retried by KFP")
        if not self.retries:
            lines.append("retries:        none")
        if self.failed_tasks:
            lines.append(f"failed tasks:   {', '.join(self.failed_tasks)} (out of retries)")
        if self.summary:
            s = self.summary
            lines.append(
                f"training:       final_step={s.get('final_step')}/{s.get('train_steps')} "
                f"val_accuracy={s.get('val_accuracy', float('nan')):.3f} "
                f"val_loss={s.get('val_loss', float('nan')):.3f} "
                f"workers={s.get('num_workers')} global_batch={s.get('global_batch_size')}"
            )
        for a in self.attempts:
            lines.append(
                f"attempt {a.get('attempt')}:      {a.get('outcome')} (exit {a.get('exit_code')}), "
                f"steps {a.get('start_step')}->{a.get('last_step')}, "
                f"{a.get('steps_lost') or 0} lost, {a.get('seconds', 0):.0f} s" + figures(a)
            )
        lines += self._cost_lines()
        lines.append(f"data:           {self.params.get('data_src')} (fake GCS)")
        lines.append(f"checkpoints:    {self.params.get('checkpoint_dir')}")
        if self.model_dir:
            lines.append(f"model:          {self.model_dir}")
        if self.attempts_page:
            lines.append(f"attempts page:  {self.attempts_page.as_uri()}")
        if self.profile_page:
            lines.append(f"profile page:   {self.profile_page.as_uri()}")
        if self.profile_findings:
            lines += [f"                {finding}" for finding in self.profile_findings]
        lines.append(f"pipeline root:  {self.out / 'pipeline_root'}")
        if self.log:
            lines.append(f"full log:       {self.log}")
        return "\n".join(lines)

    def _cost_lines(self) -> list[str]:
        """What the attempts ran on and the run's three figures, or why they are unknown."""
        from spottrain.ledger.attempt_cost import totals_line

        lines = []
        if used := usage.ran_on(self.attempts):
            lines.append(f"ran on:         {used}")
        if line := totals_line(self.cost):
            lines.append(f"cost:           {line}")
        return lines


def run_local(
    out: Path,
    *,
    workers: int | None = 2,
    preempt_at_step: int | None = DEFAULT_PREEMPT_AT,
    train_steps: int | None = None,
    limit: int | None = DEFAULT_LIMIT,
    retries: int = 3,
    fallback: bool = False,
    data: Path | None = None,
    log: Path | None = None,
    **overrides: Any,
) -> LocalResult:
    """Runs the preemptible pipeline locally and returns what it produced.

    Args:
        out: Output folder; its checkpoints and pipeline root are reset first, so
            every run starts at step 0 and the injected preemption fires.
        workers: Local MWMS worker processes of the train task.
        preempt_at_step: SIGTERM the workers once when passing this step; 0 = off.
        train_steps: Total steps (default ``DEFAULTS``).
        limit: How many digits images to use (0 = all 1,797).
        retries: KFP retries of the train task.
        fallback: Build with the on-demand fall-back and no spot retries, so the
            injected preemption exhausts the spot task and the fall-back resumes.
        data: A local folder to upload as ``data_src`` instead of the digits images
            (e.g. a prepared tfds data_dir, with ``task_args`` naming its dataset).
        log: Send all output (this process's and every task's) to this file and print
            one line per event instead (:mod:`spottrain.pipelines.console`).
        **overrides: Other pipeline parameters.
    """
    from spottrain.pipelines import compile as comp
    from spottrain.pipelines import gke, guards
    from spottrain.runtime.train_settings import IMAGE_SETTINGS

    try:
        from spottrain.testing.gcs_emulator import FakeGcs  # noqa: F401 - checked before any work
    except ImportError as e:  # a wheel install: the demo helpers are not in it
        raise guards.GuardError(
            "run-local needs the development install (make venv; spottrain.testing is "
            f"not in the wheel): {e}"
        ) from None

    started = time.monotonic()
    out = Path(out).resolve()
    root, checkpoints = out / "pipeline_root", out / "checkpoints"
    for stale in (root, checkpoints):
        shutil.rmtree(stale, ignore_errors=True)
    defaults = dict(DEFAULTS)
    if overrides.get("task"):  # the image task's settings: another task refuses them
        for name in IMAGE_SETTINGS:
            defaults.pop(name, None)
    params: dict[str, Any] = {
        **defaults,
        "data_src": f"gs://{BUCKET}/digits",
        "checkpoint_dir": str(checkpoints),
        "local_workers": 2 if workers is None else workers,
        **({"train_steps": train_steps} if train_steps else {}),
        **overrides,
    }
    if fallback:
        pipeline = gke.build(
            placement.LOCAL_PLACEMENT.with_(retries=0),
            copy_placement=LOCAL_COPY_PLACEMENT,
            fallback=placement.LOCAL_PLACEMENT.with_(pool="on-demand", retries=retries),
        )
    else:
        pipeline = gke.build(
            placement.LOCAL_PLACEMENT.with_(retries=retries), copy_placement=LOCAL_COPY_PLACEMENT
        )
    template = out / "pipeline.yaml"
    out.mkdir(parents=True, exist_ok=True)
    template.write_text(comp.compile_text(pipeline))
    params = guards.preflight(template, params, local=True)

    console = Console(log)
    with console:
        result = _run(console, pipeline, params, out, root, data, limit, preempt_at_step)
    result.log = log
    result.seconds = time.monotonic() - started
    if not result.error and not result.ok:
        where = log if log is not None else "the task logs above"
        result.error = f"the pipeline failed: see {where}"
    return result


def _run(
    console: Console,
    pipeline: Any,
    params: dict[str, Any],
    out: Path,
    root: Path,
    data: Path | None,
    limit: int | None,
    preempt_at_step: int | None,
) -> LocalResult:
    """Uploads the data to fake GCS and runs the pipeline under kfp.local."""
    import kfp.local

    from spottrain import copier, datasets
    from spottrain.runtime import train as train_rt
    from spottrain.testing import billing_catalog
    from spottrain.testing.environ import environ
    from spottrain.testing.gcs_emulator import FakeGcs

    if data is None:
        data = out / "digits"
        console.say(f"writing the digits image folder to {data}")
        n = datasets.write_digits(str(data), DEFAULT_LIMIT if limit is None else limit)
        what = f"{n} images"
    else:
        what = str(data)
    counter = _TaskLog()
    root_logger = logging.getLogger()
    old_level = root_logger.level
    root_logger.setLevel(min(old_level or logging.INFO, logging.INFO))
    root_logger.addFilter(counter)
    result = LocalResult(out=out, ok=False, seconds=0.0, params=params)
    chaos = DEFAULT_PREEMPT_AT if preempt_at_step is None else preempt_at_step
    try:
        # kfp.local's subprocesses inherit this environment: the train task reads it.
        with (
            environ(
                {
                    train_rt.CHAOS_PREEMPT_ENV: str(chaos),
                    usage.USAGE_ENV: os.environ.get(usage.USAGE_ENV) or usage.ASSUMED_LOCAL,
                }
            ),
            billing_catalog.local_prices(out, console.say),
            FakeGcs() as gcs,
        ):
            console.say(f"fake-gcs-server at {gcs.host}: uploading {what} to {params['data_src']}")
            gcs.create_bucket(BUCKET)
            copier.copy(str(data), params["data_src"], progress="off")
            console.say(
                "running the preemptible pipeline under kfp.local "
                f"({params['local_workers']} workers, preemption at step "
                f"{chaos or 'never'})"
            )
            kfp.local.init(
                runner=kfp.local.SubprocessRunner(use_venv=False),
                pipeline_root=str(root),
                raise_on_error=False,
            )
            with warnings.catch_warnings():
                # Expected here: kfp.local ignores the GKE settings and runs the
                # image's code in this environment instead of the container.
                warnings.filterwarnings("ignore", "Task .* have no effect", UserWarning)
                warnings.filterwarnings("ignore", "You may be attemping", RuntimeWarning)
                task = pipeline(**params)
        _collect(task, root, result)
    except Exception as err:  # report what happened, then let the caller see it failed
        result.error = f"{type(err).__name__}: {err}"
    finally:
        root_logger.removeFilter(counter)
        root_logger.setLevel(old_level)
    result.retries = counter.retries
    result.failed_tasks = sorted(counter.failed)
    return result


def _collect(task: Any, root: Path, result: LocalResult) -> None:
    outputs = getattr(task, "outputs", None) or {}
    model = outputs.get("model") if isinstance(outputs, dict) else None
    if model is not None:
        result.model_dir = Path(model.path)
        metrics = outputs.get("metrics")
        if metrics is not None:
            result.metrics = {k: float(v) for k, v in metrics.metadata.items()}
    else:
        # The fall-back pipeline has no outputs: take the newest trained model (the
        # spot task's "train" or the fall-back's "train-on-demand").
        found = sorted(root.glob(f"*/*/model/{SUMMARY_FILE}"), key=_mtime)
        result.model_dir = found[-1].parent if found else None
    summary_path = result.model_dir / SUMMARY_FILE if result.model_dir else None
    if summary_path and summary_path.is_file():
        result.summary = json.loads(summary_path.read_text())
    result.attempts_page, result.profile_page = browser_pages(root, result.out)
    reports = sorted(root.glob("*/profile/report"), key=_mtime)
    if reports:
        result.profile_report = reports[-1]
        # The findings: the report's numbered lines, first sentence of each.
        found = re.findall(r"^\d+\. (.+?)$", reports[-1].read_text(), flags=re.M)
        result.profile_findings = [f.replace("**", "").split(". ")[0] for f in found]
    from spottrain import ledger
    from spottrain.ledger.attempt_cost import TOTAL_FIELDS

    result.attempts = ledger.read(str(result.params["checkpoint_dir"]))
    totals = ledger.totals(result.attempts)
    result.cost = {k: totals[k] for k in TOTAL_FIELDS if k in totals}
    done = result.summary.get("final_step", -1) >= result.params["train_steps"]
    result.ok = bool(result.summary) and done


def browser_pages(root: Path, out: Path) -> tuple[Path | None, Path | None]:
    """The newest attempts and profile pages under ``root``, copied into ``out`` as .html.

    KFP stores an ``HTML`` artifact as a file without an extension; its UI renders it by
    the artifact's type, but a browser opening that file shows its source as text.
    Returns (attempts page, profile page); None for a page the run did not write.
    """
    copies = []
    for pattern, name in (
        ("*/train*/report", "attempts.html"),
        ("*/profile/report_html", "profile.html"),
    ):
        found = sorted(root.glob(pattern), key=_mtime)  # the fall-back's task is newest
        (out / name).unlink(missing_ok=True)  # an earlier run's
        if found:
            shutil.copyfile(found[-1], out / name)
        copies.append(out / name if found else None)
    return copies[0], copies[1]


def _mtime(path: Path) -> float:
    return path.stat().st_mtime

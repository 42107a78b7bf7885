"""The Vertex AI pipeline: the same graph, with training as a SPOT custom job.

``create_custom_training_job_from_component`` turns the train component into a
Vertex ``CustomJob`` whose worker pools run MultiWorkerMirroredStrategy (chief in
pool 0, ``replica_count - 1`` workers in pool 1). It is compiled without
kfp-kubernetes: Vertex cannot load a template with a ``platforms`` document.
"""

import copy
import functools
import inspect
import re
from dataclasses import dataclass

from google_cloud_pipeline_components.v1.custom_job import (
    CustomTrainingJobOp,
    create_custom_training_job_from_component,
)
from kfp import dsl
from kfp.dsl import structures

from spottrain import placement
from spottrain.components.train.component import train
from spottrain.ledger import CAPACITY_ENV, usage
from spottrain.pipelines import guards
from spottrain.pipelines.gke import Outputs, add_profile, copy_inputs, described
from spottrain.runtime.train_settings import DEFAULT_SETTINGS, TrainSettings, as_parameters

NAME = "spottrain-vertex"
DESCRIPTION = (
    "Copy data and an initial checkpoint, then train as a Vertex AI SPOT custom job "
    "(MultiWorkerMirroredStrategy over replica_count machines) with checkpointed retries."
)
FALLBACK_DESCRIPTION = (
    " A job that fails unfinished is followed by the next, standard VMs once spot makes no "
    "progress; the run ends Succeeded when the training is done."
)
STRATEGIES = ("SPOT", "STANDARD", "FLEX_START")
# In front of every worker pool's command (see with_forwarding_init): tini as PID 1,
# which holds a notice from its first instructions on (Python's handlers come ~20-100 ms
# later: bench/pid1_notice.py), then spottrain.trainer.forward, which keeps the component's shell
# from dying of the notice. tini alone cannot: it starts its child with SIGTERM at its
# default, so the shell dies, tini exits, and the kernel kills the trainer mid-save.
FORWARD_COMMAND = ["tini", "--", "python3", "-m", "spottrain.trainer.forward", "--"]


class VertexConfigError(guards.GuardError):
    """A Vertex training setting that cannot work; the message names the value."""


@dataclass(frozen=True)
class VertexTraining:
    """Compile-time settings of the Vertex custom training job.

    Attributes:
        machine_type: Machine of every replica (unless ``worker_machine_type``).
        accelerator_type: Vertex accelerator enum, e.g. ``NVIDIA_TESLA_T4``; empty = CPU.
        accelerator_count: GPUs per replica.
        replica_count: Chief plus workers (MWMS over machines).
        strategy: ``SPOT`` (preemptible, cheap), ``STANDARD`` or ``FLEX_START``.
        timeout: Maximum job run time, e.g. ``86400s``: a hung job (an MWMS
            deadlock on unequal GPUs) is cancelled instead of billed forever. Required.
        enable_web_access: Interactive shell into the replicas (py-spy dump a hang).
        restart_job_on_worker_restart: Restart all replicas when one restarts, so
            MWMS never waits on a peer that came back with a fresh state.
        retries: Pipeline retries of the job (a SPOT preemption fails it).
        backoff: First retry delay.
        worker_machine_type: Pool 1's machine if it differs from the chief's.
        worker_accelerator_type: Pool 1's accelerator (must equal the chief's).
        worker_accelerator_count: Pool 1's accelerator count (must equal the chief's).
        boot_disk_size_gb: Boot disk per replica.
        network: VPC network peered with the job, ``projects/<project number>/global/
            networks/<name>`` (private services access configured).
        reserved_ip_ranges: Reserved ranges of that network to deploy into.
        network_attachment: Private Service Connect interface instead of peering,
            ``projects/<p>/regions/<r>/networkAttachments/<name>``.
        encryption_key: CMEK for everything the job creates,
            ``projects/<p>/locations/<region>/keyRings/<ring>/cryptoKeys/<key>``
            (in the job's region).
        reservation: A specific Compute Engine reservation the replicas consume,
            ``projects/<p>/zones/<zone>/reservations/<name>`` (STANDARD strategy).
        fallback: ``STANDARD``: when a SPOT (or FLEX_START) job fails without finishing,
            the task creates the next job itself (:mod:`spottrain.runtime.vertex_job`),
            a standard one once spot stops making progress; empty = no fall-back.
        spot_attempts: With ``fallback``: SPOT jobs at most before STANDARD.
        fallback_attempts: With ``fallback``: STANDARD jobs at most.
    """

    machine_type: str = "n1-standard-8"
    accelerator_type: str = "NVIDIA_TESLA_T4"
    accelerator_count: int = 1
    replica_count: int = 1
    strategy: str = "SPOT"
    timeout: str = "86400s"
    enable_web_access: bool = True
    restart_job_on_worker_restart: bool = True
    retries: int = 5
    backoff: str = "60s"
    worker_machine_type: str = ""
    worker_accelerator_type: str = ""
    worker_accelerator_count: int | None = None
    boot_disk_size_gb: int = 100
    network: str = ""
    reserved_ip_ranges: tuple[str, ...] = ()
    network_attachment: str = ""
    encryption_key: str = ""
    reservation: str = ""
    fallback: str = ""
    spot_attempts: int = 3
    fallback_attempts: int = 2

    def __post_init__(self):
        guards.check_timeout(self.timeout)
        check_enterprise(self)
        check_fallback(self)
        if self.strategy not in STRATEGIES:
            raise VertexConfigError(
                f"strategy={self.strategy!r}: expected one of {', '.join(STRATEGIES)}"
            )
        if self.replica_count < 1:
            raise VertexConfigError(f"replica_count={self.replica_count}: must be >= 1")
        if self.accelerator_type and self.accelerator_count < 1:
            raise VertexConfigError(
                f"accelerator_count={self.accelerator_count} with accelerator_type="
                f"{self.accelerator_type!r}: must be >= 1"
            )
        if self.retries < 0:
            raise VertexConfigError(f"retries={self.retries}: must be >= 0")

    @property
    def capacity(self) -> str:
        """The capacity kind the replicas run on, for the ledger."""
        from spottrain.runtime.vertex_job import capacity_kind

        return capacity_kind(self.strategy, bool(self.reservation))

    @property
    def gpus(self) -> int:
        """GPUs per replica."""
        return self.accelerator_count if self.accelerator_type else 0

    def custom_job_op(self):
        """The train component wrapped as a Vertex custom job with these settings."""
        kwargs = dict(
            display_name="spottrain-train",
            replica_count=self.replica_count,
            machine_type=self.machine_type,
            timeout=self.timeout,
            strategy=self.strategy,
            enable_web_access=self.enable_web_access,
            restart_job_on_worker_restart=self.restart_job_on_worker_restart,
            boot_disk_size_gb=self.boot_disk_size_gb,
        )
        if self.accelerator_type:
            kwargs.update(
                accelerator_type=self.accelerator_type, accelerator_count=self.accelerator_count
            )
        if self.network:
            kwargs.update(network=self.network, reserved_ip_ranges=list(self.reserved_ip_ranges))
        if self.network_attachment:
            kwargs["psc_interface_config"] = {"network_attachment": self.network_attachment}
        if self.encryption_key:
            kwargs["encryption_spec_key_name"] = self.encryption_key
        # What the replicas run on, for the ledger (spottrain.ledger.usage); the region is the
        # job's, known when it runs: the fall-back launcher's jobs add it (vertex_job).
        spec = {"machine_type": self.machine_type, "accelerator_type": self.accelerator_type,
                "accelerator_count": self.gpus}  # fmt: skip
        kwargs["env"] = [
            {"name": CAPACITY_ENV, "value": self.capacity},
            {"name": usage.USAGE_ENV,
             "value": usage.env_value(**usage.from_vertex_pool({"machine_spec": spec}, ""))},
        ]  # fmt: skip
        if self.reservation:
            kwargs.update(
                reservation_affinity_type="SPECIFIC_RESERVATION",
                reservation_affinity_key="compute.googleapis.com/reservation-name",
                reservation_affinity_values=[self.reservation],
            )
        job = create_custom_training_job_from_component(train, **kwargs)
        op = with_forwarding_init(described(job, train, CustomTrainingJobOp))
        return with_fallback_launcher(op, self) if self.fallback else op

    def place_profile(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """Puts the profile step on the chief's accelerator (a pipeline task, not a job).

        One machine: with ``replica_count > 1`` the cross-machine AllReduce is not
        in the profile (its report says so when it compares with training).
        """
        if self.accelerator_type:
            task.set_accelerator_type(self.accelerator_type)
            task.set_accelerator_limit(self.accelerator_count)
        return task

    def worker_pool_specs(self, op) -> list[dict] | None:
        """Pool specs with the worker overrides applied; ``None`` when there are none.

        The GCPC helper gives every replica the chief's machine; overriding pool 1
        is the raw path where unequal accelerators can slip in, so the result goes
        through :func:`guards.check_worker_pools`.
        """
        if not (
            self.worker_machine_type
            or self.worker_accelerator_type
            or self.worker_accelerator_count is not None
        ):
            return None
        specs = copy.deepcopy(op.component_spec.inputs["worker_pool_specs"].default)
        if len(specs) < 2:
            raise VertexConfigError(
                f"worker_* overrides need workers: replica_count={self.replica_count}"
            )
        machine = specs[1]["machine_spec"]
        if self.worker_machine_type:
            machine["machine_type"] = self.worker_machine_type
        if self.worker_accelerator_type:
            machine["accelerator_type"] = self.worker_accelerator_type
        if self.worker_accelerator_count is not None:
            machine["accelerator_count"] = self.worker_accelerator_count
        return specs


# The resource names Vertex AI takes (google-cloud-aiplatform's aiplatform_v1 types:
# CustomJobSpec.network "where {project} is a project number", PscInterfaceConfig
# .network_attachment, EncryptionSpec.kms_key_name, ReservationAffinity.values "the
# full resource name of the reservation").
_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_RESOURCES = {  # field: (pattern, example)
    "network": (rf"projects/[0-9]+/global/networks/{_NAME}", "projects/123456/global/networks/NET"),
    "network_attachment": (
        rf"projects/[^/]+/regions/[a-z0-9-]+/networkAttachments/{_NAME}",
        "projects/PROJECT/regions/REGION/networkAttachments/NAME",
    ),
    "encryption_key": (
        r"projects/[^/]+/locations/[a-z0-9-]+/keyRings/[^/]+/cryptoKeys/[^/]+",
        "projects/PROJECT/locations/REGION/keyRings/RING/cryptoKeys/KEY",
    ),
    "reservation": (
        rf"projects/[^/]+/zones/[a-z0-9-]+/reservations/{_NAME}",
        "projects/PROJECT/zones/ZONE/reservations/NAME",
    ),
}


def check_enterprise(v: VertexTraining) -> None:
    """Refuses network, CMEK and reservation settings Vertex or GCPC would refuse.

    Raises:
        VertexConfigError: one line naming the value.
    """
    for field, (pattern, example) in _RESOURCES.items():
        value = getattr(v, field)
        if value and not re.fullmatch(pattern, value):
            raise VertexConfigError(f"{field}={value!r}: expected the form {example!r}")
    if v.network and v.network_attachment:
        # GCPC 2.22.0 v1/custom_job/utils.py L154-158 raises on both.
        raise VertexConfigError(
            "network and network_attachment: VPC peering or a Private Service Connect "
            "interface, not both"
        )
    if v.reserved_ip_ranges and not v.network:
        raise VertexConfigError(
            f"reserved_ip_ranges={list(v.reserved_ip_ranges)} are ranges of the peered "
            "network: set network too"
        )
    if v.reservation and v.strategy == "SPOT":
        # Compute Engine, "Consume reservations", Limitations: not by Spot VMs.
        raise VertexConfigError(
            f"reservation={v.reservation!r} with strategy=SPOT: Spot VMs cannot consume "
            "reservations; use --strategy STANDARD"
        )


def check_fallback(v: VertexTraining) -> None:
    """Refuses a fall-back that cannot run.

    Raises:
        VertexConfigError: one line naming the value.
    """
    if not v.fallback:
        return
    if v.fallback != "STANDARD":
        raise VertexConfigError(f"fallback={v.fallback!r}: expected 'STANDARD' or empty")
    if v.strategy not in ("SPOT", "FLEX_START"):
        raise VertexConfigError(
            f"fallback={v.fallback!r} with strategy={v.strategy!r}: only a SPOT or "
            "FLEX_START job falls back"
        )
    for name in ("spot_attempts", "fallback_attempts"):
        if getattr(v, name) < 1:
            raise VertexConfigError(f"{name}={getattr(v, name)}: must be >= 1")


def with_fallback_launcher(op, v: VertexTraining):
    """Runs ``op``'s job through :mod:`spottrain.runtime.vertex_job` instead of GCPC's launcher.

    The same arguments and payload (so the worker pools, placeholders and outputs are
    GCPC's), plus the plan and the checkpoint dir that decides; the image is the train
    component's, which has the runtime (GCPC's image has not).
    """
    container = op.component_spec.implementation.container
    container.image = train.component_spec.implementation.container.image
    container.command = ["python3", "-u", "-m", "spottrain.runtime.vertex_job"]
    container.args = [
        *container.args,
        "--fallback_strategy", v.fallback,
        "--first_attempts", str(v.spot_attempts),
        "--fallback_attempts", str(v.fallback_attempts),
        "--checkpoint_dir", "{{$.inputs.parameters['checkpoint_dir']}}",
        "--train_steps", "{{$.inputs.parameters['train_steps']}}",
        # The jobs' spottrain-run label (bill_labels); the driver resolves the run's id.
        "--run_id", dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        # The capacity ladder and its deadline (docs/deadline.md): inputs of this task only.
        *[a for name in LADDER_INPUTS
          for a in (f"--{name}", f"{{{{$.inputs.parameters['{name}']}}}}")],
    ]  # fmt: skip
    for name, help_ in LADDER_INPUTS.items():
        op.component_spec.inputs[name] = structures.InputSpec(
            type="String", default="", optional=True, description=help_
        )
    # kfp takes the names a call may pass from the spec once, when the component is made
    # (kfp 2.x dsl/base_component.py, BaseComponent.__init__: _component_inputs).
    op._component_inputs |= set(LADDER_INPUTS)
    return op


# The fall-back task's own inputs, the pipeline's parameters of the same names.
LADDER_INPUTS = {
    "finish_by": "A deadline: a duration ('6h', from the task's first start) or a time with "
    "its zone ('2026-11-29T06:00:00Z'); empty: none (docs/deadline.md).",
    "ladder": "The capacity ladder as a JSON list of rungs; empty: the job's strategy, then "
    "the fall-back's (docs/deadline.md).",
    "prior_step_seconds": "Seconds per training step on the ladder's first rung, as an earlier "
    "run measured it: with finish_by, the deadline binds from the start; empty: unknown, "
    "and the run starts on on-demand until a step is measured (docs/deadline.md).",
}


def check_key_region(spec: dict, region: str) -> None:
    """Refuses a compiled job whose CMEK key is in another region than the job's.

    "The key needs to be in the same region as where the compute resource is
    created" (aiplatform_v1 ``EncryptionSpec.kms_key_name``).
    """
    from spottrain.pipelines import templates

    for job in templates.custom_jobs(spec):
        key = job.get("encryption_spec_key_name") or ""
        where = key.split("/")[3] if key.count("/") >= 3 else ""
        if key and where != region:
            raise VertexConfigError(
                f"encryption key {key!r} is in {where!r}, the job runs in {region!r}: Vertex "
                "needs the key in the job's region"
            )


def with_forwarding_init(op):
    """Puts tini and :mod:`spottrain.trainer.forward` before each worker pool's command of ``op``.

    GCPC copies the train component's ``sh -ec …`` command into every worker pool
    as is (google_cloud_pipeline_components/v1/custom_job/utils.py L165-182 at
    GCPC 2.22.0), and Vertex runs it as the container's PID 1, which never passes
    SIGTERM on (tests/system/vertex/test_platform_vertex.py runs the compiled pool command as
    PID 1 of a PID namespace, with and without this). GCPC has no hook for the
    pool command, so the default of the component's ``worker_pool_specs`` input
    is edited; a pipeline that uses ``op`` compiles that default.
    """
    for spec in op.component_spec.inputs["worker_pool_specs"].default:
        container = spec["container_spec"]
        if container["command"][: len(FORWARD_COMMAND)] != FORWARD_COMMAND:
            container["command"] = [*FORWARD_COMMAND, *container["command"]]
    return op


def ladder_parameters(fallback: bool):
    """Keeps the ladder's inputs (``finish_by``, ``ladder``, ...) in the fall-back pipeline only.

    Without the launcher no task reads them, and a parameter that does nothing misleads.
    """

    def wrap(fn):
        if fallback:
            return fn
        sig = inspect.signature(fn)
        kept = [p for p in sig.parameters.values() if p.name not in LADDER_INPUTS]

        @functools.wraps(fn)
        def pipeline(*args, **kwargs):
            return fn(*args, **kwargs)

        pipeline.__signature__ = sig.replace(parameters=kept)
        own = tuple(f"{n}:" for n in LADDER_INPUTS)
        lines = (fn.__doc__ or "").splitlines()
        pipeline.__doc__ = "\n".join(x for x in lines if not x.strip().startswith(own))
        return pipeline

    return wrap


def build(vertex: VertexTraining | None = None, name: str = ""):
    """Builds the Vertex pipeline for compile-time job settings.

    Raises:
        guards.GuardError: unequal accelerators between the worker pools.
    """
    vertex = vertex or VertexTraining()
    name = name or (f"{NAME}-fallback" if vertex.fallback else NAME)
    op = vertex.custom_job_op()
    specs = vertex.worker_pool_specs(op)
    guards.check_worker_pools(specs or op.component_spec.inputs["worker_pool_specs"].default)
    extra = {"worker_pool_specs": specs} if specs is not None else {}

    description = DESCRIPTION + (FALLBACK_DESCRIPTION if vertex.fallback else "")

    @dsl.pipeline(name=name, description=description)
    @ladder_parameters(vertex.fallback)
    # no tensorboard_dir: the train task uses Vertex's AIP_TENSORBOARD_LOG_DIR
    @as_parameters(without=("tensorboard_dir",))
    def vertex_pipeline(
        data_src: str,
        checkpoint_dir: str,
        data_dst: str = "",
        initial_checkpoint: str = "",
        settings: TrainSettings = DEFAULT_SETTINGS,
        service_account: str = "",
        tensorboard: str = "",
        base_output_directory: str = "",
        finish_by: str = "",
        ladder: str = "",
        prior_step_seconds: str = "",
    ) -> Outputs:
        """Copies inputs, then trains as a Vertex SPOT custom job with checkpointed retries.

        Args:
            data_src: The data on gs://: an image folder (<root>/<label>/*.png|jpg), or a
                tfds data_dir when task_args names a dataset.
            checkpoint_dir: Persistent folder (gs:// or /gcs/) every retry resumes from.
            data_dst: Copy the data here (gs://) instead of into a KFP artifact.
            initial_checkpoint: Checkpoint folder to start from; empty starts fresh.
            settings: The training settings, each a parameter (train_settings.HELP).
            service_account: Service account the job runs as (least privilege); empty = default.
            tensorboard: Vertex TensorBoard resource name to upload logs to; empty = none.
            base_output_directory: gs:// folder for AIP_MODEL_DIR etc.; empty = the pipeline root.
            finish_by: A deadline: a duration ('6h') or a time with its zone; empty: none.
            ladder: The capacity ladder, JSON rungs (docs/deadline.md); empty: the 2 strategies.
            prior_step_seconds: Seconds per step an earlier run measured; empty: unknown.
        """
        data, seed = copy_inputs(
            data_src=data_src,
            data_dst=data_dst,
            initial_checkpoint=initial_checkpoint,
            checkpoint_dir=checkpoint_dir,
            apply=lambda task: task.set_retry(
                num_retries=3, backoff_duration="30s", backoff_max_duration=placement.RUN_TIMEOUT
            ),
        )
        job = op(
            data=data.outputs["copied"],
            checkpoint_dir=checkpoint_dir,
            expect_gpus=vertex.gpus,
            **settings.inputs(),
            service_account=service_account,
            tensorboard=tensorboard,
            base_output_directory=base_output_directory,
            **extra,
            **(
                {"finish_by": finish_by, "ladder": ladder, "prior_step_seconds": prior_step_seconds}
                if vertex.fallback
                else {}
            ),
        ).after(seed)
        then = f", then {vertex.fallback}" if vertex.fallback else ""
        job.set_display_name(f"train (Vertex {vertex.strategy}{then})").set_caching_options(False)
        # With the fall-back the task itself creates the next job; a pipeline retry is
        # only for its own container, and re-attaches to the job it left running.
        retries = min(vertex.retries, 1) if vertex.fallback else vertex.retries
        if retries:
            # The SDK's default window is 3600 s, which on KFP OSS ends retries one
            # hour after the first attempt (docs/gke.md, "Retries"). How Vertex Pipelines
            # reads it is not open source, so give it the same window as GKE rather
            # than rely on it meaning something else there.
            job.set_retry(
                num_retries=retries,
                backoff_duration=vertex.backoff,
                backoff_max_duration=placement.RUN_TIMEOUT,
            )
        add_profile(
            job,
            vertex.place_profile,
            data=data.outputs["copied"],
            settings=settings,
            expect_gpus=vertex.gpus,
            # The trace reaches the Vertex TensorBoard under the pipeline job's name:
            # the profile task uploads it (runtime.profile.upload_to_vertex_tensorboard).
            tensorboard=tensorboard,
            tensorboard_experiment=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        )
        return Outputs(model=job.outputs["model"], metrics=job.outputs["metrics"])

    return vertex_pipeline

"""Compiled pipelines, parsed into the real protos: placement, retries, Vertex job specs."""

import re

import pytest
import yaml
from argo_retry_model import HOUR, ArgoError, run, strategy_from_task
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

from spottrain import placement
from spottrain.pipelines import argo_retry, gke, guards, templates, vertex
from spottrain.pipelines import compile as comp
from spottrain.pipelines import placement as nodepools
from spottrain.version import IMAGE


def compiled(func, image=IMAGE):
    docs = list(yaml.safe_load_all(comp.compile_text(func, image)))
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())
    platform = None
    if len(docs) > 1:
        platform = json_format.ParseDict(docs[1], pipeline_spec_pb2.PlatformSpec())
    return docs, spec, platform


def k8s_executor(platform, executor):
    struct = platform.platforms["kubernetes"].deployment_spec.executors[executor]
    return json_format.ParseDict(
        json_format.MessageToDict(struct), k8s_pb2.KubernetesExecutorConfig()
    )


def task_named(spec, component_prefix):
    tasks = dict(spec.root.dag.tasks)
    for comp_spec in spec.components.values():
        tasks.update(comp_spec.dag.tasks)
    return {n: t for n, t in tasks.items() if t.component_ref.name.startswith(component_prefix)}


@pytest.fixture(scope="module")
def gke_default():
    return compiled(gke.build())


def test_gke_train_task_on_preemptible_gpu_pool_with_retries(gke_default):
    docs, spec, platform = gke_default
    assert len(docs) == 2
    train = task_named(spec, "comp-train")["train"]
    assert train.retry_policy.max_retry_count == 5
    assert train.retry_policy.backoff_duration.seconds == 60
    assert train.retry_policy.backoff_factor == 2.0
    # The retry window is the run timeout (a week), not the SDK's default hour.
    assert train.retry_policy.backoff_max_duration.seconds == 7 * 24 * 3600
    resources = spec.deployment_spec.fields["executors"].struct_value.fields["exec-train"]
    container = json_format.ParseDict(
        json_format.MessageToDict(resources)["container"],
        pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec(),
    )
    assert container.resources.accelerator.resource_type == "nvidia.com/gpu"
    assert container.resources.accelerator.resource_count == "1"
    assert container.resources.resource_memory_limit == "48G"
    assert container.image == IMAGE

    config = k8s_executor(platform, "exec-train")
    assert dict(config.node_selector.labels) == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "cloud.google.com/gke-preemptible": "true",
    }
    [tol] = config.tolerations
    assert (tol.key, tol.operator, tol.value, tol.effect) == (
        "preemptible",
        "Equal",
        "true",
        "NoSchedule",
    )


def test_gke_copy_steps_tolerate_preemptible_nodes_without_requiring_them(gke_default):
    _, spec, platform = gke_default
    copies = task_named(spec, "comp-gcs-copy")
    assert len(copies) == 2
    for task in copies.values():
        assert task.retry_policy.max_retry_count == 5
        assert not task.caching_options.enable_cache
    for executor in ("exec-gcs-copy", "exec-gcs-copy-2"):
        config = k8s_executor(platform, executor)
        assert [t.key for t in config.tolerations] == ["preemptible"]
        assert not config.node_selector.labels


def test_gke_graph_copies_then_trains(gke_default):
    _, spec, _ = gke_default
    train = spec.root.dag.tasks["train"]
    assert set(train.dependent_tasks) == {"gcs-copy", "gcs-copy-2"}
    seed = spec.root.dag.tasks["gcs-copy-2"]
    assert seed.inputs.parameters["no_clobber"].runtime_value.constant.bool_value is True
    assert seed.inputs.parameters["dst"].component_input_parameter == "checkpoint_dir"
    assert train.inputs.artifacts["data"].task_output_artifact.producer_task == "gcs-copy"
    assert set(spec.root.output_definitions.artifacts) == {"model", "metrics"}


def test_spot_placement_selects_spot_label_and_tolerates_its_taint():
    pool = placement.Placement(pool="spot", gpu_type="nvidia-l4", gpu_count=2, retries=7)
    _, spec, platform = compiled(gke.build(pool))
    config = k8s_executor(platform, "exec-train")
    assert config.node_selector.labels["cloud.google.com/gke-spot"] == "true"
    assert config.node_selector.labels["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert [(t.key, t.value) for t in config.tolerations] == [("cloud.google.com/gke-spot", "true")]
    assert task_named(spec, "comp-train")["train"].retry_policy.max_retry_count == 7
    expect = spec.root.dag.tasks["train"].inputs.parameters["expect_gpus"]
    assert expect.runtime_value.constant.number_value == 2


def test_fallback_is_an_exit_handler_that_resumes_on_demand_only_when_told():
    _, spec, platform = compiled(gke.build(fallback=placement.ON_DEMAND_PLACEMENT))
    root = spec.root.dag.tasks
    assert set(root) == {"exit-handler-1", "on-demand-fallback"}
    exit_task = root["on-demand-fallback"]
    # The SDK marks the exit task ALL_UPSTREAM_TASKS_COMPLETED after the handler's DAG
    # only, with the handler's final status as input (the backend's exit hook).
    assert exit_task.trigger_policy.strategy == (
        pipeline_spec_pb2.PipelineTaskSpec.TriggerPolicy.TriggerStrategy.ALL_UPSTREAM_TASKS_COMPLETED
    )
    assert list(exit_task.dependent_tasks) == ["exit-handler-1"]
    status = exit_task.inputs.parameters["status"].task_final_status
    assert status.producer_task == "exit-handler-1"
    # The spot training is inside the handler.
    body = spec.components["comp-exit-handler-1"].dag.tasks
    assert {"train", "gcs-copy", "gcs-copy-2", "profile"} <= set(body)
    # The exit task is a graph: a CPU decision, then the GPU task under "resume".
    fallback_dag = spec.components["comp-on-demand-fallback"].dag.tasks
    decision = fallback_dag["fallback-decision"]
    assert decision.inputs.parameters["status"].component_input_parameter == "status"
    [branch] = [t for t in fallback_dag.values() if t.trigger_policy.condition]
    assert branch.trigger_policy.condition.endswith("== 'resume'")
    resume_dag = spec.components[branch.component_ref.name].dag.tasks
    resumed = resume_dag["train-on-demand"]
    assert resumed.retry_policy.max_retry_count == 2
    # It reads a copy made inside the exit task (it may not take the spot run's).
    copied = resumed.inputs.artifacts["data"].task_output_artifact.producer_task
    assert resume_dag[copied].component_ref.name == "comp-gcs-copy-on-demand"
    # The spot task keeps its own pool selector (a shared executor label lost it).
    assert (
        "cloud.google.com/gke-preemptible"
        in k8s_executor(platform, "exec-train").node_selector.labels
    )
    config = k8s_executor(platform, "exec-train-on-demand")
    assert not config.tolerations  # on-demand pool: no preemptible taint to tolerate
    assert dict(config.node_selector.labels) == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"
    }
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    assert "accelerator" in executors["exec-train-on-demand"]["container"]["resources"]
    # Only "resume" asks for an on-demand GPU node: the decision runs on CPU.
    assert "accelerator" not in executors["exec-fallback-decision"]["container"].get(
        "resources", {}
    )
    assert not spec.root.output_definitions.artifacts


@pytest.mark.parametrize("pool", placement.SPOT_POOLS)
@pytest.mark.parametrize("fallback", [False, True])
def test_each_committed_gke_yaml_selects_tolerates_and_matches_its_nodepool(pool, fallback):
    path = comp.COMPILED_DIR / comp.gke_yaml(pool, fallback=fallback)
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs[0]["pipelineInfo"]["name"] == gke.pipeline_name(pool, fallback)
    kubernetes = docs[1]["platforms"]["kubernetes"]
    train = kubernetes["deploymentSpec"]["executors"]["exec-train"]
    selector = train["nodeSelector"]["labels"]
    [toleration] = train["tolerations"]
    # The pool kind's label, not the other kind's: a spot pod selecting the
    # preemptible label would stay Pending on a spot pool forever.
    label, value = placement.POOL_NODE_LABELS[pool]
    assert selector[label] == value
    other = {k for p, (k, _) in placement.POOL_NODE_LABELS.items() if p != pool}
    assert not other & set(selector)
    # The node-pool command for that pool creates nodes this spec lands on: GKE labels
    # nodes of a `--spot` (`--preemptible`) pool with the selected label, the taint
    # is the tolerated one, and the accelerator is the selected one.
    cmd = nodepools.nodepool_command(placement.Placement(pool=pool), cluster="c", zone="z")
    assert placement.GCLOUD_POOL_FLAGS[pool] in cmd
    assert [f for f in cmd if f in placement.GCLOUD_POOL_FLAGS.values()] == [
        placement.GCLOUD_POOL_FLAGS[pool]
    ]
    assert toleration["operator"] == "Equal"
    taint = f"{toleration['key']}={toleration['value']}:{toleration['effect']}"
    assert f"--node-taints={taint}" in cmd
    gpu = selector["cloud.google.com/gke-accelerator"]
    assert any(f.startswith(f"--accelerator=type={gpu},count=1,") for f in cmd)
    # The copies (and the fall-back's decision) tolerate the same pool's taint.
    for name, executor in kubernetes["deploymentSpec"]["executors"].items():
        if name.startswith(("exec-gcs-copy", "exec-fallback-decision")):
            assert executor["tolerations"] == [toleration]
    # The run timeout every retry window covers.
    assert kubernetes["pipelineConfig"]["activeDeadlineSeconds"] == placement.seconds(
        placement.RUN_TIMEOUT
    )


def test_every_committed_pipeline_follows_the_kfp_oss_exit_task_rules():
    paths = sorted(comp.COMPILED_DIR.glob("*.yaml"))
    assert len(paths) == 8
    for path in paths:
        spec, platform = templates.load_template(path)
        guards.check_exit_tasks(spec)
        guards.check_retry_windows(spec, platform)


def test_the_old_ignore_upstream_failure_fallback_is_refused():
    """The shape this replaced: a dsl.If on the output of an exit-hook task."""
    from kfp import dsl

    from spottrain.components.train.component import train
    from spottrain.components.training_status.component import training_status

    @dsl.pipeline(name="old-fallback")
    def old(data: str, checkpoint_dir: str):
        spot = train(data=dsl.importer(artifact_uri=data, artifact_class=dsl.Dataset).output,
                     checkpoint_dir=checkpoint_dir)  # fmt: skip
        status = training_status(checkpoint_dir=checkpoint_dir, train_steps=10)
        status.after(spot).ignore_upstream_failure()
        with dsl.If(status.output == "incomplete"):
            train(data=dsl.importer(artifact_uri=data, artifact_class=dsl.Dataset).output,
                  checkpoint_dir=checkpoint_dir)  # fmt: skip

    docs, _, _ = compiled(old)
    with pytest.raises(guards.GuardError) as err:
        guards.check_exit_tasks(docs[0])
    assert "task 'condition-1' depends on 'training-status'" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_exit_task_hooked_on_two_tasks_is_refused():
    docs, _, _ = compiled(gke.build(fallback=placement.ON_DEMAND_PLACEMENT))
    spec = docs[0]
    spec["root"]["dag"]["tasks"]["on-demand-fallback"]["dependentTasks"].append("x")
    spec["root"]["dag"]["tasks"]["x"] = {"componentRef": {"name": "comp-train"}}
    with pytest.raises(guards.GuardError, match="upstream tasks \\['exit-handler-1', 'x'\\]"):
        guards.check_exit_tasks(spec)


def test_two_exit_tasks_on_one_task_are_refused():
    """KFP 2.17.0's compiler keeps one exit hook per task (dag.go:90-91): with two
    ignore_upstream_failure() tasks after one task, the one first in name order
    compiled, passed Argo's validation and was never hooked (run with KFP's own
    compiler here: docs/verification.md)."""
    from exit_shapes import two_exits
    from kfp import dsl

    docs, _, _ = compiled(dsl.pipeline(name="two-exits")(two_exits))
    with pytest.raises(guards.GuardError) as err:
        guards.check_exit_tasks(docs[0])
    message = str(err.value)
    assert "exit tasks 'training-status-2' and 'training-status-3' both follow" in message
    assert "'training-status-2' would never run" in message and "\n" not in message


# -- Argo's retries, modelled (tests/argo_retry_model.py) -----------------------------


# The cluster as `make kfp-retry-policy` leaves it: KFP's shipped defaults with Always.
PATCHED = argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "Always")


def train_strategy(docs, workflow_defaults=PATCHED, task="train"):
    spec = docs[0]
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return strategy_from_task(tasks[task], workflow_defaults)


def test_on_a_standard_kfp_install_a_preempted_task_is_not_retried():
    """KFP 2.17.0 ships retryPolicy OnError as every template's default: a pod that
    saved on notice and exited 143 is Failed, which OnError does not retry."""
    docs = list(yaml.safe_load_all((comp.COMPILED_DIR / comp.GKE_YAML).read_text()))
    shipped = train_strategy(docs, argo_retry.KFP_WORKFLOW_DEFAULTS)
    # set_retry's limit and backoff stay the template's; the policy is the default's.
    assert (shipped.limit, shipped.duration, shipped.policy) == ("5", "60", "OnError")
    outcome = run(shipped, work=24 * HOUR, preemptions=[2 * HOUR])
    assert (outcome.phase, outcome.message, outcome.retries) == (
        "Failed", "not retried by the retry policy", 0,
    )  # fmt: skip
    # A pod that vanished with its node ("pod deleted") is an Error: that one is retried.
    assert run(shipped, work=24 * HOUR, errors=[2 * HOUR]).phase == "Succeeded"
    # The same holds for the copies and the JobSet engine's launcher (their own set_retry).
    job = list(yaml.safe_load_all((comp.COMPILED_DIR / comp.gke_yaml(engine="job")).read_text()))
    for task in ("gcs-copy", "train-job"):
        assert train_strategy(job, argo_retry.KFP_WORKFLOW_DEFAULTS, task).policy == "OnError"
    # Without the defaults (a bare Argo) the policy would be Argo's own OnFailure.
    assert train_strategy(docs, None).policy == "OnFailure"


def test_the_patched_policy_retries_a_preempted_task_and_a_vanished_pod():
    docs = list(yaml.safe_load_all((comp.COMPILED_DIR / comp.GKE_YAML).read_text()))
    strategy = train_strategy(docs)
    assert strategy.policy == "Always"
    outcome = run(strategy, work=24 * HOUR, preemptions=[2 * HOUR], errors=[9 * HOUR])
    assert outcome.phase == "Succeeded" and outcome.retries == 2
    on_failure = train_strategy(docs, argo_retry.with_policy(PATCHED, "OnFailure"))
    assert run(on_failure, work=24 * HOUR, preemptions=[2 * HOUR]).phase == "Succeeded"
    assert run(on_failure, work=24 * HOUR, errors=[2 * HOUR]).phase == "Error"  # why Always


def test_argo_retries_a_24h_run_preempted_at_hours_2_9_and_20():
    committed = comp.COMPILED_DIR / comp.GKE_YAML
    docs = list(yaml.safe_load_all(committed.read_text()))
    strategy = train_strategy(docs)
    # What the backend hands Argo: whole seconds, the factor via %v, no cap, and
    # (after make kfp-retry-policy) Always.
    assert (strategy.limit, strategy.duration, strategy.factor) == ("5", "60", "2")
    assert strategy.max_duration == "604800" and strategy.cap == ""
    deadline = docs[1]["platforms"]["kubernetes"]["pipelineConfig"]["activeDeadlineSeconds"]
    outcome = run(
        strategy, work=24 * HOUR, preemptions=[2 * HOUR, 9 * HOUR, 20 * HOUR],
        workflow_deadline=deadline,
    )  # fmt: skip
    assert outcome.phase == "Succeeded", outcome
    assert [a.phase for a in outcome.attempts] == ["Failed"] * 3 + ["Succeeded"]
    # Each retry waited 60 s, then 120 s, then 240 s.
    attempts = outcome.attempts
    assert [attempts[i + 1].start - attempts[i].end for i in range(3)] == [60, 120, 240]
    assert outcome.attempts[-1].end == 24 * HOUR + 420


def test_the_old_one_hour_window_drops_the_same_run_at_its_first_preemption():
    old = placement.Placement(retry_window="3600s")
    docs, _, _ = compiled(gke.build(old, run_timeout="3600s"))
    strategy = train_strategy(docs)
    assert strategy.max_duration == "3600"
    outcome = run(strategy, work=24 * HOUR, preemptions=[2 * HOUR, 9 * HOUR, 20 * HOUR])
    assert (outcome.phase, outcome.message) == ("Failed", "Max duration limit exceeded")
    assert outcome.retries == 0
    # Even a preemption inside the first hour only buys time until the hour ends:
    # the retry pod's deadline is the window's end.
    early = run(strategy, work=24 * HOUR, preemptions=[0.5 * HOUR])
    assert early.attempts[1].deadline == HOUR and early.attempts[1].end == HOUR
    assert early.phase == "Failed" and early.retries == 1
    assert early.message in (
        "Max duration limit exceeded",
        "Backoff would exceed max duration limit",
    )


def test_the_model_follows_argo_on_limits_factor_and_errors():
    strategy = train_strategy(list(yaml.safe_load_all(comp.compile_text(gke.build()))))
    # Six preemptions need six retries; the limit is five.
    many = run(strategy, work=24 * HOUR, preemptions=[h * HOUR for h in (1, 2, 3, 4, 5, 6)])
    assert (many.phase, many.message, many.retries) == ("Failed", "No more retries left", 5)
    # A vanished pod ("pod deleted") is an Error: Always retries it too.
    gone = run(strategy, work=24 * HOUR, errors=[3 * HOUR])
    assert gone.phase == "Succeeded" and gone.retries == 1
    # Argo reads the factor with Atoi: 1.5 would fail every retry.
    with pytest.raises(ArgoError, match="'1.5' cannot be resolved to an int"):
        run(strategy_from_task({"retryPolicy": {"maxRetryCount": 3, "backoffFactor": 1.5,
            "backoffDuration": "60s", "backoffMaxDuration": "604800s"}}),
            work=HOUR, preemptions=[0.5 * HOUR])  # fmt: skip
    # A policy without backoffMaxDuration gets the template default "0": no retries.
    bare = strategy_from_task({"retryPolicy": {"maxRetryCount": 3, "backoffDuration": "60s"}})
    assert run(bare, work=HOUR, preemptions=[0.5 * HOUR]).message == "Max duration limit exceeded"


def test_image_override_reaches_every_executor():
    image = "example.com/me/trainer:dev"
    with comp.component_images(image):
        docs, spec, _ = compiled(gke.build(), image=image)
        vertex_text = comp.compile_text(vertex.build(vertex.VertexTraining(replica_count=2)), image)
    images = {e["container"]["image"] for e in docs[0]["deploymentSpec"]["executors"].values()}
    assert images == {"example.com/me/trainer:dev"}
    # Vertex worker pools take it from the component when GCPC wraps it.
    assert vertex_text.count(f"image_uri: {image}") == 2 and comp.IMAGE not in vertex_text
    # Set at the source, only for the build: the components keep their default after.
    assert comp.compile_text(gke.build()).count(comp.IMAGE) >= 3
    # A pipeline built outside the context would keep the default: refused, not shipped.
    with pytest.raises(ValueError, match="component_images"):
        comp.compile_text(gke.build(), image=image)


@pytest.fixture(scope="module")
def vertex_two_replicas():
    settings = vertex.VertexTraining(replica_count=3, accelerator_count=2, timeout="7200s")
    return settings, compiled(vertex.build(settings))


def test_vertex_pipeline_has_no_kubernetes_section(vertex_two_replicas):
    _, (docs, _, platform) = vertex_two_replicas
    assert len(docs) == 1 and platform is None


def test_vertex_worker_pools_parse_into_custom_job_spec(vertex_two_replicas):
    settings, (docs, spec, _) = vertex_two_replicas
    [job] = templates.custom_jobs(docs[0])
    job_spec = json_format.ParseDict(
        {
            "worker_pool_specs": job["worker_pool_specs"],
            "scheduling": {
                "timeout": job["timeout"],
                "restart_job_on_worker_restart": job["restart_job_on_worker_restart"],
                "strategy": job["strategy"],
            },
            "enable_web_access": job["enable_web_access"],
        },
        aiplatform_v1.CustomJobSpec()._pb,
    )
    chief, workers = job_spec.worker_pool_specs
    assert chief.replica_count == 1 and workers.replica_count == 2
    for pool in (chief, workers):
        assert pool.machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_TESLA_T4
        assert pool.machine_spec.accelerator_count == 2
        assert pool.container_spec.image_uri == IMAGE
    assert job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert job_spec.scheduling.timeout.seconds == 7200
    assert job_spec.scheduling.restart_job_on_worker_restart
    assert job_spec.enable_web_access
    train = task_named(spec, "comp-train")["train"]
    assert train.retry_policy.max_retry_count == 5
    assert train.inputs.parameters["expect_gpus"].runtime_value.constant.number_value == 2
    for name in ("service_account", "tensorboard", "base_output_directory"):
        assert train.inputs.parameters[name].component_input_parameter == name


def test_vertex_template_builds_a_pipeline_job_offline(tmp_path):
    from spottrain.pipelines import submit

    path = tmp_path / "vertex.yaml"
    path.write_text(comp.compile_text(vertex.build()))
    job = submit.vertex_job(
        path,
        {
            "data_src": "gs://my-bucket/digits",
            "checkpoint_dir": "gs://my-bucket/ckpt",
            "train_steps": "50",
        },
        project="my-project",
        region="us-central1",
        bucket="my-bucket",
        credentials=AnonymousCredentials(),
    )
    runtime = job._gca_resource.runtime_config
    assert runtime.gcs_output_directory == "gs://my-bucket/pipeline-root"
    assert runtime.parameter_values["train_steps"] == 50  # "50" converted by the guard
    assert runtime.parameter_values["checkpoint_dir"] == "gs://my-bucket/ckpt"
    assert job.project == "my-project" and job.location == "us-central1"


@pytest.fixture(scope="module")
def fresh():
    """One fresh compile of every committed file (compiling them all takes seconds)."""
    return comp.render_all()


def test_committed_yaml_matches_a_fresh_compile(fresh):
    stale = comp.drift(rendered=fresh)
    assert not stale, f"stale compiled YAML (run `make compile`): {stale}"


def _moved_to(tmp_path, rendered):
    """The rendering with its files under ``tmp_path``, laid out as the repository's."""
    return {
        tmp_path / p.relative_to(comp.COMPILED_DIR)
        if p.is_relative_to(comp.COMPILED_DIR)
        else tmp_path / "components" / p.relative_to(comp.COMPONENTS_DIR): text
        for p, text in rendered.items()
    }


def test_drift_check_notices_an_edit(tmp_path, fresh):
    rendered = _moved_to(tmp_path, fresh)
    assert len(comp.write_all(rendered=rendered)) == 14  # 6 components, 6 GKE variants, 2 Vertex
    assert comp.drift(rendered=rendered) == []
    (tmp_path / comp.GKE_YAML).write_text("edited")
    assert comp.drift(rendered=rendered) == [tmp_path / comp.GKE_YAML]


def test_drift_check_ignores_only_the_sdk_version_stamp(tmp_path, fresh):
    rendered = _moved_to(tmp_path, fresh)
    comp.write_all(rendered=rendered)
    path = tmp_path / comp.VERTEX_YAML
    text = path.read_text()
    assert "\nsdkVersion: kfp-" in text
    # A newer kfp release stamps another version: not drift.
    path.write_text(re.sub(r"sdkVersion: kfp-\S+", "sdkVersion: kfp-2.99.0", text))
    assert comp.drift(rendered=rendered) == []
    # Anything else is.
    path.write_text(text.replace("spottrain-vertex", "spottrain-vertex-edited", 1))
    assert comp.drift(rendered=rendered) == [path]


def test_a_queued_jobset_run_skips_the_profile_step_whose_pod_would_bypass_the_queue():
    """The profile is a KFP pod on the training's GPU pool: it runs only when ``queue``
    is empty (a run-time label for Kueue cannot be set on a KFP pod)."""
    from spottrain.pipelines import gke_jobset

    _, spec, platform = compiled(gke_jobset.build(placement.Placement(pool="spot")))
    root = spec.root.dag.tasks
    assert "profile" not in root and "train-job" in root
    (gate,) = [
        t for t in root.values() if "profile" in spec.components[t.component_ref.name].dag.tasks
    ]
    assert (
        gate.trigger_policy.condition == "inputs.parameter_values['pipelinechannel--queue'] == ''"
    )
    assert gate.task_info.name == "profile unless queued"
    assert set(gate.dependent_tasks) >= {"train-job"}
    # Still on the training's pool when it runs.
    assert (
        k8s_executor(platform, "exec-profile").node_selector.labels["cloud.google.com/gke-spot"]
        == "true"
    )


@pytest.mark.parametrize("path", sorted(comp.COMPILED_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_container_components_inputs_are_described_in_the_compiled_yaml(path):
    """The consoles show each input's description: a wrapped or renamed train (GCPC's custom
    job, the on-demand copy) kept none before (35 bare inputs on Vertex's train)."""
    import yaml

    spec = next(yaml.safe_load_all(path.read_text()))
    bare = {
        name: sorted(n for n, v in c.get("inputDefinitions", {}).get("parameters", {}).items()
                     if not v.get("description"))
        for name, c in spec["components"].items() if "executorLabel" in c  # not a graph
    }  # fmt: skip
    assert not {k: v for k, v in bare.items() if v}

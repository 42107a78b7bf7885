"""The profile: real profiled digits runs (healthy vs input-bound), trace analysis,
component.

The in-process tests; those that start processes are in
tests/integration/profiling/test_profiling.py.
"""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from spottrain import profiling
from spottrain.pipelines import compile as comp
from spottrain.pipelines import gke, vertex
from spottrain.runtime import profile as rt
from spottrain.runtime.train_settings import TrainSettings

pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


def has(analysis: profiling.Analysis, key: str) -> bool:
    """Whether the analysis made a finding with this key."""
    return any(f.key == key for f in analysis.findings)


def test_allreduce_estimate_is_parameters_times_4_bytes_over_bandwidth():
    # ResNet50's 25.6 M parameters over 10 Gbit/s: 102 MB / 1.25 GB/s.
    assert profiling.allreduce_estimate_seconds(25_600_000, 10) == pytest.approx(0.08192)
    with pytest.raises(ValueError, match="bandwidth_gbps=0"):
        profiling.allreduce_estimate_seconds(1, 0)
    with pytest.raises(ValueError, match="parameters=-1"):
        profiling.allreduce_estimate_seconds(-1, 1)


def test_bad_window_names_the_value():
    with pytest.raises(ValueError, match="skip_steps=0"):
        profiling.profile([], "/tmp/x", skip_steps=0)
    with pytest.raises(ValueError, match="profile_steps=0"):
        profiling.profile([], "/tmp/x", profile_steps=0)


class _Plane:
    def __init__(self, space, name):
        self.p = space.planes.add(name=name, id=len(space.planes))
        self.meta, self.stat_ids = {}, {}

    def _event_meta(self, name, display=""):
        if (name, display) not in self.meta:
            i = len(self.meta) + 1
            self.p.event_metadata[i].CopyFrom(
                xplane_pb2.XEventMetadata(id=i, name=name, display_name=display)
            )
            self.meta[(name, display)] = i
        return self.meta[(name, display)]

    def _stat(self, name):
        if name not in self.stat_ids:
            i = len(self.stat_ids) + 1
            self.p.stat_metadata[i].CopyFrom(xplane_pb2.XStatMetadata(id=i, name=name))
            self.stat_ids[name] = i
        return self.stat_ids[name]

    def line(self, name):
        return self.p.lines.add(name=name, timestamp_ns=1000)

    def event(self, line, name, start_us, dur_us, display="", **stats):
        ev = line.events.add(
            metadata_id=self._event_meta(name, display),
            offset_ps=int(start_us * 1e6),
            duration_ps=int(dur_us * 1e6),
        )
        for key, value in stats.items():
            st = ev.stats.add(metadata_id=self._stat(key))
            if isinstance(value, str):
                st.str_value = value
            else:
                st.int64_value = value


def synthetic_gpu_trace():
    """Two steps of 10 ms: a 4 ms matmul and 2 ms of NCCL on the GPU, 3 ms of PyFunc on host."""
    space = xplane_pb2.XSpace()
    host = _Plane(space, "/host:CPU")
    compute = host.line("tf_Compute/1")
    gpu = _Plane(space, "/device:GPU:0")
    stream = gpu.line("Stream #13(Kernel)")
    copies = gpu.line("Stream #14(MemcpyH2D)")
    for step in range(2):
        t = step * 10_000
        host.event(compute, "model/dense/MatMul:MatMul", t, 100, "MatMul")
        host.event(compute, "model/py:PyFunc", t + 200, 3000, "PyFunc")
        host.event(compute, "MemoryAllocation", t, 1, tf_op="model/dense/MatMul", data_type=1)
        gpu.event(stream, "volta_sgemm_128x64_nn", t + 500, 4000, tf_op="model/dense/MatMul:MatMul")
        gpu.event(stream, "ncclKernel_AllReduce_RING_LL_Sum_float", t + 5000, 2000)
        gpu.event(copies, "MemcpyH2D", t, 3000)
    return space


def test_analysis_of_a_gpu_trace_reports_device_share_placement_precision_allreduce():
    trace = profiling.summarize_xspace([synthetic_gpu_trace()])
    assert trace.device_planes == ["/device:GPU:0"]
    assert trace.device_busy_ps == [2 * 6000 * 10**6]  # kernels only, copies excluded
    assert trace.device_collective_ps == 2 * 2000 * 10**6
    run = profiling.RunInfo(
        steps=[(0.0005, 0.010)] * 2,
        window_seconds=0.020,
        replicas=2,
        workers=1,
        global_batch=64,
        parameters=1_000_000,
        accelerators=["GPU:0"],
        bandwidth_gbps=100,
        memory_peak_bytes=2 * 2**30,
        memory_total_bytes=16 * 2**30,
    )
    a = profiling.analyse(trace, run)
    m = a.metrics
    assert m["device_compute_share"] == pytest.approx(0.6)
    assert m["input_bound"] == 0.0 and has(a, "input_ok")
    # PyFunc ran only on the host: 6 ms of 6 + 12 ms op time.
    assert m["host_op_share"] == pytest.approx(6 / 18)
    assert has(a, "host_ops")
    # 2 ms measured vs 1e6 x 4 B / 100 Gbit/s = 0.32 ms.
    assert m["allreduce_ms_per_step"] == pytest.approx(2.0)
    assert m["allreduce_estimate_ms_per_step"] == pytest.approx(0.32)
    assert has(a, "allreduce_slow")
    assert has(a, "memory_headroom") and not has(a, "no_accelerator")
    assert has(a, "precision_32bit")  # float32 matmul, no mixed precision
    md = profiling.render_markdown(a)
    assert "mixed precision" in md.lower() and "bigger batch" in md
    assert "<table>" in profiling.render_html(md)


def test_the_step_chart_draws_each_step_and_its_input_wait_to_scale():
    steps = [(0.001, 0.010), (0.030, 0.040), (0.0, 0.020)]
    svg = profiling.report.steps_svg(steps)
    bars = re.findall(r'class="step" data-step-ms="([\d.]+)" data-input-ms="([\d.]+)"', svg)
    assert [(float(a), float(b)) for a, b in bars] == [(10.0, 1.0), (40.0, 30.0), (20.0, 0.0)]
    heights = [float(h) for h in re.findall(r'<rect class="step"[^>]* height="([\d.]+)"', svg)]
    assert heights[1] == max(heights) and heights[0] == pytest.approx(heights[1] / 4, rel=0.01)
    assert 'data-median-step-ms="20.00"' in svg and 'data-median-input-ms="1.00"' in svg
    page = profiling.render_html("# Training profile", steps)
    assert page.index("<h1>Training profile") < page.index("Step time and input wait")
    assert profiling.render_html("# Training profile").count("<svg") == 0


def test_analysis_flags_work_between_steps_and_uneven_steps():
    steps = [(0.0, 0.010)] * 8 + [(0.0, 0.050)] * 2  # 180 ms of steps in a 300 ms window
    run = profiling.RunInfo(steps=steps, window_seconds=0.3, global_batch=8)
    a = profiling.analyse(profiling.TraceSummary(), run)
    assert a.metrics["between_steps_share"] == pytest.approx(0.4)
    assert a.metrics["step_time_p90_ms"] == pytest.approx(50)
    assert has(a, "between_steps") and has(a, "uneven_steps") and has(a, "no_accelerator")
    assert "--log-every-steps" in profiling.render_markdown(a)


def test_profile_yaml_is_typed_and_uses_the_image():
    spec = yaml.safe_load((comp.COMPONENTS_DIR / "profile" / "component.yaml").read_text())
    outputs = spec["root"]["outputDefinitions"]["artifacts"]
    kinds = {name: o["artifactType"]["schemaTitle"] for name, o in outputs.items()}
    assert kinds == {
        "report": "system.Markdown",
        "report_html": "system.HTML",
        "metrics": "system.Metrics",
        "trace": "system.Artifact",
    }
    inputs = spec["root"]["inputDefinitions"]["artifacts"]
    assert inputs["model"].get("isOptional") is True
    [executor] = spec["deploymentSpec"]["executors"].values()
    assert "pip install" not in json.dumps(executor)


def test_pipelines_profile_after_train_on_the_training_placement():
    docs = list(yaml.safe_load_all(comp.compile_text(gke.build())))
    tasks = docs[0]["root"]["dag"]["tasks"]
    prof = tasks["profile"]
    assert "train" in prof["dependentTasks"]
    assert prof["inputs"]["artifacts"]["model"]["taskOutputArtifact"]["producerTask"] == "train"
    assert prof["retryPolicy"]["maxRetryCount"] == tasks["train"]["retryPolicy"]["maxRetryCount"]
    executors = docs[0]["deploymentSpec"]["executors"]
    assert (
        executors["exec-profile"]["container"]["resources"]["accelerator"]["resourceCount"] == "1"
    )
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-profile"]["nodeSelector"] == k8s["exec-train"]["nodeSelector"]
    assert k8s["exec-profile"]["tolerations"] == k8s["exec-train"]["tolerations"]

    vdoc = next(yaml.safe_load_all(comp.compile_text(vertex.build())))
    accel = vdoc["deploymentSpec"]["executors"]["exec-profile"]["container"]["resources"]
    assert accel["accelerator"]["resourceType"] == "NVIDIA_TESLA_T4"
    assert "train" in vdoc["root"]["dag"]["tasks"]["profile"]["dependentTasks"]


def test_training_note_flags_a_different_setup():
    note = rt.training_note(
        {"final_step": 100, "global_batch_size": 64, "replicas": 4, "num_workers": 4},
        {"replicas": 1.0, "global_batch_size": 16.0},
    )
    assert "replicas 1 vs 4" in note and "global batch 16 vs 64" in note


def test_tensorboard_resource_names_and_experiment_ids():
    assert rt.parse_tensorboard("projects/p/locations/us-central1/tensorboards/123") == (
        "p",
        "us-central1",
        "123",
    )
    for bad in ("123", "projects/p/tensorboards/1", "projects/p/locations/l/tensorboards/"):
        with pytest.raises(ValueError, match=f"tensorboard={bad!r}"):
            rt.parse_tensorboard(bad)
    assert rt.experiment_name("spottrain-20261122-190000-ab12cd") == (
        "spottrain-20261122-190000-ab12cd"
    )
    assert rt.experiment_name("My Run_1") == "my-run-1"
    assert rt.experiment_name("") == "spottrain-profile"
    assert len(rt.experiment_name("x" * 300)) == 128


def test_a_bad_tensorboard_name_stops_the_profile_task_before_it_profiles(tmp_path):
    with pytest.raises(SystemExit) as err:
        rt.run_component(
            data=None, model=None, report=None, report_html=None, metrics=None, trace=None,
            settings=TrainSettings(), tensorboard="my-tensorboard",
        )  # fmt: skip
    assert err.value.code == 64 and "tensorboard='my-tensorboard'" in str(err.value)


def test_vertex_pipeline_hands_its_tensorboard_to_the_profile_task():
    spec = yaml.safe_load((comp.COMPILED_DIR / comp.VERTEX_YAML).read_text())
    inputs = spec["root"]["dag"]["tasks"]["profile"]["inputs"]["parameters"]
    assert inputs["tensorboard"] == {"componentInputParameter": "tensorboard"}
    experiment = inputs["tensorboard_experiment"]["runtimeValue"]["constant"]
    assert experiment == "{{$.pipeline_job_name}}"


class _VertexStandIn(BaseHTTPRequestHandler):
    """Answers every Vertex AI REST call with one error, shaped as Google APIs return them.

    (https://cloud.google.com/apis/design/errors: ``{"error": {code, message, status}}``.)
    """

    status = (403, "PERMISSION_DENIED", "Permission 'aiplatform.tensorboards.get' denied")
    requests: list = []

    def _answer(self):
        code, status, message = self.status
        type(self).requests.append((self.command, self.path))
        body = json.dumps({"error": {"code": code, "message": message, "status": status}})
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def vertex_rest(monkeypatch):
    """The real aiplatform client, REST transport, pointed at the stand-in; config restored."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform import initializer

    saved = dict(vars(initializer.global_config))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VertexStandIn)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    _VertexStandIn.requests = []
    aiplatform.init(
        project="my-project", location="us-central1", credentials=AnonymousCredentials(),
        api_transport="rest", api_endpoint=f"http://127.0.0.1:{server.server_address[1]}",
    )  # fmt: skip
    yield _VertexStandIn
    server.shutdown()
    vars(initializer.global_config).clear()
    vars(initializer.global_config).update(saved)


TENSORBOARD = "projects/my-project/locations/us-central1/tensorboards/123"


@pytest.mark.parametrize(
    "status",
    [
        (403, "PERMISSION_DENIED", "Permission 'aiplatform.tensorboards.get' denied"),
        (404, "NOT_FOUND", "Tensorboard 123 not found"),
    ],
    ids=["forbidden", "not-found"],
)
def test_a_refused_vertex_tensorboard_upload_is_fatal_and_one_line(vertex_rest, tmp_path, status):
    """A refusal no retry changes: exit 64 naming the TensorBoard (REST raises Forbidden
    for 403 where gRPC raises PermissionDenied: both must count)."""
    vertex_rest.status = status
    with pytest.raises(SystemExit) as err:
        rt.upload_or_refuse(str(tmp_path), TENSORBOARD, "exp")
    assert err.value.code == 64
    assert err.value.message.startswith(f"cannot upload the profile to tensorboard={TENSORBOARD!r}")
    assert status[2] in err.value.message and "\n" not in err.value.message
    assert vertex_rest.requests and vertex_rest.requests[0][1].startswith(
        "/v1/projects/my-project/locations/us-central1/tensorboards/123"
    )


def test_an_unavailable_vertex_tensorboard_is_left_to_the_retry(vertex_rest, tmp_path):
    from google.api_core import exceptions as api

    vertex_rest.status = (503, "UNAVAILABLE", "The service is currently unavailable")
    with pytest.raises(api.ServiceUnavailable):
        rt.upload_or_refuse(str(tmp_path), TENSORBOARD, "exp")

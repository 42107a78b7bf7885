"""Run compiled component commands in faithful local copies of the platforms' process chains.

* :func:`executor_input` fills a component's executor input with kfp.local's own
  code (kfp/local/task_dispatcher.py ``run_single_task_implementation`` does the
  same: ``construct_executor_input`` → ``executor_input_to_dict`` →
  ``replace_placeholders``).
* :func:`start_as_pid1` runs a command as PID 1 of a new PID namespace
  (``unshare --pid --fork --mount-proc``), as a container runtime does; when
  PID 1 exits, the kernel kills everything left in the namespace, as in a pod.
* ``tests/standins/`` holds the Argo emissary and KFP launcher stand-ins; the real
  ``argoexec emissary`` (Argo v4.0.5, `make argoexec`) replaces the former when built.

Only the processes are real here; GCS, Vertex and Kubernetes are not involved.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from spottrain.ledger import schema

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = str(Path(sys.executable).parent)
# The image's OS-level tools (tini), fetched by `make tools` (the Makefile says how).
TOOLS_BIN = str(REPO / ".tools" / "bin")
# Argo v4.0.5's real executor, built by `make argoexec` (the Makefile says how).
ARGOEXEC = Path(TOOLS_BIN) / "argoexec"


def have_tini() -> bool:
    """Whether the image's init is here to run (`make tools` fetches Debian's)."""
    return shutil.which("tini", path=f"{TOOLS_BIN}:{os.environ.get('PATH', '')}") is not None


NO_TINI = "needs tini, the image's init (`make tools` fetches it; apt-get was not usable)"
STANDINS = Path(__file__).resolve().parent / "standins"
_STEP = re.compile(rb"\bstep (\d+)/(\d+)\b")


def can_unshare() -> bool:
    """Whether this machine lets us create PID namespaces (root, or user namespaces)."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


def compiled_docs(path: Path) -> list[dict]:
    """The YAML documents of a compiled pipeline (pipeline spec, then platform specs)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def executor_input(component, arguments: dict, task_root: Path) -> dict:
    """The executor input KFP would give ``component`` with ``arguments`` (kfp.local's code)."""
    from kfp.local import executor_input_utils

    spec = component.pipeline_spec
    (component_spec,) = spec.components.values()
    message = executor_input_utils.construct_executor_input(
        component_spec=component_spec,
        arguments=arguments,
        task_root=str(task_root),
        block_input_artifact=False,
    )
    return executor_input_utils.executor_input_to_dict(
        executor_input=message, component_spec=component_spec
    )


def fill_placeholders(command: list[str], executor_input_dict: dict, task_root: Path) -> list[str]:
    """Resolves ``{{$}}`` and friends as kfp.local does (GCPC's ``json_escape[1]`` too).

    GCPC embeds the executor input in the custom job's JSON payload escaped once
    (``{{$.json_escape[1]}}``); once the payload is parsed the worker pool's
    argument is the plain executor-input JSON, which is ``{{$}}``.
    """
    from kfp.local import placeholder_utils

    command = [c.replace("{{$.json_escape[1]}}", "{{$}}") for c in command]
    return placeholder_utils.replace_placeholders(
        full_command=command,
        executor_input_dict=executor_input_dict,
        pipeline_resource_name="spottrain-repro",
        task_resource_name="train",
        pipeline_root=str(task_root),
        unique_pipeline_id="repro",
    )


def chain_env(extra: dict | None = None) -> dict:
    """Environment of the reproduced container: our venv's python3 and tini first on PATH."""
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        PATH=f"{VENV_BIN}:{TOOLS_BIN}:{env.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


@dataclass
class Chain:
    """A process tree started as PID 1 of its own PID namespace."""

    proc: subprocess.Popen  # the ``unshare`` process outside the namespace
    output: bytearray = field(default_factory=bytearray)
    step: int = 0
    step_times: dict[int, float] = field(default_factory=dict)

    @property
    def pid1(self) -> int:
        """Host PID of the namespace's PID 1 (``unshare --fork``'s child)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    kids = f.read().split()
            except OSError:
                kids = []
            if kids:
                return int(kids[0])
            time.sleep(0.01)
        raise RuntimeError("no PID 1 appeared in the namespace")

    def pump(self, timeout: float) -> bool:
        """Reads output for up to ``timeout`` s; returns False at end of output."""
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        self.output += chunk
        for m in _STEP.finditer(chunk):
            self.step = max(self.step, int(m.group(1)))
            self.step_times.setdefault(int(m.group(1)), time.monotonic())
        return True

    def wait_for_step(self, step: int, timeout: float) -> None:
        """Reads output until the trainer logged ``step`` (or raises with the log)."""
        deadline = time.monotonic() + timeout
        while self.step < step:
            if time.monotonic() > deadline or not self.pump(0.5):
                self.kill()
                raise AssertionError(f"step {step} not reached:\n{self.text()[-4000:]}")

    def finish(self, timeout: float) -> int:
        """Reads to the end; returns PID 1's exit code (the container's)."""
        deadline = time.monotonic() + timeout
        while self.pump(0.5):
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"did not finish in {timeout} s:\n{self.text()[-4000:]}")
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILLs PID 1, which takes the whole namespace with it."""
        try:
            os.kill(self.pid1, signal.SIGKILL)
        except (ProcessLookupError, RuntimeError):
            pass
        self.proc.kill()
        self.proc.wait(timeout=30)

    def text(self) -> str:
        """Everything the chain printed so far."""
        return self.output.decode(errors="replace")


def start_as_pid1(cmd: list[str], env: dict, cwd: Path, var_run_argo: Path | None = None) -> Chain:
    """Starts ``cmd`` as PID 1 of a new PID namespace, output captured.

    Its stdin is ``/dev/null``, as a container's without ``stdin: true`` (argoexec
    gives a child a pty when its own stdin is a terminal). With ``var_run_argo``,
    that directory is bind-mounted at ``/var/run/argo`` in a private mount namespace
    (``--mount-proc`` makes one), as the pod's shared emptyDir is; only an empty
    mount point is left in the host's ``/var/run``. ``sh`` execs ``cmd``, which is
    PID 1.
    """
    if var_run_argo is not None:
        mount = 'mkdir -p /var/run/argo && mount --bind "$0" /var/run/argo && exec "$@"'
        cmd = ["sh", "-c", mount, str(var_run_argo), *cmd]
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *cmd],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return Chain(proc)


def namespace_processes(pid1: int) -> list[int]:
    """Host PIDs of the live (not zombie) processes in ``pid1``'s PID namespace, PID 1 too."""
    try:
        ns = os.readlink(f"/proc/{pid1}/ns/pid")
    except OSError:
        return []
    live = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            live.append(int(entry))
    return live


def ledger_records(checkpoint_dir: Path) -> list[dict]:
    """The attempt ledger's records; every field a writer added is one Record declares."""
    records = json.loads((checkpoint_dir / "attempts.json").read_text())["attempts"]
    assert not schema.undeclared(records), schema.undeclared(records)
    return records


def checkpoint_steps(checkpoint_dir: Path) -> list[int]:
    """Steps of the complete checkpoints (an ``.index`` is written last)."""
    return sorted(int(p.name[5:-6]) for p in checkpoint_dir.glob("ckpt-*.index"))


def wait_for_step(chains, index: int, step: int, timeout: float) -> None:
    """Reads every pod's log (a full pipe would stall a pod) until pod ``index`` logs ``step``."""
    deadline = time.monotonic() + timeout
    open_ = set(range(len(chains)))
    while chains[index].step < step:
        for i in sorted(open_):
            if not chains[i].pump(0.1):
                open_.discard(i)
        if index not in open_ or time.monotonic() > deadline:
            raise AssertionError(f"step {step} not reached:\n{chains[index].text()[-4000:]}")


def finish_chains(chains, timeout: float) -> list[int]:
    """Reads every pod's log to its end; returns each pod's exit code (its ``unshare``'s)."""
    deadline = time.monotonic() + timeout
    open_ = set(range(len(chains)))
    while open_:
        for i in sorted(open_):
            if not chains[i].pump(0.1):
                open_.discard(i)
        if time.monotonic() > deadline:
            raise AssertionError(f"pods {sorted(open_)} did not end in {timeout} s")
    return [chain.proc.wait(timeout=30) for chain in chains]


def stop_chains(chains) -> None:
    for chain in chains:
        if chain.proc.poll() is None:
            chain.kill()

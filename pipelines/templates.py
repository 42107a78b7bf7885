"""Reading a compiled pipeline: its parameters, tasks, custom jobs and images.

The pre-flight guards (:mod:`guards`) and the CLI read templates only through
these, so a change of the compiled format (a new kfp release) is handled here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml


def load_template(path: str | Path) -> tuple[dict, dict | None]:
    """Reads a compiled pipeline: the PipelineSpec and the platform spec (or ``None``).

    Raises:
        guards.GuardError: the file is missing or unreadable, not YAML, or not a compiled
            pipeline (one line naming the path).
    """
    from spottrain.pipelines.errors import GuardError

    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise GuardError(f"pipeline {str(path)!r} cannot be read: {reason}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise GuardError(
            f"pipeline {str(path)!r} is not YAML{where}: pass a compiled pipeline YAML"
        ) from None
    if not docs or not isinstance(docs[0], dict) or "root" not in docs[0]:
        raise GuardError(f"{path} is not a compiled KFP pipeline (no 'root')")
    platform = docs[1] if len(docs) > 1 else None
    if platform is not None and not isinstance(platform, dict):
        raise GuardError(f"{path} is not a compiled KFP pipeline (its 2nd document is no mapping)")
    return docs[0], platform


def parameter_types(spec: Mapping) -> dict[str, str]:
    """The pipeline's parameters and their types (``NUMBER_INTEGER`` etc.)."""
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    return {name: p["parameterType"] for name, p in params.items()}


def required_parameters(spec: Mapping) -> list[str]:
    """The parameters without a default."""
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    return sorted(n for n, p in params.items() if not p.get("isOptional"))


def parameter_defaults(spec: Mapping) -> dict[str, Any]:
    """The template's default parameter values, integers as ``int``."""
    return _defaults(spec["root"].get("inputDefinitions", {}).get("parameters", {}))


def _defaults(params: Mapping[str, Mapping]) -> dict[str, Any]:
    """Default values of input definitions, integers as ``int``.

    The spec stores defaults as protobuf ``Value`` numbers (doubles): an integer
    parameter's default of 32 reads back as 32.0.
    """
    out = {}
    for name, p in params.items():
        if "defaultValue" in p:
            value = p["defaultValue"]
            if p.get("parameterType") == "NUMBER_INTEGER" and float(value).is_integer():
                value = int(value)
            out[name] = value
    return out


def tasks(spec: Mapping) -> Iterable[tuple[str, Mapping]]:
    """Every task of the pipeline and of its sub-DAGs, as (name, task spec)."""
    dags = [spec["root"].get("dag", {})]
    dags += [c.get("dag", {}) for c in spec.get("components", {}).values()]
    for dag in dags:
        yield from dag.get("tasks", {}).items()


def train_tasks(spec: Mapping) -> list[tuple[str, Mapping]]:
    """Tasks that take a ``checkpoint_dir`` (the ones that resume)."""
    return [
        (name, task)
        for name, task in tasks(spec)
        if "checkpoint_dir" in task.get("inputs", {}).get("parameters", {})
        and "gcs-copy" not in task.get("componentRef", {}).get("name", "")
    ]


def max_train_retries(spec: Mapping) -> int:
    """The largest retry count of a train task in the template."""
    return max(
        (int(t.get("retryPolicy", {}).get("maxRetryCount", 0)) for _, t in train_tasks(spec)),
        default=0,
    )


def _train_tasks_in_dags(spec: Mapping) -> Iterable[tuple[str, str, Mapping]]:
    """``(DAG owner, task name, task)`` of each train task (see :func:`train_tasks`)."""
    found = train_tasks(spec)
    for owner, dag in dags(spec):
        for name, task in dag.get("tasks", {}).items():
            if (name, task) in found:
                yield owner, name, task


def checkpoint_dirs(spec: Mapping, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each train task's checkpoint dir in this run: ``(parameter, value)``, deduplicated.

    Read from what is wired into the task's ``checkpoint_dir`` input, through any
    sub-DAGs, whatever the pipeline calls its parameter (``ckpt``): the parameter's
    name and the run's value (given, or the template's default), or for a constant
    ``("<task>.checkpoint_dir", constant)``. An input fed by another task's output is
    known only at run time and left out.
    """
    found: list[tuple[str, str]] = []
    for owner, name, task in _train_tasks_in_dags(spec):
        binding = task["inputs"]["parameters"]["checkpoint_dir"]
        wired = _wired_value(spec, owner, binding, params, f"{name}.checkpoint_dir")
        if wired is not None and (wired[0], str(wired[1])) not in found:
            found.append((wired[0], str(wired[1])))
    return found


def checkpoint_dir_value(spec: Mapping, params: Mapping[str, Any]) -> str | None:
    """The run's checkpoint dir (the first train task's; see :func:`checkpoint_dirs`)."""
    found = checkpoint_dirs(spec, params)
    return found[0][1] if found else None


def train_task_inputs(spec: Mapping, params: Mapping[str, Any]) -> dict[str, Any]:
    """What the (first) train task gets in this run, by its own input names.

    Whatever the pipeline wires in (a constant, the run's value of a parameter of
    any name, or that parameter's default), else the component's own default; an
    input fed by another task's output is known only at run time and left out.
    """
    for owner, name, task in _train_tasks_in_dags(spec):
        return _task_inputs(spec, owner, name, task, params)
    return {}


def job_engine_inputs(spec: Mapping, params: Mapping[str, Any]) -> list[tuple[str, dict]]:
    """``(task name, inputs)`` of each JobSet-engine train task, as :func:`train_task_inputs`."""
    engine = job_engine_tasks(spec)
    return [
        (name, _task_inputs(spec, owner, name, task, params))
        for owner, name, task in _train_tasks_in_dags(spec)
        if (name, task) in engine
    ]


def _task_inputs(
    spec: Mapping, owner: str, name: str, task: Mapping, params: Mapping[str, Any]
) -> dict[str, Any]:
    component = spec.get("components", {}).get(task["componentRef"]["name"], {})
    inputs = component.get("inputDefinitions", {}).get("parameters", {})
    values = _defaults(inputs)
    for key, binding in task.get("inputs", {}).get("parameters", {}).items():
        wired = _wired_value(spec, owner, binding, params, f"{name}.{key}")
        if wired is None:
            values.pop(key, None)
            continue
        value = wired[1]  # a constant 5000 is stored as 5000.0: the input's type decides
        if inputs.get(key, {}).get("parameterType") == "NUMBER_INTEGER":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
        values[key] = value
    return values


def _wired_value(
    spec: Mapping, owner: str, binding: Mapping, params: Mapping[str, Any], label: str, depth=0
) -> tuple[str, Any] | None:
    """What feeds a task input in the DAG of ``owner`` ("root" or a component's name).

    Returns:
        ``(the root parameter's name, or label for a constant, value)``, or None.
    """
    if "runtimeValue" in binding:
        constant = binding["runtimeValue"].get("constant")
        return None if constant is None else (label, constant)
    param = binding.get("componentInputParameter")
    if param is None or depth > 20:  # another task's output: known at run time only
        return None
    if owner == "root":
        return param, params[param] if param in params else parameter_defaults(spec).get(param, "")
    for outer, dag in dags(spec):  # the tasks that run this sub-DAG feed its inputs
        for task in dag.get("tasks", {}).values():
            if task.get("componentRef", {}).get("name") == owner:
                fed = task.get("inputs", {}).get("parameters", {}).get(param)
                if fed is not None:
                    return _wired_value(spec, outer, fed, params, label, depth + 1)
    return None


def custom_jobs(spec: Mapping) -> list[dict]:
    """The Vertex custom job inputs of each custom-job component (defaults and constants)."""
    jobs = []
    for name, task in tasks(spec):
        comp = spec["components"].get(task.get("componentRef", {}).get("name", ""), {})
        defs = comp.get("inputDefinitions", {}).get("parameters", {})
        if "worker_pool_specs" not in defs:
            continue
        values = {k: v.get("defaultValue") for k, v in defs.items()}
        for key, arg in task.get("inputs", {}).get("parameters", {}).items():
            constant = arg.get("runtimeValue", {}).get("constant")
            if constant is not None:
                values[key] = constant
        jobs.append({"task": name, **values})
    return jobs


def dags(spec: Mapping) -> Iterable[tuple[str, Mapping]]:
    """The root DAG and every component's DAG, as (name, dag spec)."""
    yield "root", spec["root"].get("dag", {})
    for name, comp in sorted(spec.get("components", {}).items()):
        if "dag" in comp:
            yield name, comp["dag"]


def seconds(duration: Any) -> float:
    """A protobuf JSON duration (``"604800s"``) in seconds."""
    return float(str(duration).rstrip("s"))


def images(spec: Mapping) -> list[str]:
    """Every container image the template runs, including custom-job ones."""
    found = [
        e["container"]["image"]
        for e in spec.get("deploymentSpec", {}).get("executors", {}).values()
        if "container" in e
    ]
    for job in custom_jobs(spec):
        for pool in job.get("worker_pool_specs") or []:
            uri = (pool.get("container_spec") or {}).get("image_uri")
            if uri:
                found.append(uri)
    return found


def placeholder_images(spec: Mapping) -> list[str]:
    """The template's images that are the committed placeholder (``spottrain.version``)."""
    from spottrain.version import IMAGE_REPO

    return sorted(
        {
            i
            for i in images(spec)
            if i == IMAGE_REPO or i.startswith((f"{IMAGE_REPO}:", f"{IMAGE_REPO}@"))
        }
    )


def job_engine_tasks(spec: Mapping) -> list[tuple[str, Mapping]]:
    """The JobSet-engine train tasks (``train_job``: its pods run elsewhere)."""
    return [
        (name, task)
        for name, task in tasks(spec)
        if task.get("componentRef", {}).get("name", "").startswith("comp-train-job")
    ]

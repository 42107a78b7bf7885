"""A small model of how KFP OSS retries a task: its retry policy, as Argo runs it.

Two halves, each mirroring cited upstream lines so the tests can show what a
compiled template does on a real cluster without one:

1. :func:`strategy_from_task` converts a compiled ``retryPolicy`` the way the KFP
   backend does (kubeflow/pipelines 2.17.0, commit 4a3592cb2dd0a91a4652ab93893ec8beda1f3158,
   ``backend/src/v2/compiler/argocompiler/container.go``), then merges the cluster's
   template defaults into it as Argo's controller does (``workflowDefaults`` of the
   ``workflow-controller-configmap``: on a standard KFP install the value KFP ships,
   ``spottrain.pipelines.argo_retry.KFP_WORKFLOW_DEFAULTS``).
2. :func:`run` replays one task's attempts through Argo's ``processNodeRetries``
   (argoproj/argo-workflows v4.0.5, commit 0ab1452144d8f4d57c50b37ce50dad218868e950,
   the Argo module KFP 2.17.0's go.mod:10 requires:
   `github.com/argoproj/argo-workflows/v4 v4.0.5`).

Times are seconds since the task's first attempt started.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

HOUR = 3600.0


class ArgoError(Exception):
    """Argo returns an error from processNodeRetries (the retry node errors)."""


def go_any_string(value) -> str:
    """Go's ``fmt.Sprintf("%v", v)``, which is how KFP stringifies retry values.

    argoproj/argo-workflows pkg/apis/workflow/v1alpha1/anystring.go:15 (v4.0.5)
    `return AnyString(fmt.Sprintf("%v", val))`. ``%v`` of a float64 is the shortest
    representation without a trailing ``.0`` (2.0 -> "2", 1.5 -> "1.5").
    """
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    return str(value)


def parse_duration(text: str) -> float:
    """Argo's ``ParseStringToDuration``: a bare integer is seconds, else a Go duration.

    argoproj/argo-workflows pkg/apis/workflow/v1alpha1/utils.go:11-13 (v4.0.5)
    `// If no units are attached, treat as seconds` /
    `if val, err := strconv.Atoi(durationString); err == nil {`
    """
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return float(int(text))
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ArgoError(f"unable to parse {text} as a duration")
    return sum(float(n) * units[u] for n, u in parts)


def atoi(text: str) -> int:
    """``intstr.Int32`` on a string IntOrString: ``strconv.Atoi`` or an error.

    argoproj/argo-workflows util/intstr/parametrizable.go:17-19 (v4.0.5)
    `i, err := strconv.Atoi(is.StrVal)` / `cannot be resolved to an int`
    """
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ArgoError(f"value '{text}' cannot be resolved to an int")
    return int(text)


@dataclass(frozen=True)
class RetryStrategy:
    """Argo's ``retryStrategy`` of the executor template, as strings like Argo sees them."""

    limit: str
    duration: str
    factor: str
    max_duration: str
    cap: str = ""  # KFP never sets it (container.go:669-676 builds Backoff without Cap)
    # KFP sets no retryPolicy (container.go:678-683: Limit and Backoff only); the
    # template defaults may (merge_template_defaults), else Argo's default applies:
    # pkg/apis/workflow/v1alpha1/workflow_types.go:2299-2300 (v4.0.5)
    # `if s.Expression == "" {` / `return RetryPolicyOnFailure`.
    policy: str = "OnFailure"
    backoff: bool = True  # KFP always sets one; template defaults alone have none


def merge_template_defaults(own: RetryStrategy | None, defaults: Mapping | None):
    """The template's retry strategy after Argo merges the template defaults into it.

    argoproj/argo-workflows workflow/controller/operator.go:2133 (v4.0.5)
    `err = woc.mergedTemplateDefaultsInto(resolvedTmpl)`, and :4480
    `strategicpatch.StrategicMergePatch(tmplDefaultsJSON, targetTmplJSON, wfv1.Template{})`:
    the template is the patch, the defaults the original, so for the ``retryStrategy``
    struct (no patch strategy: a recursive merge) every field the template sets wins
    and every field it leaves out (``retryPolicy``: ``omitempty``,
    workflow_types.go:2277) comes from the defaults.
    """
    strategy = dict((defaults or {}).get("retryStrategy") or {})
    if own is None:
        if not strategy:
            return None
        return RetryStrategy(
            limit=str(strategy.get("limit", "0")), duration="", factor="", max_duration="",
            policy=str(strategy.get("retryPolicy") or "OnFailure"), backoff=False,
        )  # fmt: skip
    if strategy.get("retryPolicy"):
        return RetryStrategy(**{**own.__dict__, "policy": str(strategy["retryPolicy"])})
    return own


def template_defaults(workflow_defaults: str | None) -> Mapping | None:
    """``spec.templateDefaults`` of a configmap's ``workflowDefaults`` value."""
    import yaml

    doc = yaml.safe_load(workflow_defaults or "") or {}
    return (doc.get("spec") or {}).get("templateDefaults")


def strategy_from_task(task: Mapping, workflow_defaults: str | None = None) -> RetryStrategy | None:
    """The Argo retry strategy a task of a PipelineSpec runs with on a cluster.

    ``workflow_defaults``: the cluster's ``workflowDefaults`` configmap value (``None``:
    an Argo without template defaults, as the model had it before KFP's were read).

    Mirrors kubeflow/pipelines backend/src/v2/compiler/argocompiler/container.go (2.17.0):
    - :614-649 getTaskRetryParametersWithValues: max count, factor always; duration and
      max duration as *whole seconds* only when present,
      :627 `wfapi.AnyStringPtr(retryPolicy.GetBackoffDuration().Seconds)`,
      :641 `wfapi.AnyStringPtr(retryPolicy.GetBackoffMaxDuration().Seconds)`;
    - :410 the executor template's inputs default each missing one to "0",
      `c.addParameterDefault(c.getTaskRetryParameters(task), "0")`;
    - :667-686 getTaskRetryStrategyFromInput: `MaxDuration: backOffMaxDuration,`
      `Duration: backOffDuration,`, `Limit: ... StrVal: maxCount`.
    """
    own = _compiled_strategy(task)
    return merge_template_defaults(own, template_defaults(workflow_defaults))


def _compiled_strategy(task: Mapping) -> RetryStrategy | None:
    """The ``retryStrategy`` the KFP backend writes into the executor template."""
    policy = task.get("retryPolicy")
    if not policy:
        return None  # container.go:582 `if taskRetrySpec != nil {`: no retryStrategy

    def whole_seconds(key: str) -> str:
        if key not in policy:
            return "0"  # the template default, container.go:410
        return go_any_string(int(parse_duration(str(policy[key]))))  # Duration.Seconds

    return RetryStrategy(
        limit=go_any_string(int(policy.get("maxRetryCount", 0))),
        duration=whole_seconds("backoffDuration"),
        factor=go_any_string(float(policy.get("backoffFactor", 0.0))),
        max_duration=whole_seconds("backoffMaxDuration"),
    )


@dataclass
class Attempt:
    """One pod of the task."""

    start: float
    end: float
    phase: str  # "Succeeded", "Failed" (e.g. exit 143) or "Error" (e.g. pod deleted)
    deadline: float | None = None  # ARGO_DEADLINE of a retry pod


@dataclass
class Outcome:
    """How the task ended."""

    phase: str
    message: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def retries(self) -> int:
        return len(self.attempts) - 1


def run(
    strategy: RetryStrategy | None,
    *,
    work: float,
    preemptions: Sequence[float] = (),
    errors: Sequence[float] = (),
    workflow_deadline: float | None = None,
) -> Outcome:
    """Replays a resumable task of ``work`` seconds through Argo's retries.

    Args:
        strategy: From :func:`strategy_from_task`; ``None`` means no retries.
        work: Seconds of training the task needs; a preemption loses none of it
            (the trainer saves on SIGTERM), so every attempt resumes where the last
            one stopped.
        preemptions: Wall-clock times at which the node is reclaimed; the pod exits
            143 and its node is Failed.
        errors: Wall-clock times at which the pod vanishes (node Error, "pod deleted",
            operator.go:1289).
        workflow_deadline: The run's ``activeDeadlineSeconds``, measured from the first
            attempt's start (the run starts a little earlier; this is conservative).

    Mirrors argoproj/argo-workflows workflow/controller/operator.go processNodeRetries
    (v4.0.5), in its order:
    - :1014 the workflow deadline, "retry exceeded workflow deadline" (:1019);
    - :1028-1040 `maxDurationDeadline = firstChildNode.StartedAt.Add(maxDuration)`,
      then `if time.Now().After(maxDurationDeadline)` -> "Max duration limit exceeded";
    - :1045-1046 a missing base duration is an error;
    - :1055-1066 `timeToWait = duration * factor^(len(childNodeIds)-1)` (factor via Atoi);
    - :1070-1077 the optional `cap` (KFP sets none);
    - :1079-1084 `waitingDeadline := lastChildNode.FinishedAt.Add(timeToWait)`, and if it
      is after the max-duration deadline: "Backoff would exceed max duration limit";
    - :1095 `opts.executionDeadline = maxDurationDeadline`: the next pod gets the
      window's end as its deadline (workflow/controller/workflowpod.go:343 ARGO_DEADLINE,
      :671-672 the earlier of it and the workflow deadline);
    - :1102-1124 retryPolicy: OnFailure retries Failed, not Error; OnError (KFP's
      shipped template default) Error, not Failed; Always both;
    - :1132-1138 `int32(len(childNodeIds)) > *limit` -> "No more retries left".
    """
    events = sorted([(t, "Failed") for t in preemptions] + [(t, "Error") for t in errors])
    attempts: list[Attempt] = []
    now, done, deadline = 0.0, 0.0, None
    while True:
        pod_deadline = deadline
        if workflow_deadline is not None:  # workflowpod.go:668-672
            pod_deadline = min(d for d in (pod_deadline, workflow_deadline) if d is not None)
        finish = now + (work - done)
        interrupt = next(((t, p) for t, p in events if now < t < finish), None)
        end, phase = (finish, "Succeeded") if interrupt is None else interrupt
        if pod_deadline is not None and end > pod_deadline:
            end, phase = pod_deadline, "Failed"  # the executor kills it at ARGO_DEADLINE
        attempts.append(Attempt(now, end, phase, pod_deadline))
        done += end - now
        now = end
        if phase == "Succeeded":
            return Outcome("Succeeded", "", attempts)
        if strategy is None:
            return Outcome(phase, "no retryStrategy", attempts)
        children = len(attempts)
        if workflow_deadline is not None and now > workflow_deadline:
            return Outcome(phase, "retry exceeded workflow deadline", attempts)
        # KFP always sets Backoff (container.go:669); template defaults alone do not,
        # and then Argo retries at once (operator.go:1025 `if retryStrategy.Backoff != nil {`).
        waiting_deadline = now
        if strategy.backoff:
            if strategy.max_duration != "":
                deadline = parse_duration(strategy.max_duration)  # + first start (= 0)
                if now > deadline:
                    return Outcome(phase, "Max duration limit exceeded", attempts)
            if strategy.duration == "":
                raise ArgoError("no base duration specified for retryStrategy")
            wait = parse_duration(strategy.duration)
            factor = atoi(strategy.factor)
            if factor > 0:
                wait *= math.pow(factor, children - 1)
            if strategy.cap:
                wait = min(wait, parse_duration(strategy.cap))
            waiting_deadline = now + wait
            if deadline is not None and waiting_deadline > deadline:
                return Outcome(phase, "Backoff would exceed max duration limit", attempts)
        retry_on_failed, retry_on_error = {
            "Always": (True, True),
            "OnError": (False, True),
            "OnFailure": (True, False),
        }[strategy.policy]
        if (phase == "Failed" and not retry_on_failed) or (phase == "Error" and not retry_on_error):
            return Outcome(phase, "not retried by the retry policy", attempts)
        if children > atoi(strategy.limit):
            return Outcome(phase, "No more retries left", attempts)
        now = waiting_deadline  # requeued until the backoff has passed (:1088-1091)

"""The Job-engine train component's body: a launcher for a Kubernetes Indexed Job.

One KFP task creates (or, on its own retry, re-attaches to) a ``batch/v1`` Indexed
Job with one pod per worker and a headless Service, follows it to the end and
fills the same outputs as the in-pod ``train`` component. Modules, one job each:

* ``names``: deterministic names and labels from the KFP run and task.
* ``manifests``: the Job and Service manifests (placement from ``Placement``).
* ``kube``: the few ``kubernetes`` client calls used, and their errors.
* ``status``: reading Job and Pod status (conditions, disruptions, exit codes).
* ``control``: the control loop (create, re-attach, follow, fail over, clean up).
* ``logs``: streams the chief's log into the task log.
* ``component``: the KFP component body (inputs → launcher → outputs).
* ``rbac``: the least-privilege Role the launcher's service account needs.
"""

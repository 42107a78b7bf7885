"""The ``train_job`` component's body: one gang of training pods as a JobSet on GKE.

One KFP task creates (or, on its own retry, re-attaches to) a JobSet whose Indexed
child Job runs one pod per worker, follows it to the end, and fills the same outputs
as the in-pod ``train`` component. JobSet's controller restarts the gang and keeps the
budget; the launcher is observe → decide → act. Modules, one job each:

* ``names``: deterministic names and labels from the KFP run and task.
* ``jobset``: the JobSet manifest (placement from ``Placement``, the failure rules).
* ``kube``: the few ``kubernetes`` client calls made, and their errors.
* ``status``: reading pod and node fields (disruptions, exit codes, capacity kind).
* ``observe`` / ``decide`` / ``launcher``: the look, the pure rule, the acts.
* ``attempts``: the pods that ended, for the attempt ledger.
* ``logs``: streams the chief's log into the task log.
* ``component``: the KFP component body (inputs → launcher → outputs).
* ``rbac``: the least-privilege Role the launcher's service account needs.
"""

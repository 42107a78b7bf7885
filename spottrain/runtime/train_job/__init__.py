"""The ``train_job`` component's GKE multi-node engine on JobSet (issue 30; not yet wired).

Today ``train_job`` runs ``spottrain.runtime.gke_job`` (an Indexed Job and our own
launcher around it). This package is the JobSet engine that is to replace it:
:mod:`.jobset` builds the manifest, :mod:`.observe` and :mod:`.decide` are the
launcher's look and rule, :mod:`.launcher` acts on them (:mod:`.kube`: its API
calls). Tested on the real JobSet controller; no component calls it yet.
"""

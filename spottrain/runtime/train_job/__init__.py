"""The ``train_job`` component's GKE multi-node engine on JobSet (issue 30; not yet wired).

Today ``train_job`` runs ``spottrain.runtime.gke_job`` (an Indexed Job and our own
launcher around it). This package is the JobSet engine that is to replace it:
:mod:`.jobset` builds the manifest; nothing calls it from a component yet.
"""

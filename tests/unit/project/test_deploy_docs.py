"""The README and docs/, checked where they can be without a cloud account.

The in-process tests; those that start processes are in
tests/integration/project/test_deploy_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from doc_commands import PAGES, blocks, check_make_names, commands

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp
from spottrain.trainer import config, launch
from spottrain.version import IMAGE

REPO = Path(__file__).resolve().parents[3]


SECTION = PAGES["docs/deploy.md"]  # the deploy guide, step by step


def inline_make_commands() -> list[list[str]]:
    """``make …`` named in the prose (outside code blocks), placeholders and all."""
    found = []
    for text in PAGES.values():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`make ([^`]+)`", prose):
            found.append(span.replace("[", " ").replace("]", " ").split())
    return found


def test_the_deploy_guide_has_the_commands_it_promises():
    targets = {c[1] for c in commands(SECTION) if c[0] == "make"}
    assert {"image", "compile", "gke-nodepool", "upload", "run-gke", "run-vertex"} <= targets
    tools = {c[0] for c in commands(SECTION)}
    assert {"gcloud", "kubectl", "make"} <= tools


def test_make_commands_named_in_the_prose_name_real_targets_and_variables():
    spans = inline_make_commands()
    assert len(spans) > 50, len(spans)
    for target, *words in spans:
        check_make_names(target, [w for w in words if re.match(r"[A-Za-z_]+=", w)])


def test_python_commands_in_the_docs_parse():
    """``python -m spottrain.…`` lines: the pipelines CLI, the trainer and its launcher."""
    seen = set()
    for words in commands():
        if "-m" not in words[:3] or not words[0].endswith("python"):
            continue
        module, args = words[2], words[3:]
        seen.add(module)
        if module == "spottrain.pipelines":
            cli.parser().parse_args(args)
        elif module == "spottrain.trainer.task":
            config.parse_args(args, {})  # ConfigError on an unknown flag or bad value
        elif module == "spottrain.trainer.launch":
            trainer_args = launch.build_parser().parse_args(args).trainer_args
            config.parse_args(trainer_args[trainer_args[:1] == ["--"] :], {})
    assert {"spottrain.trainer.task", "spottrain.trainer.launch"} <= seen, seen


def test_links_between_pages_resolve():
    for name, text in PAGES.items():
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", text):
            assert (REPO / name).parent.joinpath(target).resolve().is_file(), (name, target)
    readme_links = set(re.findall(r"\]\((docs/[^)#]+\.md)", PAGES["README.md"]))
    assert readme_links == {n for n in PAGES if n.startswith("docs/")}, "a page the map misses"


def test_the_readme_is_a_guide():
    assert len(PAGES["README.md"].splitlines()) <= 200


def test_python_snippets_compile():
    for name, text in PAGES.items():
        for snippet in blocks("python", text):
            compile(snippet, name, "exec", dont_inherit=True)
    (pinned,) = [b for b in blocks("python") if "load_component_from_url" in b]
    assert re.search(r'COMMIT = "[0-9a-f]{40}"', pinned), "the URL must be pinned to a commit"
    assert "{COMMIT}" in pinned


def test_image_registry_and_repository_agree():
    deploy = [c[1:] for c in commands(SECTION) if c[0] == "make"]
    image = next(a.split("=", 1)[1] for c in deploy if c[0] == "image" for a in c[1:])
    host, project, repo, _ = re.fullmatch(
        r"([a-z0-9-]+-docker\.pkg\.dev)/([^/]+)/([^/]+)/(.+)", image
    ).groups()  # noqa: E501
    create = next(
        c for c in commands(SECTION) if c[:4] == ["gcloud", "artifacts", "repositories", "create"]
    )
    assert create[4] == repo and f"--location={host.removesuffix('-docker.pkg.dev')}" in create
    assert ["gcloud", "auth", "configure-docker", host] in [c[:4] for c in commands(SECTION)]
    compiled = next(c for c in deploy if c[0] == "compile")
    assert compiled[1:] == [f"IMAGE={image}"]
    assert project in image


def test_the_placeholder_it_names_is_the_committed_image():
    pinned = PAGES["docs/own-pipeline.md"]
    assert f"`{IMAGE}`" in SECTION and "`spottrain.version.IMAGE`" in SECTION + pinned
    spec = yaml.safe_load((comp.COMPONENTS_DIR / "train" / "component.yaml").read_text())
    assert spec["deploymentSpec"]["executors"]["exec-train"]["container"]["image"] == IMAGE
    assert "deploymentSpec.executors.exec-train.container.image" in pinned


def test_workload_identity_commands_name_the_same_accounts():
    bind = next(
        c
        for c in commands()
        if c[:3] == ["gcloud", "iam", "service-accounts"] and c[3] == "add-iam-policy-binding"
    )
    annotate = next(c for c in commands() if c[:3] == ["kubectl", "annotate", "serviceaccount"])
    gsa = bind[4]
    assert "--role=roles/iam.workloadIdentityUser" in bind
    member = next(a for a in bind if a.startswith("--member="))
    namespace, ksa = re.search(r"\[([^/]+)/([^]]+)\]", member).groups()
    assert (ksa, namespace) == ("pipeline-runner", "kubeflow")  # a standalone install
    assert annotate[3] == ksa and f"--namespace={namespace}" in annotate
    assert f"iam.gke.io/gcp-service-account={gsa}" in annotate
    create = next(c for c in commands() if c[:4] == ["gcloud", "iam", "service-accounts", "create"])
    assert gsa.startswith(create[4] + "@")
    assert "`default-editor` in your profile namespace" in SECTION


def test_the_rbac_the_identities_part_describes_is_what_make_gke_rbac_grants():
    from spottrain.runtime.train_job import rbac

    identities = SECTION.split("## 2. Identities", 1)[1].split("## 3.", 1)[0]
    assert "make gke-rbac NAMESPACE=kubeflow SERVICE_ACCOUNT=pipeline-runner EXECUTE=1" in (
        identities
    )
    described = {
        "jobsets": {"create", "get", "list", "patch", "delete"},
        "pods": {"get", "list", "delete"},
        "pods/log": {"get"},
        "workloads": {"list"},
        "localqueues": {"get"},
        "nodes": {"get"},
    }
    granted = {r: set(rule["verbs"]) for rule in rbac.RULES + rbac.CLUSTER_RULES
               for r in rule["resources"]}  # fmt: skip
    assert granted == described
    assert "jobsets: create/get/list/patch/delete" in identities
    assert "pods: get/list/delete, the last" in identities and "make gke-jobset" in identities
    assert "for `nodes get`" in identities
    assert "Kueue's workloads: list and localqueues:\nget" in identities


def test_versions_it_names_are_the_minimums_setup_py_installs():
    setup = (REPO / "setup.py").read_text()
    for package, version in (
        ("kfp", "2.17"),
        ("kfp-kubernetes", "2.17"),
        ("google-cloud-pipeline-components", "2.22"),
        ("google-cloud-aiplatform", "1.165"),
    ):
        assert f'"{package}>={version}' in setup, package
    assert "backend 2.17.0" in SECTION and "v4.0.5" in SECTION and "2.22.0" in SECTION

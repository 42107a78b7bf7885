"""The README's deploy section, checked where it can be without a cloud account.

Every ``make`` command in it names a real target and only variables the Makefile
reads (upper case) or parameters of the pipeline it runs (lower case), and ``make -n``
expands it into a ``python -m spottrain.pipelines`` command the CLI parses; the
Python compiles; the names it ties together (image, registry, identities) agree.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp
from spottrain.pipelines import templates
from spottrain.version import IMAGE

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
MAKEFILE = (REPO / "Makefile").read_text()
SECTION = README.split("## Deploy: from zero to a run on Google Cloud", 1)[1].split("\n## ", 1)[0]


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", SECTION, re.S)


def commands() -> list[list[str]]:
    """The shell commands of the section's sh blocks, continuation lines joined."""
    found = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                found.append(shlex.split(line))
    return found


MAKE_COMMANDS = [c[1:] for c in commands() if c[0] == "make"]
TEMPLATES = {
    "run-gke": comp.gke_yaml("spot"),
    "run-vertex": comp.VERTEX_YAML,
}


def test_the_section_has_the_commands_it_promises():
    targets = {c[0] for c in MAKE_COMMANDS}
    assert {"image", "compile", "gke-nodepool", "upload", "run-gke", "run-vertex"} <= targets
    tools = {c[0] for c in commands()}
    assert {"gcloud", "kubectl", "make"} <= tools


@pytest.mark.parametrize("argv", MAKE_COMMANDS, ids=[" ".join(c)[:50] for c in MAKE_COMMANDS])
def test_make_commands_name_real_targets_and_variables(argv):
    target, *assignments = argv
    assert re.search(rf"^(\S+ )*{re.escape(target)}( \S+)*:", MAKEFILE, re.M), target
    names = [a.split("=", 1)[0] for a in assignments]
    assert all("=" in a for a in assignments), assignments
    for name in names:
        if name.isupper():
            assert f"$({name})" in MAKEFILE, f"make {target}: the Makefile never reads {name}"
        else:
            spec, _ = templates.load_template(comp.COMPILED_DIR / TEMPLATES[target])
            assert name in templates.parameter_types(spec), f"{name} is no parameter of {target}"
    # What make would run: a CLI command that parses (dry run; no request is made).
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", *argv], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        words = shlex.split(line)
        if words[1:3] == ["-m", "spottrain.pipelines"]:
            cli.parser().parse_args(words[3:])  # SystemExit(2) on a bad argument


def test_python_snippets_compile():
    snippets = blocks("python")
    assert snippets
    for snippet in snippets:
        compile(snippet, "README.md", "exec", dont_inherit=True)
    assert re.search(r'COMMIT = "[0-9a-f]{40}"', snippets[0]), "the URL must be pinned to a commit"
    assert "load_component_from_url" in snippets[0] and "{COMMIT}" in snippets[0]


def test_image_registry_and_repository_agree():
    image = next(a.split("=", 1)[1] for c in MAKE_COMMANDS if c[0] == "image" for a in c[1:])
    host, project, repo, _ = re.fullmatch(
        r"([a-z0-9-]+-docker\.pkg\.dev)/([^/]+)/([^/]+)/(.+)", image
    ).groups()  # noqa: E501
    create = next(
        c for c in commands() if c[:4] == ["gcloud", "artifacts", "repositories", "create"]
    )
    assert create[4] == repo and f"--location={host.removesuffix('-docker.pkg.dev')}" in create
    assert ["gcloud", "auth", "configure-docker", host] in [c[:4] for c in commands()]
    compiled = next(c for c in MAKE_COMMANDS if c[0] == "compile")
    assert compiled[1:] == [f"IMAGE={image}"]
    assert project in image


def test_the_placeholder_it_names_is_the_committed_image():
    assert f"`{IMAGE}`" in SECTION and "`spottrain.version.IMAGE`" in SECTION
    spec = yaml.safe_load((comp.COMPONENTS_DIR / "train" / "component.yaml").read_text())
    assert spec["deploymentSpec"]["executors"]["exec-train"]["container"]["image"] == IMAGE
    assert "deploymentSpec.executors.exec-train.container.image" in SECTION


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
    from spottrain.runtime.gke_job import rbac

    identities = SECTION.split("### 2. Identities", 1)[1].split("### 3.", 1)[0]
    assert "make gke-rbac NAMESPACE=kubeflow SERVICE_ACCOUNT=pipeline-runner EXECUTE=1" in (
        identities
    )
    described = {
        "jobs": {"create", "get", "delete"},
        "services": {"create", "get", "delete"},
        "pods": {"get", "list", "delete"},
        "pods/log": {"get"},
        "nodes": {"get"},
    }
    granted = {r: set(rule["verbs"]) for rule in rbac.RULES + rbac.CLUSTER_RULES
               for r in rule["resources"]}  # fmt: skip
    assert granted == described
    assert "jobs and services: create/get/delete; pods: get/list/delete, the\nlast" in identities
    assert "for `nodes get`" in identities


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

"""The README and docs/, checked where they can be without a cloud account.

Every ``make`` command they name (in a shell block or inline) names a real target and
only variables the Makefile reads (upper case) or parameters of the pipeline it runs
(lower case); the shell blocks' ``make`` commands expand under ``make -n`` into a
``python -m spottrain.pipelines`` command the CLI parses, and their ``python -m
spottrain.…`` commands parse; the Python compiles; the deploy page's names (image,
registry, identities) agree; every link to a page of docs/ resolves.
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
from spottrain.trainer import config, launch
from spottrain.version import IMAGE

REPO = Path(__file__).resolve().parents[1]
PAGES = {p.relative_to(REPO).as_posix(): p.read_text()
         for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}  # fmt: skip
MAKEFILE = (REPO / "Makefile").read_text()
SECTION = PAGES["docs/deploy.md"]  # the deploy guide, step by step


def blocks(lang: str, text: str | None = None) -> list[str]:
    texts = [text] if text is not None else list(PAGES.values())
    return [b for t in texts for b in re.findall(rf"```{lang}\n(.*?)```", t, re.S)]


def commands(text: str | None = None) -> list[list[str]]:
    """The shell commands of the sh blocks (of ``text``, else of every page)."""
    found = []
    for block in blocks("sh", text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                found.append(shlex.split(line))
    return found


def inline_make_commands() -> list[list[str]]:
    """``make …`` named in the prose (outside code blocks), placeholders and all."""
    found = []
    for text in PAGES.values():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`make ([^`]+)`", prose):
            found.append(span.replace("[", " ").replace("]", " ").split())
    return found


MAKE_COMMANDS = [c[1:] for c in commands() if c[0] == "make"]
TEMPLATES = {
    "run-gke": comp.gke_yaml("spot", engine="job"),  # the default engine
    "run-vertex": comp.VERTEX_YAML,
}


def check_make_names(target: str, assignments: list[str]) -> None:
    """``target`` is a Makefile target; every NAME= is read by it or is a parameter."""
    assert re.search(rf"^(\S+ )*{re.escape(target)}( \S+)*:", MAKEFILE, re.M), target
    for name in [a.split("=", 1)[0] for a in assignments]:
        if name.isupper():
            assert f"$({name})" in MAKEFILE, f"make {target}: the Makefile never reads {name}"
        else:
            assert target in TEMPLATES, f"make {target} takes no pipeline parameter {name}"
            spec, _ = templates.load_template(comp.COMPILED_DIR / TEMPLATES[target])
            assert name in templates.parameter_types(spec), f"{name} is no parameter of {target}"


def test_the_deploy_guide_has_the_commands_it_promises():
    targets = {c[1] for c in commands(SECTION) if c[0] == "make"}
    assert {"image", "compile", "gke-nodepool", "upload", "run-gke", "run-vertex"} <= targets
    tools = {c[0] for c in commands(SECTION)}
    assert {"gcloud", "kubectl", "make"} <= tools


@pytest.mark.integration
@pytest.mark.parametrize("argv", MAKE_COMMANDS, ids=[" ".join(c)[:50] for c in MAKE_COMMANDS])
def test_make_commands_name_real_targets_and_variables(argv):
    target, *assignments = argv
    assert all("=" in a for a in assignments), assignments
    check_make_names(target, assignments)
    # What make would run: a CLI command that parses (dry run; no request is made).
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", *argv], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        if "-m spottrain.pipelines" not in line:
            continue  # other recipe lines (tool builds) are shell, not a CLI call
        words = shlex.split(line)
        if words[1:3] == ["-m", "spottrain.pipelines"]:
            cli.parser().parse_args(words[3:])  # SystemExit(2) on a bad argument


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
        "jobsets": {"create", "get", "patch", "delete"},
        "pods": {"get", "list", "delete"},
        "pods/log": {"get"},
        "nodes": {"get"},
    }
    granted = {r: set(rule["verbs"]) for rule in rbac.RULES + rbac.CLUSTER_RULES
               for r in rule["resources"]}  # fmt: skip
    assert granted == described
    assert "jobsets: create/get/patch/delete" in identities
    assert "pods: get/list/delete, the last" in identities and "make gke-jobset" in identities
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

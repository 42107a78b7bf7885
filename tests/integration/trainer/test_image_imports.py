"""The image's import contract: what runs in the trainer image imports there.

The image installs ``".[<Dockerfile extras>]"`` and nothing else; our test venv also
holds the ``pipelines`` and ``test`` extras. A runtime module that imports an
authoring-only package (``kfp.kubernetes``, GCPC, scikit-learn, ...) passes every
other test here and fails at the start of every task on a real cluster. These tests
import what the image runs in a child interpreter that sees exactly the image's
packages (``tests/image_env.py``, derived from the Dockerfile and setup.py).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from image_env import REPO, image_environment, image_python, run_in_image

# Authoring code: it needs the `pipelines` extra by design and never runs in the image.
AUTHORING = "spottrain.pipelines"


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return image_environment(tmp_path_factory.mktemp("image"))


def component_runtime_imports() -> dict[str, list[tuple[str, str]]]:
    """Each compiled component's ``from spottrain... import name`` lines (what its pod runs)."""
    found = {}
    for path in sorted((REPO / "components").glob("*/component.yaml")):
        spec = yaml.safe_load(path.read_text())
        (executor,) = spec["deploymentSpec"]["executors"].values()
        program = "\n".join(executor["container"]["command"])
        found[path.parent.name] = re.findall(
            r"^\s*from (spottrain\.[\w.]+) import (\w+)", program, re.M
        )
    return found


def image_modules(image) -> list[str]:
    """Every module of the wheel the image runs: all but authoring code and ``__main__``s."""
    return sorted(
        m
        for m in image.own_modules
        if not (m == AUTHORING or m.startswith(AUTHORING + ".")) and not m.endswith(".__main__")
    )


def test_the_image_environment_blocks_authoring_packages_and_keeps_the_runtime(image):
    # The blocker must be able to fail: authoring and test packages are out, ...
    for absent in ("kfp.kubernetes", "google_cloud_pipeline_components", "sklearn", "pytest"):
        assert image.is_blocked(absent), absent
    assert image.is_blocked("spottrain.testing")  # setup.py leaves it out of the wheel
    # ... and what the image installs stays in.
    for present in ("tensorflow", "kfp.dsl", "kubernetes.client", "google.cloud.storage"):
        assert not image.is_blocked(present), present
    assert not image.missing, f"required by the image but not installed here: {image.missing}"
    got = run_in_image(
        image,
        "import importlib, json\n"
        "out = {}\n"
        "for m in ('kfp.kubernetes', 'sklearn', 'kfp.dsl', 'spottrain.trainer.config'):\n"
        "    try:\n"
        "        out[m] = importlib.import_module(m).__file__\n"
        "    except ImportError as e:\n"
        "        out[m] = 'error: ' + str(e)\n"
        "print(json.dumps(out))\n",
    )
    assert got["kfp.kubernetes"].startswith("error: No module named 'kfp.kubernetes'")
    assert got["sklearn"].startswith("error:")
    assert not got["kfp.dsl"].startswith("error")
    # trainer comes from the wheel, not from the checkout.
    assert got["spottrain.trainer.config"].startswith(str(image.wheel_dir)), got[
        "spottrain.trainer.config"
    ]


def test_every_component_runtime_import_works_in_the_image(image):
    imports = component_runtime_imports()
    assert set(imports) == {p.parent.name for p in (REPO / "components").glob("*/component.py")}
    assert all(imports.values()), imports
    code = (
        "import importlib, json, traceback\n"
        f"wanted = {json.dumps(imports)}\n"
        "out = {}\n"
        "for comp, pairs in wanted.items():\n"
        "    for mod, name in pairs:\n"
        "        try:\n"
        "            getattr(importlib.import_module(mod), name)\n"
        "        except Exception as e:\n"
        "            out[comp] = f'{mod}.{name}: {type(e).__name__}: {e}'\n"
        "print(json.dumps(out))\n"
    )
    assert run_in_image(image, code) == {}


def test_every_module_the_image_runs_imports_in_the_image(image):
    modules = image_modules(image)
    assert "spottrain.trainer.task" in modules and "spottrain.runtime.train_job.launcher" in modules
    code = (
        "import importlib, json\n"
        f"wanted = {json.dumps(modules)}\n"
        "out = {}\n"
        "for mod in wanted:\n"
        "    try:\n"
        "        importlib.import_module(mod)\n"
        "    except Exception as e:\n"
        "        out[mod] = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps(out))\n"
    )
    assert run_in_image(image, code) == {}


def _imports(tree: ast.AST):
    """(module, line, guarded) for every import, top-level or inside a function.

    ``from a import b`` yields ``a`` and ``a.b`` (``b`` may be a submodule, as in
    ``from kfp import kubernetes``). ``guarded``: inside ``try`` with an
    ``except ImportError``/``ModuleNotFoundError`` (an optional import).
    """
    guarded_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            h.type is not None
            and {n.id for n in ast.walk(h.type) if isinstance(n, ast.Name)}
            & {"ImportError", "ModuleNotFoundError"}
            for h in node.handlers
        ):
            for inner in node.body:
                guarded_lines.update(n.lineno for n in ast.walk(inner) if hasattr(n, "lineno"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, node.lineno in guarded_lines
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno, node.lineno in guarded_lines
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno, node.lineno in guarded_lines


def test_no_import_anywhere_in_image_code_needs_an_authoring_or_test_package(image):
    """Also the imports inside functions, which the import test above never runs."""
    problems = []
    for module in image_modules(image) + [m for m in image.own_modules if m.endswith("__main__")]:
        if module.startswith(AUTHORING):
            continue
        rel = Path(*module.split("."))
        path = next(
            p
            for p in (
                image.wheel_dir / rel.with_suffix(".py"),
                image.wheel_dir / rel / "__init__.py",
            )
            if p.exists()
        )
        for name, line, guarded in _imports(ast.parse(path.read_text())):
            if image.is_blocked(name) and not guarded:
                problems.append(f"{module}:{line} imports {name}")
    assert problems == []


def test_a_dev_tool_missing_its_dev_dependency_says_so_in_one_line(image, tmp_path):
    # scikit-learn (the digits) is a test dependency: in the image the writer refuses.
    out = tmp_path / "digits"
    proc = image_python(
        image,
        "import sys; from spottrain.datasets import main; "
        f"sys.exit(main(['digits', {str(out)!r}]))",
    )
    assert proc.returncode == 69, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "python -m spottrain.datasets: error: scikit-learn is not installed (it ships the "
        "digits): pip install 'spottrain[test]'"
    ]
    assert not out.exists()


def test_the_dockerfile_smoke_import_covers_every_component_runtime_module():
    """The image build fails at once if a component's runtime module cannot import there."""
    dockerfile = (REPO / "Dockerfile").read_text()
    smoke = set()
    for line in re.findall(r'python -c "import ([^";]+)"', dockerfile):
        smoke |= {m.strip() for m in line.split(",")}
    wanted = {mod for pairs in component_runtime_imports().values() for mod, _ in pairs}
    assert wanted <= smoke, f"add to the Dockerfile's smoke import: {sorted(wanted - smoke)}"
    # The image's entry points too: the ENTRYPOINT's and the Vertex pools' init.
    assert {"spottrain.trainer.task", "spottrain.trainer.forward"} <= smoke
    # And the task the entry point trains by default (spottrain/tasks/ must ship too).
    from spottrain.trainer import task_loader

    assert task_loader.DEFAULT_TASK.partition(":")[0] in smoke

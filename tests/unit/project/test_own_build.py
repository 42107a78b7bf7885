"""A user's own build: our components on their image, their own pipeline's parameter names,
``make compile IMAGE=…`` apart from the committed YAML, and the data layout the docs promise
(docs/own-pipeline.md, docs/deploy.md).

The in-process tests; those that start processes are in
tests/integration/project/test_own_build.py.
"""

import re
import shutil
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl

from spottrain import components as ours
from spottrain.pipelines import compile as comp
from spottrain.pipelines import guards, templates

REPO = Path(__file__).resolve().parents[3]


MINE = "europe-west4-docker.pkg.dev/my-project/ml/trainer:2.0"


def _images(path: Path) -> set[str]:
    spec = next(yaml.safe_load_all(path.read_text()))
    return set(templates.images(spec))


def test_load_gives_each_component_the_users_image(tmp_path):
    assert set(ours.NAMES) == set(comp.components()), "load() must offer every component"
    for name in ours.NAMES:
        assert ours.yaml_path(name) == comp.COMPONENTS_DIR.resolve() / name / "component.yaml"
    copy, train, train_job = (ours.load(n, image=MINE) for n in ("gcs_copy", "train", "train_job"))

    @dsl.pipeline
    def mine(src: str, ckpt: str):
        data = copy(src=src, dst="gs://my-bucket/d")
        train(data=data.outputs["copied"], checkpoint_dir=ckpt).set_retry(num_retries=2)
        train_job(data=data.outputs["copied"], checkpoint_dir=ckpt, run_id="r", task_name="t")

    out = tmp_path / "mine.yaml"
    compiler.Compiler().compile(mine, str(out))
    assert _images(out) == {MINE}
    with pytest.raises(ValueError, match=r"image='Me/Trainer' is not an image reference"):
        ours.load("train", image="Me/Trainer")
    with pytest.raises(ValueError, match=r"component 'trian': ours are"):
        ours.load("trian", image=MINE)


@dsl.pipeline
def _ckpt_in_root(src: str, ckpt: str, task: str = ""):
    train = ours.load("train", image=MINE)
    train(data=dsl.importer(artifact_uri=src, artifact_class=dsl.Dataset).output,
          checkpoint_dir=ckpt, task=task, train_steps=7).set_retry(num_retries=3)  # fmt: skip


@dsl.pipeline
def _ckpt_in_sub_dag(src: str, where: str, go: bool = True):
    train = ours.load("train", image=MINE)
    with dsl.If(go == True):  # noqa: E712 - a KFP condition, not a Python comparison
        train(data=dsl.importer(artifact_uri=src, artifact_class=dsl.Dataset).output,
              checkpoint_dir=where).set_retry(num_retries=3)  # fmt: skip


@dsl.pipeline
def _ckpt_constant(src: str):
    train = ours.load("train", image=MINE)
    train(data=dsl.importer(artifact_uri=src, artifact_class=dsl.Dataset).output,
          checkpoint_dir="/tmp/local").set_retry(num_retries=3)  # fmt: skip


@pytest.mark.parametrize(
    ("pipeline", "params", "refused"),
    [
        (_ckpt_in_root, {"ckpt": "/tmp/c"}, "ckpt='/tmp/c' is not persistent"),
        (_ckpt_in_sub_dag, {"where": "/tmp/c"}, "where='/tmp/c' is not persistent"),
        (_ckpt_constant, {}, "train.checkpoint_dir='/tmp/local' is not persistent"),
    ],
)
def test_the_checkpoint_dir_is_what_is_wired_into_the_train_task(
    tmp_path, pipeline, params, refused
):
    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    with pytest.raises(guards.GuardError) as err:
        guards.preflight(out, {"src": "gs://my-bucket/d", **params})
    assert refused in str(err.value)
    if params:  # the same run with a persistent dir passes, under the pipeline's own name
        (name,) = params
        checked = guards.preflight(out, {"src": "gs://my-bucket/d", name: "gs://my-bucket/c"})
        assert checked[name] == "gs://my-bucket/c"
    if pipeline is _ckpt_in_root:  # the settings it checks are what the train task gets
        spec, _ = templates.load_template(out)
        assert templates.train_task_inputs(spec, {"ckpt": "gs://b/c"})["train_steps"] == 7


def test_the_shipped_pipelines_read_the_same(tmp_path):
    """The fall-back pipeline's train tasks sit in sub-DAGs: one dir, named checkpoint_dir."""
    spec, _ = templates.load_template(comp.COMPILED_DIR / comp.gke_yaml("spot", fallback=True))
    found = templates.checkpoint_dirs(spec, {"checkpoint_dir": "gs://my-bucket/c"})
    assert found == [("checkpoint_dir", "gs://my-bucket/c")]


def test_the_image_folder_layout_in_the_docs_is_what_the_trainer_reads(tmp_path):
    from PIL import Image

    from spottrain.exits import ConfigError
    from spottrain.tasks.image import data
    from spottrain.tasks.image.settings import IMAGE_EXTENSIONS, ImageSettings

    page = (REPO / "docs" / "deploy.md").read_text()
    part = page.split("**Your images in `data_src`.**", 1)[1].split("## ", 1)[0]
    for ext in IMAGE_EXTENSIONS:
        assert f"`{ext}`" in part, ext
    assert "at least 2" in part and "one folder per" in part
    (tree,) = re.findall(r"```text\n(.*?)```", part, re.S)
    root, *files = [ln.strip() for ln in tree.splitlines() if ln.strip()]
    for rel in files:
        (tmp_path / "d" / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(tmp_path / "d" / rel)
    index = data.index_image_dir(ImageSettings(image_dir=str(tmp_path / "d")), seed=0)
    assert root.startswith("gs://") and len(index.class_names) == 2
    assert len(index.train) + len(index.val) == len(files)
    shutil.rmtree(tmp_path / "d" / index.class_names[1])
    with pytest.raises(ConfigError, match="at least 2 labels"):
        data.index_image_dir(ImageSettings(image_dir=str(tmp_path / "d")), seed=0)

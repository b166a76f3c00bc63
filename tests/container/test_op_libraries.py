"""SavedModels that use TF Text's ops are served, as TF Serving's binary serves them.

TF Serving links TF Text's ops into tensorflow_model_server (its end-to-end
test has a TF Text model). tf-entrypoint's images leave tensorflow-text out
(194 MB); docs/own-image/Dockerfile.tf-text adds it, and this module builds
that image on top of the image under test. The server imports tensorflow_text
only when a graph names an op TensorFlow itself lacks, so other models never
pay for it (model.py's OP_LIBRARIES); without the package, such a model fails
to load with TensorFlow's "Op type not registered" and a hint.
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from harness.docker import Containers
from harness.servers import MODEL_SERVER, started
from tests.container.model_servers import model_server

#: The images this module tests (tests/container/conftest.py): TF Text's image is
#: built on the CPU image only (the same wheel and path).
IMAGE_FLAVORS = ("cpu",)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RECIPE = "docs/own-image/Dockerfile.tf-text"


@pytest.fixture(scope="module")
def text_containers(docker_client: docker.DockerClient, image: str, flavor: str) -> Containers:
    """The image under test with TF Text added by the documented recipe."""
    tag = f"{image}-text"
    docker_client.images.build(
        path=str(REPO), dockerfile=RECIPE, buildargs={"IMAGE": image}, tag=tag, rm=True
    )
    return Containers(docker_client, tag)


@pytest.fixture(scope="module")
def models(text_containers: Containers, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """text/1 (make_text_model.py), exported here: the export needs TF Text, which the
    image that exports the model library (harness/models.py) does not have."""
    return text_containers.export_models(
        tmp_path_factory.mktemp("text-models"), "make_text_model.py"
    )


def test_a_tf_text_model_is_served(
    text_containers: Containers, models: Path, tmp_path: Path
) -> None:
    spec = model_server("--model_name=text", "--model_base_path=/models/text")
    with started(text_containers, spec, models, tmp_path) as server:
        answer = server.post(
            "/v1/models/text:predict",
            {"instances": ["the quick brown fox", "", "  jumps   over  "]},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"predictions": [4, 0, 2]}
        # The gRPC path too, through the same servable.
        (grpc,) = server.grpc(
            {
                "op": "predict",
                "model": "text",
                "inputs": {"sentences": {"dtype": "object", "values": ["a b", "c"]}},
            }
        )
        logs = server.logs()
    assert "needs ops TensorFlow does not have: imported tensorflow_text" in logs, logs
    assert (grpc["code"], grpc["outputs"]) == ("OK", {"tokens": [2, 1]}), grpc


def test_without_tf_text_the_load_fails_naming_the_op_and_the_fix(
    containers: Containers, models: Path
) -> None:
    """The image under test has no tensorflow-text: the version fails to load with
    TensorFlow's own message and where to get the ops, and the server exits 1."""
    ran = containers.run(
        # No load retries (TF Serving's default retries 5 times a minute apart).
        [
            "--model_name=text",
            "--model_base_path=/models/text",
            "--rest_api_port=0",
            "--max_num_load_retries=0",
        ],
        entrypoint=[MODEL_SERVER],
        volumes={str(models): {"bind": "/models", "mode": "ro"}},
        timeout=300,
    )
    assert ran.exit_code == 1, ran.stderr
    assert "Op type not registered 'TFText>WhitespaceTokenizeWithOffsetsV2'" in ran.stderr
    assert "tensorflow_text could not be imported" in ran.stderr
    assert "docs/own-image/Dockerfile.tf-text" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_other_models_never_import_tf_text(text_containers: Containers, tmp_path: Path) -> None:
    """half_plus_two-like exports load without TF Text: the import is only for
    graphs that need its ops (it costs start-up time and memory)."""
    tmp_path.chmod(0o777)  # the image's user writes the export
    ran = text_containers.run(
        [
            "python",
            "-c",
            "import sys, tensorflow as tf;"
            "m = tf.Module(); m.v = tf.Variable(2.0);"
            "f = tf.function(lambda x: {'y': x * m.v},"
            " input_signature=[tf.TensorSpec([None], tf.float32)]);"
            "tf.saved_model.save(m, '/out/m/1',"
            " signatures={'serving_default': f.get_concrete_function()});"
            "from tf_entrypoint.serving import model;"
            "model.open_saved_model(__import__('pathlib').Path('/out/m/1'));"
            "print('tensorflow_text' in sys.modules)",
        ],
        volumes={str(tmp_path): {"bind": "/out", "mode": "rw"}},
        timeout=300,
    )
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "False", ran.stdout


def test_the_docs_show_the_recipe_verbatim() -> None:
    recipe = (REPO / RECIPE).read_text()
    shown = "\n".join(f"    {line}" if line else "" for line in recipe.splitlines())
    assert shown in (REPO / "docs" / "tf-serving.md").read_text()

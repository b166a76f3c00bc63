"""MultiInference's request checks: TF Serving's (multi_inference.cc), in its order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tf_entrypoint.serving.codec import example_proto
from tf_entrypoint.serving.core import inference
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.rest.errors import HTTP_STATUS

EXAMPLES = p.TensorSpec("DT_STRING", (-1,), "tf_example:0")
SCORES = p.TensorSpec("DT_FLOAT", (-1, 1), "y:0")
SIGNATURES = {
    "classify_x_to_y": p.Signature({"inputs": EXAMPLES}, {"scores": SCORES}, p.CLASSIFY_METHOD),
    "regress_x_to_y": p.Signature({"inputs": EXAMPLES}, {"outputs": SCORES}, p.REGRESS_METHOD),
    # TF2 exports: every signature says predict.
    "regress_tf2": p.Signature({"inputs": EXAMPLES}, {"outputs": SCORES}, p.PREDICT_METHOD),
    "serving_default": p.Signature(
        {"x": p.TensorSpec("DT_FLOAT", (-1, 1), "x:0")}, {"y": SCORES}, p.PREDICT_METHOD
    ),
}
TEXTS = {name: f"<SignatureDef {name}>" for name in SIGNATURES}
CLASSIFY, REGRESS = p.CLASSIFY_METHOD, p.REGRESS_METHOD


def task(signature: str, method: str = REGRESS, model: str = "m") -> inference.Task:
    return inference.Task(model, signature, method)


def check(*tasks: inference.Task, method_name_check: bool = False) -> list[str]:
    return inference.check_tasks(tasks, SIGNATURES, TEXTS, method_name_check=method_name_check)


def refused(*tasks: inference.Task, method_name_check: bool = False) -> tuple[int, str, str]:
    with pytest.raises(ServingError) as caught:
        check(*tasks, method_name_check=method_name_check)
    err = caught.value
    return HTTP_STATUS[err.code], err.code.name, err.message  # REST's status for the code


def test_tasks_name_their_signatures() -> None:
    assert check(task("regress_x_to_y"), task("classify_x_to_y", CLASSIFY)) == [
        "regress_x_to_y",
        "classify_x_to_y",
    ]
    assert check() == []


def test_an_empty_signature_name_is_serving_default() -> None:
    """serving_default here is a predict signature: regress's checks refuse it."""
    assert refused(task("")) == (
        400,
        "INVALID_ARGUMENT",
        "No regression inputs found in SignatureDef: <SignatureDef serving_default>",
    )


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        (
            [task("regress_x_to_y"), task("classify_x_to_y", CLASSIFY, model="")],
            (400, "INVALID_ARGUMENT", "Found ModelSpec with an empty model name."),
        ),
        (
            [task("regress_x_to_y"), task("classify_x_to_y", CLASSIFY, model="other")],
            (
                400,
                "INVALID_ARGUMENT",
                "All ModelSpecs in a MultiInferenceRequest must access the same model name.",
            ),
        ),
        (
            [task("regress_x_to_y"), task("regress_x_to_y")],
            (400, "INVALID_ARGUMENT", "Duplicate evaluation of signature: regress_x_to_y"),
        ),
        (
            [task("serving_default", CLASSIFY), task("")],
            (
                400,
                "INVALID_ARGUMENT",
                "No classification inputs found in SignatureDef: <SignatureDef serving_default>",
            ),
        ),
        (
            [task("nope")],
            (400, "INVALID_ARGUMENT", "Requested signature not found in model graph: nope"),
        ),
        (
            [task("regress_x_to_y", "tensorflow/serving/predict")],
            (
                501,
                "UNIMPLEMENTED",
                "Unsupported signature method_name: tensorflow/serving/predict",
            ),
        ),
        (
            [task("classify_x_to_y", REGRESS)],
            (
                400,
                "INVALID_ARGUMENT",
                "No regression outputs found in SignatureDef: <SignatureDef classify_x_to_y>",
            ),
        ),
    ],
)
def test_tf_servings_messages_and_codes(
    tasks: list[inference.Task], expected: tuple[int, str, str]
) -> None:
    assert refused(*tasks) == expected


def test_the_first_problem_in_task_order_is_the_one_reported() -> None:
    """TF Serving checks task by task: a later task's bad model name is not seen
    while an earlier task's signature is missing, and the other way round."""
    assert refused(task("nope"), task("regress_x_to_y", model="other"))[2] == (
        "Requested signature not found in model graph: nope"
    )
    # Within one task the model name comes first.
    assert refused(task("regress_x_to_y"), task("nope", model="other"))[2].startswith(
        "All ModelSpecs"
    )


def test_the_method_name_check_follows_the_flag() -> None:
    """--enable_signature_method_name_check: a TF2 signature (method predict) serves
    a regress task only without it, as Regress itself."""
    assert check(task("regress_tf2")) == ["regress_tf2"]
    assert refused(task("regress_tf2"), method_name_check=True) == (
        400,
        "INVALID_ARGUMENT",
        "Expected regression signature method_name to be tensorflow/serving/regress. "
        "Was: tensorflow/serving/predict",
    )


def test_tasks_of_a_request() -> None:
    spec = SimpleNamespace(name="m", signature_name="")
    request = SimpleNamespace(
        tasks=[
            SimpleNamespace(model_spec=spec, method_name=CLASSIFY),
            SimpleNamespace(
                model_spec=SimpleNamespace(name="m", signature_name="r"), method_name=REGRESS
            ),
        ]
    )
    assert example_proto.tasks_of(request) == [
        inference.Task("m", "", CLASSIFY),
        inference.Task("m", "r", REGRESS),
    ]

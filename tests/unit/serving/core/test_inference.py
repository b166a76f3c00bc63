"""Classify and Regress in the serving core (core/inference.py): signatures, results, messages."""

from __future__ import annotations

import pytest

from tests.unit.serving import example_protos as ep
from tests.unit.serving.example_helpers import raises, serialized
from tf_entrypoint.serving.core import inference
from tf_entrypoint.serving.core import types as p


def test_empty_inputs_give_no_examples_and_the_servable_says_so() -> None:
    assert serialized(ep.Input()) == []
    message = ep.Input()
    message.example_list_with_context.context.CopyFrom(ep.example(y=1.0))
    assert serialized(message) == []
    assert raises(inference.check_examples, []) == "Input is empty."


STR = p.TensorSpec("DT_STRING", (-1,))
F32 = p.TensorSpec("DT_FLOAT", (-1,))


def test_signature_lookup() -> None:
    signatures = {"serving_default": p.Signature({"x": F32}, {"y": F32})}
    assert inference.find_signature("", signatures) == "serving_default"
    assert raises(inference.find_signature, "nope", signatures) == (
        "No signature was found with the name: nope"
    )


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        (p.Signature({"inputs": STR, "b": STR}, {"scores": F32}), "Expected one input Tensor."),
        (p.Signature({"inputs": STR}, {}), "Expected one or two output Tensors, found 0"),
        (
            p.Signature({"inputs": STR}, {"a": F32, "b": F32, "c": F32}),
            "Expected one or two output Tensors, found 3",
        ),
        (p.Signature({"x": F32}, {"y": F32}), "No classification inputs found in SignatureDef: T"),
        (
            p.Signature({"inputs": STR}, {"y": F32}),
            'Expected classification signature outputs to contain at least one of "classes" '
            'or "scores". Signature was: T',
        ),
    ],
)
def test_classification_signature_checks(signature: p.Signature, message: str) -> None:
    assert raises(inference.check_classification_signature, signature, "T") == message


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        (p.Signature({"inputs": STR, "b": STR}, {"outputs": F32}), "Expected one input Tensor."),
        (p.Signature({"inputs": STR}, {"outputs": F32, "b": F32}), "Expected one output Tensor."),
        (
            p.Signature({"x": STR}, {"outputs": F32}),
            "No regression inputs found in SignatureDef: T",
        ),
        (
            p.Signature({"inputs": STR}, {"y": F32}),
            "No regression outputs found in SignatureDef: T",
        ),
    ],
)
def test_regression_signature_checks(signature: p.Signature, message: str) -> None:
    assert raises(inference.check_regression_signature, signature, "T") == message


def test_method_name_check_is_off_by_default_as_in_tf_serving() -> None:
    native = p.Signature({"inputs": STR}, {"outputs": F32}, p.PREDICT_METHOD)
    inference.check_regression_signature(native, "T")  # TF2 exports say predict: accepted
    assert raises(
        lambda: inference.check_regression_signature(native, "T", method_name_check=True)
    ) == (
        "Expected regression signature method_name to be tensorflow/serving/regress. "
        "Was: tensorflow/serving/predict"
    )
    scores = p.Signature({"inputs": STR}, {"scores": F32}, p.PREDICT_METHOD)
    inference.check_classification_signature(scores, "T")
    assert raises(
        lambda: inference.check_classification_signature(scores, "T", method_name_check=True)
    ) == (
        "Expected classification signature method_name to be tensorflow/serving/classify. "
        "Was: tensorflow/serving/predict"
    )


def test_classification_result_pairs_labels_and_scores() -> None:
    classes = p.Tensor("DT_STRING", (2, 2), [b"a", b"b", b"c", b"d"])
    scores = p.Tensor("DT_FLOAT", (2, 2), [0.25, 0.75, 1.0, 0.0])
    assert inference.classification_result(2, classes, scores) == [
        [(b"a", 0.25), (b"b", 0.75)],
        [(b"c", 1.0), (b"d", 0.0)],
    ]
    assert inference.classification_result(2, None, scores) == [
        [(b"", 0.25), (b"", 0.75)],
        [(b"", 1.0), (b"", 0.0)],
    ]
    assert inference.classification_result(2, classes, None) == [
        [(b"a", 0.0), (b"b", 0.0)],
        [(b"c", 0.0), (b"d", 0.0)],
    ]


@pytest.mark.parametrize(
    ("classes", "scores", "message"),
    [
        (
            p.Tensor("DT_STRING", (2,), [b"a", b"b"]),
            None,
            "Expected Tensor shape: [batch_size num_classes] but got [2]",
        ),
        (
            p.Tensor("DT_INT32", (2, 1), [1, 2]),
            None,
            "Expected classes Tensor of DT_STRING. Got: DT_INT32",
        ),
        (
            p.Tensor("DT_STRING", (3, 1), [b"a", b"b", b"c"]),
            None,
            "Expected classes output batch size of 2. Got: 3",
        ),
        (
            None,
            p.Tensor("DT_DOUBLE", (2, 1), [1.0, 2.0]),
            "Expected scores Tensor of DT_FLOAT. Got: DT_DOUBLE",
        ),
        (
            None,
            p.Tensor("DT_FLOAT", (1, 2), [1.0, 2.0]),
            "Expected scores output batch size of 2. Got: 1",
        ),
        (
            p.Tensor("DT_STRING", (2, 1), [b"a", b"b"]),
            p.Tensor("DT_FLOAT", (2, 2), [1.0, 2.0, 3.0, 4.0]),
            "Tensors class and score should match in dim_size(1). Got 1 vs. 2",
        ),
    ],
)
def test_classification_output_checks(
    classes: p.Tensor | None, scores: p.Tensor | None, message: str
) -> None:
    assert raises(inference.classification_result, 2, classes, scores) == message


def test_regression_result() -> None:
    assert inference.regression_result(2, p.Tensor("DT_FLOAT", (2,), [1.5, 2.5])) == [1.5, 2.5]
    assert inference.regression_result(2, p.Tensor("DT_FLOAT", (2, 1), [1.5, 2.5])) == [1.5, 2.5]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (
            p.Tensor("DT_FLOAT", (2, 2), [1.0] * 4),
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            "[2,2]",
        ),
        (
            p.Tensor("DT_FLOAT", (), [1.0]),
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got []",
        ),
        (
            p.Tensor("DT_FLOAT", (3,), [1.0] * 3),
            "Input batch size did not match output batch size: 2 vs. 3",
        ),
        (p.Tensor("DT_INT64", (2,), [1, 2]), "Expected output Tensor of DT_FLOAT.  Got: DT_INT64"),
    ],
)
def test_regression_output_checks(output: p.Tensor, message: str) -> None:
    assert raises(inference.regression_result, 2, output) == message


def test_tensorflow_error_message_keeps_the_kernel_message() -> None:
    eager = (
        "Graph execution error:\n\nDetected at node ParseExample/ParseExampleV2 defined at "
        '(most recent call last):\n  File "/x.py", line 3, in <module>\n\n  File '
        '"/y.py", line 9, in f\n\nName: <unknown>, Feature: x (data type: float) is required '
        "but could not be found.\n\t [[{{node ParseExample/ParseExampleV2}}]] "
        "[Op:__inference_pruned_131]"
    )
    assert inference.tensorflow_error_message(eager) == (
        "Name: <unknown>, Feature: x (data type: float) is required but could not be found.\n"
        "\t [[{{node ParseExample/ParseExampleV2}}]]"
    )
    loaded = (
        "Graph execution error:\n\nDetected at node StatefulPartitionedCall/dense/Add defined "
        "at (most recent call last):\n<stack traces unavailable>\nIn[0] is not a matrix\n\t "
        "[[{{node StatefulPartitionedCall/dense/Add}}]] [Op:__inference_serving_default_76]"
    )
    assert inference.tensorflow_error_message(loaded) == (
        "In[0] is not a matrix\n\t [[{{node StatefulPartitionedCall/dense/Add}}]]"
    )
    assert inference.tensorflow_error_message("plain message") == "plain message"
    assert inference.tensorflow_error_message("x" * 50, limit=10) == "x" * 10

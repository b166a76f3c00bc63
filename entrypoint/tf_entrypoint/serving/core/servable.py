"""The backend's protocol: what the core asks of one loaded version of a model.

``model/`` implements it with TensorFlow (``TensorFlowServable``); the unit
tests with fakes. The manager (``manager.py``) loads versions with a
:data:`Loader` and serves what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tf_entrypoint.serving.core import types as p

if TYPE_CHECKING:  # the types of MultiInference's tasks (their codec moves them into core)
    from tf_entrypoint.serving.codec import examples as ex


class Servable(Protocol):
    """One loaded version of a model."""

    @property
    def version(self) -> int: ...

    @property
    def signatures(self) -> Mapping[str, p.Signature]: ...

    @property
    def signature_def_map(self) -> bytes:
        """The SavedModel's SignatureDefs as they are, a serialized
        tensorflow.serving.SignatureDefMap (GetModelMetadata's answer, metadata.py);
        b"": none, the metadata is written from `signatures`."""
        ...

    @property
    def warmup_records(self) -> int:
        """Warm-up requests replayed before it became available."""
        ...

    def predict(self, signature_name: str, inputs: Mapping[str, p.Tensor]) -> dict[str, p.Tensor]:
        """Run a signature. Raises ApiError for input the model rejects."""
        ...

    def predict_protos(
        self, signature_name: str, inputs: Mapping[str, Any], output_filter: Sequence[str]
    ) -> tuple[str, dict[str, Any]]:
        """gRPC's Predict: TensorProtos in, (signature name used, TensorProtos out).

        Checks and messages are TF Serving's (predict_util.cc); raises ApiError.
        """
        ...

    def classify(
        self, signature_name: str, examples: Sequence[bytes]
    ) -> list[list[tuple[bytes, float]]]:
        """Run a classification signature on serialized tf.Example protos (TF Serving's Classify).

        `signature_name` "" means serving_default. Per example, its (class
        label, score) pairs: label b"" when the signature has no "classes"
        output, score 0.0 when it has no "scores". Raises ApiError with TF
        Serving's message (400 INVALID_ARGUMENT) for a signature that cannot
        classify, no examples ("Input is empty."), an example the model
        cannot parse, or outputs of the wrong dtype or shape.
        """
        ...

    def regress(self, signature_name: str, examples: Sequence[bytes]) -> list[float]:
        """Run a regression signature on serialized tf.Example protos (TF Serving's Regress).

        One value per example; errors as :meth:`classify`.
        """
        ...

    def multi_inference(
        self, tasks: Sequence[ex.Task], examples: Sequence[bytes]
    ) -> list[ex.TaskResult]:
        """Run classify and regress tasks on one batch of serialized tf.Example protos
        (TF Serving's MultiInference): one result per task, in order.

        Checks first, as TF Serving does (examples.check_tasks, then "Input is
        empty."); then the tasks' signatures run on the shared examples, in one
        call where the servable can (TF Serving runs them in one Session::Run);
        then each task's outputs are checked as Classify's and Regress's are.
        Raises ApiError with TF Serving's messages.
        """
        ...


#: Loads one version directory (and warms it up).
Loader = Callable[[Path, int], Servable]

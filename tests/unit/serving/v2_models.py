"""Servables of the Open Inference Protocol (v2) tests, over REST and gRPC alike:
Mixed, Awkward and TF Serving's words for a signature a Predict cannot run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tests.unit.serving.fake_servable import FakeServable
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, ServingError

F32 = p.TensorSpec("DT_FLOAT", (-1, 2), "x:0")
I64 = p.TensorSpec("DT_INT64", (-1,), "n:0")
STR = p.TensorSpec("DT_STRING", (-1,), "s:0")


class Mixed(FakeServable):
    """serving_default: x (FP32 [-1,2]) -> sum (FP32 [-1]), twice (FP32 [-1,2]);
    "words": s (BYTES) -> upper (BYTES), n (INT64) -> length (INT64)."""

    version = 1
    signatures: Mapping[str, p.Signature] = {
        "serving_default": p.Signature(
            {"x": F32},
            {"sum": p.TensorSpec("DT_FLOAT", (-1,)), "twice": p.TensorSpec("DT_FLOAT", (-1, 2))},
        ),
        "words": p.Signature({"s": STR}, {"upper": STR, "length": I64}),
    }

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        if name == "words":
            words = list(inputs["s"].values)
            found = {
                "upper": p.Tensor("DT_STRING", (len(words),), [w.upper() for w in words]),
                "length": p.Tensor("DT_INT64", (len(words),), [len(w) for w in words]),
            }
        else:
            x = inputs["x"]
            values = [float(v) for v in x.values]
            rows = x.shape[0]
            found = {
                "sum": p.Tensor(
                    "DT_FLOAT", (rows,), [values[2 * i] + values[2 * i + 1] for i in range(rows)]
                ),
                "twice": p.Tensor("DT_FLOAT", x.shape, [2 * v for v in values]),
            }
        return {name: found[name] for name in outputs}


class Awkward(Mixed):
    """Mixed, plus what a real export adds: an init op's SignatureDef that the bundle can
    run (a Session runs any SignatureDef) but whose method is none, as TF2 writes it; a
    signature with a COMPLEX64 output; "broken", whose run fails with INTERNAL."""

    signatures: Mapping[str, p.Signature] = {
        **Mixed.signatures,
        "__saved_model_init_op": p.Signature(
            {}, {"__saved_model_init_op": p.TensorSpec("DT_INVALID", ())}, method_name=""
        ),
        "complex": p.Signature({"x": F32}, {"z": p.TensorSpec("DT_COMPLEX64", (-1,)), "sum": F32}),
        "broken": Mixed.signatures["serving_default"],
    }
    #: The signatures run, by name (the complex one must not run unless it is filtered).
    ran: list[str]

    def __init__(self) -> None:
        self.ran = []

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        self.ran.append(name)
        if name == "broken":
            raise ServingError(Code.INTERNAL, "the kernel broke")
        if name == "complex":
            assert "z" not in outputs, "a COMPLEX64 output was computed for v2"
            return {"sum": super().run("serving_default", inputs, ["sum"])["sum"]}
        return super().run(name, inputs, outputs)


#: TF Serving's words for a signature a Predict cannot run (predict_util.cc).
NOT_PREDICT = (
    "Expected prediction signature method_name to be one of {tensorflow/serving/predict, "
    "tensorflow/serving/classify, tensorflow/serving/regress}. Was: "
)

"""The Open Inference Protocol's gRPC service (grpc/inference_v2.py), on pure-Python models.

A real grpc.aio server on 127.0.0.1 with the transport's call frame
(grpc/calls.py) over a serving core, called through a real channel with
codec/v2_proto.py's messages (whose wire format test_v2_proto.py checks
against tritonclient's own). tritonclient itself runs against the image in
tests/container/test_v2_clients.py.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio

from tests.unit.serving.grpc.v2_server import Server, run, with_server, x_input
from tests.unit.serving.v2_models import NOT_PREDICT, Awkward
from tf_entrypoint import __version__
from tf_entrypoint.serving.codec import v2_proto as pb

Call = Callable[[str, Any], Awaitable[Any]]


@run
async def test_health_and_metadata(tmp_path: Path) -> None:
    async def body(server: Server) -> None:
        assert (await server.call("ServerLive", pb.ServerLiveRequest())).live
        assert (await server.call("ServerReady", pb.ServerReadyRequest())).ready
        ready = await server.call("ModelReady", pb.ModelReadyRequest(name="model"))
        assert ready.ready
        ready = await server.call("ModelReady", pb.ModelReadyRequest(name="model", version="1"))
        assert ready.ready
        metadata = await server.call("ServerMetadata", pb.ServerMetadataRequest())
        assert (metadata.name, metadata.version, list(metadata.extensions)) == (
            "tf-entrypoint",
            __version__,
            ["binary_tensor_data"],
        )
        model = await server.call("ModelMetadata", pb.ModelMetadataRequest(name="model"))
        assert (model.name, list(model.versions), model.platform) == (
            "model",
            ["1"],
            "tensorflow_savedmodel",
        )
        assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
            ("x", "FP32", [-1, 2])
        ]
        assert [(t.name, t.datatype, list(t.shape)) for t in model.outputs] == [
            ("sum", "FP32", [-1]),
            ("twice", "FP32", [-1, 2]),
        ]

    await with_server(tmp_path, body)


@run
async def test_model_infer_typed_or_raw_answers_raw(tmp_path: Path) -> None:
    async def body(server: Server) -> None:
        for raw in (False, True):
            request = pb.ModelInferRequest(model_name="model", id=f"call-{raw}")
            x_input(request, raw)
            response = await server.call("ModelInfer", request)
            assert (response.model_name, response.model_version, response.id) == (
                "model",
                "1",
                f"call-{raw}",
            )
            assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
                ("sum", "FP32", [2]),
                ("twice", "FP32", [2, 2]),
            ]
            assert struct.unpack("<2f", response.raw_output_contents[0]) == (3.0, 7.5)
            assert struct.unpack("<4f", response.raw_output_contents[1]) == (2, 4, 6, 9)

    await with_server(tmp_path, body)


@run
async def test_requested_outputs_and_the_signature_parameter(tmp_path: Path) -> None:
    async def body(server: Server) -> None:
        request = pb.ModelInferRequest(model_name="model", model_version="1")
        pb.set_parameter(request.parameters, "signature_name", "words")
        words = request.inputs.add(name="s", datatype="BYTES", shape=[2])
        words.contents.bytes_contents.extend([b"ab", b"xyz"])
        request.outputs.add(name="upper")
        response = await server.call("ModelInfer", request)
        assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
            ("upper", "BYTES", [2])
        ]
        assert response.raw_output_contents[0] == b"\x02\x00\x00\x00AB\x03\x00\x00\x00XYZ"

    await with_server(tmp_path, body)


async def _code(server: Server, request: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(aio.AioRpcError) as caught:
        await server.call("ModelInfer", request)
    return caught.value.code(), caught.value.details() or ""


@run
async def test_bad_requests_get_clear_errors(tmp_path: Path) -> None:
    async def body(server: Server) -> None:
        def request(**fields: Any) -> Any:
            made = pb.ModelInferRequest(model_name="model", **fields)
            x_input(made, raw=False)
            return made

        invalid = grpc.StatusCode.INVALID_ARGUMENT
        cases: list[tuple[Any, grpc.StatusCode, list[str]]] = [
            (pb.ModelInferRequest(model_name="other"), grpc.StatusCode.NOT_FOUND, ["other"]),
            (request(model_version="9"), grpc.StatusCode.NOT_FOUND, ["9"]),
            (request(model_version="x"), invalid, ["x"]),
            (pb.ModelInferRequest(), invalid, ["model_name"]),
        ]
        wrong_type = pb.ModelInferRequest(model_name="model")
        wrong_type.inputs.add(
            name="x", datatype="FP64", shape=[1, 2]
        ).contents.fp64_contents.extend([1, 2])
        cases.append((wrong_type, invalid, ["x", "FP64", "FP32"]))
        short = pb.ModelInferRequest(model_name="model")
        short.inputs.add(name="x", datatype="FP32", shape=[2, 2]).contents.fp32_contents.extend([1])
        cases.append((short, invalid, ["x"]))
        mixed = request()
        mixed.raw_input_contents.append(b"\x00" * 16)
        cases.append((mixed, invalid, ["raw_input_contents"]))
        half = pb.ModelInferRequest(model_name="model")
        half.inputs.add(name="x", datatype="FP16", shape=[1, 2]).contents.fp32_contents.extend(
            [1, 2]
        )
        cases.append((half, invalid, ["x"]))
        unknown_output = request()
        unknown_output.outputs.add(name="zzz")
        cases.append((unknown_output, invalid, ["zzz"]))
        for sent, code, words in cases:
            found, details = await _code(server, sent)
            assert found == code, (sent, details)
            for word in words:
                assert word in details, (word, details)
        unknown = pb.ModelReadyRequest(name="other")
        with pytest.raises(aio.AioRpcError) as caught:
            await server.call("ModelReady", unknown)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND

    await with_server(tmp_path, body)


@run
async def test_calls_are_counted_with_protocol_v2(tmp_path: Path) -> None:
    async def body(server: Server) -> None:
        request = pb.ModelInferRequest(model_name="model")
        x_input(request, raw=True)
        await server.call("ModelInfer", request)
        await server.call("ServerLive", pb.ServerLiveRequest())
        page = server.core.metrics.exposition().decode()
        assert (
            'serving_grpc_requests_total{code="OK",method="ModelInfer",model="model",'
            'protocol="v2"} 1.0'
        ) in page
        live = 'serving_grpc_requests_total{code="OK",method="ServerLive",model="",protocol="v2"}'
        assert f"{live} 1.0" in page

    await with_server(tmp_path, body)


@run
async def test_a_signature_that_cannot_predict_is_invalid_argument(tmp_path: Path) -> None:
    async def body(server: Server) -> None:
        request = pb.ModelInferRequest(model_name="model")
        pb.set_parameter(request.parameters, "signature_name", "__saved_model_init_op")
        x_input(request, raw=False)
        code, details = await _code(server, request)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert details.endswith(NOT_PREDICT), details
        assert "__saved_model_init_op" in details

    await with_server(tmp_path, body, Awkward)


@run
async def test_an_output_the_protocol_cannot_carry_is_invalid_argument(tmp_path: Path) -> None:
    made: list[Awkward] = []

    def servable() -> Awkward:
        made.append(Awkward())
        return made[-1]

    async def body(server: Server) -> None:
        request = pb.ModelInferRequest(model_name="model")
        pb.set_parameter(request.parameters, "signature_name", "complex")
        x_input(request, raw=True)
        code, details = await _code(server, request)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "output 'z'" in details
        assert "COMPLEX64" in details
        assert "complex" not in made[0].ran
        request.outputs.add(name="sum")
        response = await server.call("ModelInfer", request)
        assert struct.unpack("<2f", response.raw_output_contents[0]) == (3.0, 7.5)

    await with_server(tmp_path, body, servable)


def test_a_server_fault_is_logged_with_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(server: Server) -> None:
        request = pb.ModelInferRequest(model_name="model")
        pb.set_parameter(request.parameters, "signature_name", "broken")
        x_input(request, raw=False)
        code, details = await _code(server, request)
        assert (code, details) == (grpc.StatusCode.INTERNAL, "the kernel broke")

    with caplog.at_level(logging.ERROR, logger="tf_entrypoint.serving"):
        asyncio.run(with_server(tmp_path, body, Awkward))
    faults = [r for r in caplog.records if "the kernel broke" in r.getMessage()]
    assert len(faults) == 1, [r.getMessage() for r in caplog.records]
    assert faults[0].exc_info
    assert faults[0].exc_info[2] is not None

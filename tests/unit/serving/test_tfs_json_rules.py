"""TF Serving's lenient JSON (issue 26): numbers into float inputs, base64, compressed bodies.

TF Serving's rules, read from its sources: json_tensor.cc's AddValueToTensor
takes any JSON number for DT_FLOAT/DT_DOUBLE and lets ``GetFloat()`` (a C
cast) round it; ``absl::Base64Unescape`` skips whitespace and takes the
padding or its absence; its HTTP server decompresses a body whose
Content-Encoding names gzip. The requests of api_rest.md's examples are
sent, in this project's own values, to a pure-Python model.
"""

from __future__ import annotations

import array
import asyncio
import base64
import gzip
import json
import math
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from starlette.testclient import TestClient

from tests.unit.serving import example_protos
from tests.unit.serving.fake_servable import FakeServable
from tests.unit.serving.helpers import HalfPlusTwo, serving
from tf_entrypoint.serving.codec import json_examples, json_tensor, json_values
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError
from tf_entrypoint.serving.rest import body as body_module


def spec(dtype: str) -> p.TensorSpec:
    return p.TensorSpec(dtype, None)


def f32(value: float) -> float:
    rounded: float = array.array("f", [value])[0]
    return rounded


# -- numbers into float inputs: any number, rounded by the dtype


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1435774380, 1435774336.0),  # api_rest.md's example: float32's nearest
        (1435774380.0, 1435774336.0),  # the same with a decimal point
        (16777217, 16777216.0),  # 2**24 + 1
        (2**64, float(2**64)),  # beyond 64 bits: read as a double
        (-7, -7.0),
        (1e39, math.inf),  # beyond float32: an infinity, as the C cast gives
        (-1.7976931348623157e308, -math.inf),
        (2.2250738585072014e-308, 0.0),  # below float32's smallest: zero
        (3.4028235e38, 3.4028234663852886e38),  # rounds down to FLT_MAX, not up
    ],
)
def test_any_number_is_a_float_rounded_as_tf_serving_rounds_it(value: Any, expected: float) -> None:
    tensor = json_tensor.to_tensor([value], spec("DT_FLOAT"))
    assert tensor.values == array.array("f", [expected])


def test_doubles_take_any_number_and_integers_round_to_the_nearest_double() -> None:
    tensor = json_tensor.to_tensor([2**53 + 1, 9007199254740993, 1e308, 5], spec("DT_DOUBLE"))
    assert list(tensor.values) == [2.0**53, 2.0**53, 1e308, 5.0]


@pytest.mark.parametrize("dtype", ["DT_FLOAT", "DT_DOUBLE", "DT_HALF", "DT_BFLOAT16"])
def test_an_integer_beyond_a_double_is_refused_by_every_float_dtype(dtype: str) -> None:
    with pytest.raises(ServingError) as caught:
        json_tensor.to_tensor([10**309], spec(dtype))
    assert caught.value.code == Code.INVALID_ARGUMENT
    assert "is too big to be stored in a double" in caught.value.message


@pytest.mark.parametrize(
    ("dtype", "value", "expected"),
    [
        ("DT_HALF", 65504, 65504.0),
        ("DT_HALF", 65519.0, 65504.0),  # rounds down to half's largest
        ("DT_HALF", 65520.0, math.inf),
        ("DT_HALF", -1e9, -math.inf),
        ("DT_HALF", 0.1, 0.0999755859375),
        ("DT_HALF", 2049, 2048.0),  # ties to even
        ("DT_BFLOAT16", 257, 256.0),  # ties to even
        ("DT_BFLOAT16", 0.1, 0.10009765625),
        ("DT_BFLOAT16", 3.3895313892515355e38, 3.3895313892515355e38),
        ("DT_BFLOAT16", 3.4e38, math.inf),
        ("DT_BFLOAT16", -1e39, -math.inf),
    ],
)
def test_half_and_bfloat16_values_are_rounded_here(dtype: str, value: Any, expected: float) -> None:
    assert json_tensor.to_tensor([value], spec(dtype)).values == [expected]


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        ("DT_INT32", 1.0),  # rapidjson reads 1.0 as a double: not IsInt()
        ("DT_INT64", 1e2),
        ("DT_INT8", True),
        ("DT_UINT8", -1),
        ("DT_INT32", 2**31),
        ("DT_INT64", 2**63),
        ("DT_UINT64", 2**64),
        ("DT_FLOAT", True),
        ("DT_FLOAT", "1.0"),
        ("DT_DOUBLE", None),
    ],
)
def test_integer_inputs_stay_strict_and_floats_take_no_other_type(dtype: str, value: Any) -> None:
    with pytest.raises(ServingError) as caught:
        json_tensor.to_tensor([value], spec(dtype))
    assert caught.value.code == Code.INVALID_ARGUMENT


@pytest.mark.parametrize("dtype", ["DT_FLOAT", "DT_DOUBLE"])
@pytest.mark.parametrize(
    "instances",
    [
        [1, 2, 3],
        [1435774380, 0.5],
        [[1, 2.5], [3, 4]],
        [2**64, 1],
        [10**309],  # too big for a double: the general reader refuses it
        [1e39, 1],  # beyond float32: the general reader's infinity
        [True, 1],
    ],
)
def test_the_fast_reader_agrees_with_the_general_one_on_integers(
    dtype: str, instances: list[Any]
) -> None:
    signature = p.Signature({"x": spec(dtype)}, {})
    fast = json_tensor._fast_instances(instances, signature)
    try:
        general: Any = json_tensor._from_instances(instances, signature)
    except ServingError as err:
        general = err
    if fast is None:
        return
    assert not isinstance(general, ServingError)
    assert fast["x"].shape == general["x"].shape
    assert fast["x"].values == general["x"].values


def test_the_fast_reader_takes_integers() -> None:
    signature = p.Signature({"x": spec("DT_FLOAT")}, {})
    fast = json_tensor._fast_instances([1, 1435774380, 2.5], signature)
    assert fast is not None
    assert fast["x"].values == array.array("f", [1.0, 1435774336.0, 2.5])


def test_examples_take_large_numbers_as_float32_as_tf_serving_does() -> None:
    (serialized,) = json_examples.examples_request(
        {"examples": [{"x": 1435774380.0, "big": 1e39}]}, limit=1 << 20
    ).examples
    features = example_protos.features(serialized)
    assert features["x"] == ("float_list", [1435774336.0])
    assert features["big"] == ("float_list", [math.inf])


# -- base64 as absl::Base64Unescape reads it


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("aGVsbG8=", b"hello"),
        ("aGVsbG8", b"hello"),  # no padding
        ("aGk", b"hi"),
        ("aGk.", b"hi"),  # absl's other padding character
        ("aGVs\nbG8=\n", b"hello"),  # line breaks (MIME, 76 a line)
        ("aGVs\r\nbG8=", b"hello"),
        (" aG Vs\tbG 8 = ", b"hello"),  # whitespace anywhere
        ("aGk= \n", b"hi"),
        ("QR==", b"A"),  # unused low bits are ignored
        ("", b""),
        ("+/+/", b"\xfb\xff\xbf"),
        (base64.encodebytes(bytes(range(256)) * 2).decode(), bytes(range(256)) * 2),
    ],
)
def test_base64_is_read_leniently(text: str, expected: bytes) -> None:
    assert json_values.b64(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "aGVsbG8==",  # padding, but not what the digits call for
        "aGVsbG8===",
        "aGk==",
        "QUJD=",
        "====",
        "a",  # one character left over
        "aGVsb",
        "aGk=aGk=",  # data after the padding
        "aGk=x",
        "-_-_",  # the URL-safe alphabet
        "aGk!",
        "aGé=",
        "aGk\x00",
    ],
)
def test_base64_that_absl_refuses_is_refused(text: str) -> None:
    with pytest.raises(ServingError) as caught:
        json_values.b64(text)
    assert caught.value.message == "Unable to base64 decode"


def test_lenient_base64_reaches_string_tensors_and_example_features() -> None:
    tensor = json_tensor.to_tensor([{"b64": "aGVs\nbG8"}], spec("DT_STRING"))
    assert tensor.values == [b"hello"]
    (serialized,) = json_examples.examples_request(
        {"examples": [{"image": {"b64": "aW1h\nZ2U"}}]}, limit=1 << 20
    ).examples
    assert example_protos.features(serialized)["image"] == ("bytes_list", [b"image"])


# -- compressed bodies: read_body


def receive_from(parts: Sequence[bytes]) -> Any:
    messages = list(parts)

    async def receive() -> dict[str, Any]:
        part = messages.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(messages)}

    return receive


def read(parts: Sequence[bytes], limit: int, encoding: str | None = "gzip") -> bytes:
    headers = [] if encoding is None else [(b"content-encoding", encoding.encode())]
    return asyncio.run(body_module.read_body({"headers": headers}, receive_from(parts), limit))


def refusal(parts: Sequence[bytes], limit: int, encoding: str = "gzip") -> ServingError:
    with pytest.raises(ServingError) as caught:
        read(parts, limit, encoding)
    return caught.value


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


BODY = json.dumps({"instances": [[0.25] * 64] * 64}).encode()


@pytest.mark.parametrize("size", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("identity, gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("identity", bytes),
    ],
)
def test_a_compressed_body_is_decompressed_in_any_chunks(
    encoding: str, compress: Any, size: int
) -> None:
    assert read(pieces(compress(BODY), size), 1 << 20, encoding) == BODY


def test_gzip_members_one_after_another_are_one_body() -> None:
    assert read([gzip.compress(b'{"a": '), gzip.compress(b"1}")], 100) == b'{"a": 1}'


def test_an_empty_body_stays_empty() -> None:
    assert read([b""], 100) == b""


class _CountingDecompressor:
    """zlib's decompressor, counting the bytes it hands out."""

    produced: ClassVar[list[int]] = []

    def __init__(self, wbits: int) -> None:
        self._inner = zlib.decompressobj(wbits)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = self._inner.decompress(data, max_length)
        self.produced.append(len(out))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("size", [1 << 10, 1 << 16, 1 << 20])
def test_a_gzip_bomb_is_413_without_decompressing_past_the_limit(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    bomb = gzip.compress(bytes(10 << 20), compresslevel=9)  # 10 MiB of zeros in ~10 kB
    assert len(bomb) < 20_000
    limit = 1 << 20
    produced: list[int] = []
    monkeypatch.setattr(_CountingDecompressor, "produced", produced)
    monkeypatch.setattr(
        body_module,
        "zlib",
        type("Z", (), {"decompressobj": _CountingDecompressor, "error": zlib.error}),
    )
    err = refusal(pieces(bomb, size), limit)
    assert (err.code, err.refusal) == (Code.RESOURCE_EXHAUSTED, Refusal.BODY_TOO_LARGE)
    assert "exceeds the limit of 1048576 bytes (--max-body-bytes) once decompressed" in err.message
    assert sum(produced) == limit + 1  # one byte past the limit, then no more
    assert max(produced) <= limit + 1


def test_the_compressed_bytes_are_bounded_too() -> None:
    noise = gzip.compress(bytes(range(256)) * 64, compresslevel=0)
    err = refusal(pieces(noise, 100), 1000)
    assert err.refusal == Refusal.BODY_TOO_LARGE


@pytest.mark.parametrize(
    ("parts", "encoding", "message"),
    [
        ([gzip.compress(BODY)[:-10]], "gzip", "ends before the compressed data does"),
        ([gzip.compress(BODY)[:20], b""], "gzip", "ends before the compressed data does"),
        ([BODY], "gzip", "not valid gzip data (Content-Encoding: gzip): Error -3"),
        ([b"\x1f\x8b\x08\x00" + bytes(30)], "gzip", "not valid gzip data"),
        ([gzip.compress(b"{}") + b"trailing"], "gzip", "not valid gzip data"),
        ([zlib.compress(b"{}") + b"x"], "deflate", "data follows the end"),
        ([gzip.compress(b"{}")], "deflate", "not valid deflate data"),
    ],
)
def test_a_corrupt_or_truncated_body_is_400_with_a_clear_message(
    parts: list[bytes], encoding: str, message: str
) -> None:
    err = refusal(parts, 1 << 20, encoding)
    assert (err.code, err.refusal) == (Code.INVALID_ARGUMENT, None)
    assert message in err.message


@pytest.mark.parametrize("encoding", ["br", "compress", "zstd", "gzip, gzip", "gzip, br"])
def test_other_encodings_are_415(encoding: str) -> None:
    err = refusal([b"{}"], 100, encoding)
    assert err.refusal == Refusal.UNSUPPORTED_ENCODING
    assert f"Content-Encoding {p.quote(encoding)} is not supported" in err.message


# -- through the app: /v1/ and /v2


@pytest.fixture
def small_client(tmp_path: Path) -> Iterator[TestClient]:
    with serving(tmp_path, HalfPlusTwo(), "--max-body-bytes", "1000") as client:
        yield client


def test_gzip_bodies_through_the_app(small_client: TestClient) -> None:
    gz = {"Content-Encoding": "gzip"}
    body = gzip.compress(b'{"instances": [1.0, 2.0]}')
    ok = small_client.post("/v1/models/model:predict", content=body, headers=gz)
    assert (ok.status_code, ok.json()) == (200, {"predictions": [2.5, 3.0]})

    def chunks() -> Iterator[bytes]:  # no Content-Length: decompressed as it comes
        yield from pieces(body, 5)

    streamed = small_client.post("/v1/models/model:predict", content=chunks(), headers=gz)
    assert streamed.json() == {"predictions": [2.5, 3.0]}

    big = gzip.compress(b'{"instances": [' + b"1.0, " * 1000 + b"1.0]}")
    assert len(big) < 1000
    refused = small_client.post("/v1/models/model:predict", content=big, headers=gz)
    assert refused.status_code == 413
    assert "once decompressed" in refused.json()["error"]

    corrupt = small_client.post("/v1/models/model:predict", content=body[:-4], headers=gz)
    assert corrupt.status_code == 400
    assert "not valid gzip data" in corrupt.json()["error"]

    brotli = {"Content-Encoding": "br"}
    unsupported = small_client.post("/v1/models/model:predict", content=b"{}", headers=brotli)
    assert unsupported.status_code == 415
    assert "is not supported" in unsupported.json()["error"]

    v2 = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    infer = small_client.post(
        "/v2/models/model/infer", content=gzip.compress(json.dumps(v2).encode()), headers=gz
    )
    assert infer.status_code == 200, infer.text
    assert infer.json()["outputs"][0]["data"] == [2.5, 3.0]
    v2_big = gzip.compress(
        json.dumps({"inputs": [{**v2["inputs"][0], "data": [1.0] * 500}]}).encode()
    )
    assert (
        small_client.post("/v2/models/model/infer", content=v2_big, headers=gz).status_code == 413
    )


# -- api_rest.md's requests, in this project's values


I32 = p.TensorSpec("DT_INT32", None)
STR = p.TensorSpec("DT_STRING", None)
F32 = p.TensorSpec("DT_FLOAT", None)


class ApiRestModels(FakeServable):
    """Signatures shaped like api_rest.md's examples; predict echoes its inputs
    (half_plus_three adds: 0.5 x + 3, as the doc's demo model)."""

    version = 1
    signatures: Mapping[str, p.Signature] = {
        "serving_default": p.Signature({"x": F32}, {"y": F32}),
        "words": p.Signature({"text": STR}, {"text": STR}),
        "pairs": p.Signature({"x": I32}, {"x": I32}),
        "three": p.Signature(
            {"tag": STR, "signal": I32, "sensor": I32}, {"tag": STR, "signal": I32, "sensor": I32}
        ),
        "readings": p.Signature({"x": F32}, {"x": F32}),
        "tensorflow/serving/regress": p.Signature(
            {"inputs": STR}, {"outputs": F32}, p.REGRESS_METHOD
        ),
        "classify_objects": p.Signature(
            {"inputs": STR},
            {"classes": STR, "scores": F32},
            p.CLASSIFY_METHOD,
        ),
    }

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        if name == "serving_default":
            x = inputs["x"]
            return {"y": p.Tensor("DT_FLOAT", x.shape, [0.5 * v + 3 for v in x.values])}
        if name == "tensorflow/serving/regress":
            xs = [example_protos.features(e)["x"][1][0] for e in inputs["inputs"].values]
            return {"outputs": p.Tensor("DT_FLOAT", (len(xs),), [0.5 * x + 3 for x in xs])}
        if name == "classify_objects":  # the caption, scored by the image's length
            rows = [example_protos.features(e) for e in inputs["inputs"].values]
            shape = (len(rows), 1)
            return {
                "classes": p.Tensor("DT_STRING", shape, [r["caption"][1][0] for r in rows]),
                "scores": p.Tensor("DT_FLOAT", shape, [float(len(r["image"][1][0])) for r in rows]),
            }
        return {key: inputs[key] for key in outputs}


@pytest.fixture
def docs_client(tmp_path: Path) -> Iterator[TestClient]:
    with serving(tmp_path, ApiRestModels()) as client:
        yield client


def b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode()}


API_REST_EXAMPLES: list[tuple[str, str | None, Any, int, Any]] = [
    # Predict, row format, one input: scalars, then [1, 2]-shaped tensors.
    (
        "predict",
        "words",
        {"instances": ["ant", "bee", "cat"]},
        200,
        {"predictions": ["ant", "bee", "cat"]},
    ),
    (
        "predict",
        "pairs",
        {"instances": [[[5, 6]], [[7, 8]]]},
        200,
        {"predictions": [[[5, 6]], [[7, 8]]]},
    ),
    # Row format, three named inputs; then the same as columns.
    (
        "predict",
        "three",
        {
            "instances": [
                {"tag": "up", "signal": [9, 8, 7, 6, 5], "sensor": [[1, 1], [2, 2]]},
                {"tag": "down", "signal": [0, 1, 0, 1, 0], "sensor": [[3, 3], [4, 4]]},
            ]
        },
        200,
        {
            "predictions": [
                {"tag": "up", "signal": [9, 8, 7, 6, 5], "sensor": [[1, 1], [2, 2]]},
                {"tag": "down", "signal": [0, 1, 0, 1, 0], "sensor": [[3, 3], [4, 4]]},
            ]
        },
    ),
    (
        "predict",
        "three",
        {
            "inputs": {
                "tag": ["up", "down"],
                "signal": [[9, 8, 7, 6, 5], [0, 1, 0, 1, 0]],
                "sensor": [[[1, 1], [2, 2]], [[3, 3], [4, 4]]],
            }
        },
        200,
        {
            "outputs": {
                "tag": ["up", "down"],
                "signal": [[9, 8, 7, 6, 5], [0, 1, 0, 1, 0]],
                "sensor": [[[1, 1], [2, 2]], [[3, 3], [4, 4]]],
            }
        },
    ),
    # Binary values: {"b64": ...} for a string input; returned as text where it is UTF-8.
    ("predict", "words", {"instances": [b64(b"raw bytes")]}, 200, {"predictions": ["raw bytes"]}),
    # JSON conformance: NaN and the infinities are numbers.
    (
        "predict",
        "readings",
        {"instances": [2.5, -1.25, math.nan, math.inf, -math.inf]},
        200,
        {"predictions": [2.5, -1.25, math.nan, math.inf, -math.inf]},
    ),
    # Floating point precision: 1435774380 becomes float32's 1435774336.
    ("predict", "readings", {"instances": [1435774380]}, 200, {"predictions": [1435774336.0]}),
    # The demo's calls: predict, regress on its named signature.
    ("predict", None, {"instances": [1.0, 2.0, 5.0]}, 200, {"predictions": [3.5, 4.0, 5.5]}),
    (
        "regress",
        "tensorflow/serving/regress",
        {"examples": [{"x": 1.0}, {"x": 2.0}]},
        200,
        {"results": [3.5, 4.0]},
    ),
    # Classify with a binary feature and a text feature per example.
    (
        "classify",
        "classify_objects",
        {
            "examples": [
                {"image": b64(b"pixels of the sea"), "caption": "coast"},
                {"image": b64(b"pixels"), "caption": "peaks"},
            ]
        },
        200,
        {"results": [[["coast", 17.0]], [["peaks", 6.0]]]},
    ),
]


@pytest.mark.parametrize(
    ("verb", "signature", "body", "status", "expected"),
    API_REST_EXAMPLES,
    ids=[f"{verb}-{signature}-{i}" for i, (verb, signature, *_) in enumerate(API_REST_EXAMPLES)],
)
def test_api_rest_md_requests(  # noqa: PLR0917 - one per parameter
    docs_client: TestClient, verb: str, signature: str | None, body: Any, status: int, expected: Any
) -> None:
    document = body if signature is None else {"signature_name": signature, **body}
    response = docs_client.post(f"/v1/models/model:{verb}", content=json_values.encode(document))
    assert response.status_code == status, response.text
    answer = json.loads(response.content)
    assert json.dumps(answer, sort_keys=True) == json.dumps(expected, sort_keys=True)  # NaN too


def test_api_rest_md_error_example(docs_client: TestClient) -> None:
    response = docs_client.post("/v1/models/half:predict", json={"instances": [1.0, 5.0]})
    assert response.status_code == 404
    assert response.json() == {"error": "Servable not found for request: Latest(half)"}


def test_api_rest_md_status_and_metadata(docs_client: TestClient) -> None:
    status = docs_client.get("/v1/models/model")
    assert status.status_code == 200
    assert status.json()["model_version_status"][0]["state"] == "AVAILABLE"
    assert docs_client.get("/v1/models/model/versions/1/metadata").status_code == 200

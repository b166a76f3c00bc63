"""Memory per request (docs/robustness.md, "Memory per request"), in the real image.

Every server here runs under a memory limit with swap off (MEMORY), far below
what the requests would take unbounded, and far above what the documented
bound lets them take. Without the bound each of these requests made the
container's kernel kill the server (OOMKilled, exit 137); with it the server
answers the documented error, and then a good request, and the container
was neither OOM-killed nor restarted.

Models (from the model library, harness/models.py): plus/1 (make_models.py:
float x [batch] -> x + 1), examples/1 (make_models.py --kind
classify_regress), mlp/1 (make_batch_models.py), huge_warmup/1 (plus, with a
warm-up record whose shape asks for 8 GiB). gRPC calls come from TF Serving's
own stubs in a sidecar (grpc_client.py, harness/clients.py).
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from docker.models.containers import Container

from harness import web
from harness.docker import Containers, poll, wait
from harness.models import ModelLibrary
from harness.servers import ModelSource, Server, ServerPool, ServerSpec, serve
from tests.container.examples import BODY
from tests.container.gates import OPEN, Gate
from tests.container.grpc_models import gate_volume

#: The containers' memory (and memory + swap: no swap). The idle server takes
#: about 230 MB of it; each request below asks for several GB unbounded.
MEMORY = "1g"
LIMITED: dict[str, Any] = {"mem_limit": MEMORY, "memswap_limit": MEMORY}
CONFIG = """
model_config_list {
  config { name: "plus" base_path: "/models/plus" }
  config { name: "examples" base_path: "/models/examples" }
  config { name: "mlp" base_path: "/models/mlp" }
}
"""
BODY_LIMIT = 8 * 1024 * 1024  # --max-body-bytes' default
EXPANSION_LIMIT = 8 * BODY_LIMIT
#: The CPU image; the CUDA image for one bounded request under the limit, its
#: TensorFlow build's idle memory included (tests/container/conftest.py).
IMAGE_FLAVORS = ("cpu",)


MODELS: dict[str, ModelSource] = {
    "plus": ("plus", (1,)),
    "examples": "examples",
    "mlp": "batch/mlp",
}


def limited(*args: str, gate: Gate | None = None, memory: str = MEMORY) -> ServerSpec:
    """A server of MODELS (CONFIG) with `args` under `memory` with swap off."""
    return serve(
        "--model_config_file=/models/models.config",
        *args,
        models=MODELS,
        files={"models.config": CONFIG},
        volumes=gate_volume(gate) if gate else (),
        options=(("mem_limit", memory), ("memswap_limit", memory)),
    )


def survived(server: Server) -> None:
    """The container is running and was neither OOM-killed nor restarted.

    First waits until the server answers /readyz or the container has
    stopped: a process the kernel just killed can still show as running.
    """

    def settled() -> bool:
        server.container.reload()
        if server.container.status != "running":
            return True
        try:
            return web.get(server.rest + "/readyz", timeout=5).status_code == 200
        except httpx2.TransportError:
            return False

    poll(settled, 60, 0.2)
    server.container.reload()
    state = server.container.attrs["State"]
    assert not state["OOMKilled"], server.logs()
    assert state["Status"] == "running", server.logs()
    assert server.container.attrs["RestartCount"] == 0
    assert "Traceback" not in server.logs()


def peak_memory(container: Container) -> int:
    """The most memory the container's cgroup has used, in bytes (cgroup v1 or v2)."""
    for path in (
        "/sys/fs/cgroup/memory/memory.max_usage_in_bytes",
        "/sys/fs/cgroup/memory.peak",
    ):
        code, output = container.exec_run(["cat", path])
        if code == 0:
            assert isinstance(output, bytes)
            return int(output.decode().strip())
    raise AssertionError("no cgroup memory peak file in the container")


@pytest.fixture(scope="module")
def server(servers: ServerPool) -> Server:
    return servers.shared(limited())


def huge_tensor(dtype: str, dims: list[int], **values: Any) -> dict[str, Any]:
    """A TensorProto in protobuf's JSON form."""
    return {"dtype": dtype, "tensorShape": {"dim": [{"size": str(d)} for d in dims]}, **values}


def good_predict(server: Server) -> None:
    (answer,) = server.grpc(
        {"op": "predict", "model": "plus", "inputs": {"x": {"values": [1.0, 2.5]}}}
    )
    assert (answer["code"], answer["outputs"]) == ("OK", {"y": [2.0, 3.5]}), answer
    response = web.post(f"{server.rest}/v1/models/plus:predict", json={"instances": [1.0]})
    assert response.json() == {"predictions": [2.0]}


# -- gRPC: a TensorProto whose shape is far larger than its values


@pytest.mark.flavors("cpu", "gpu")
def test_a_small_tensorproto_cannot_ask_for_gigabytes(server: Server) -> None:
    """40-odd bytes whose shape says 2**31 floats: TensorFlow would fill in 8 GiB."""
    floats = huge_tensor("DT_FLOAT", [2**31], floatVal=[1.5])
    zeros = huge_tensor("DT_FLOAT", [2**16, 2**15])  # no values: 8 GiB of zeros
    strings = huge_tensor(  # 10 million copies of a 1 kB string: 10 GB
        "DT_STRING", [10_000_000], stringVal=[base64.b64encode(b"s" * 1000).decode()]
    )
    results = server.grpc(
        {"op": "predict_proto", "model": "plus", "inputs": {"x": floats}},
        {"op": "predict_proto", "model": "plus", "inputs": {"x": zeros}},
        {"op": "predict_proto", "model": "examples", "signature": "classify",
         "inputs": {"inputs": strings}},
    )  # fmt: skip
    survived(server)  # unbounded, the kernel killed it (OOMKilled) on the first
    assert [r["request_bytes"] < 1200 for r in results] == [True] * 3
    assert results[0]["code"] == "RESOURCE_EXHAUSTED", results[0]
    assert results[0]["message"] == (
        "Decoding the inputs (x: [2147483648] DT_FLOAT from 1 value(s)) would take "
        f"8589934592 bytes, more than the limit of {EXPANSION_LIMIT} bytes "
        "(8 x --max-body-bytes); send a smaller tensor, or raise --max-body-bytes"
    )
    # [65536,32768] for a [-1] input: no shape is checked against the signature
    # (TF Serving feeds it to the graph), so the size bound refuses it before
    # anything is allocated.
    assert results[1]["code"] == "RESOURCE_EXHAUSTED", results[1]
    assert results[1]["message"] == (
        "Decoding the inputs (x: [65536,32768] DT_FLOAT from 0 value(s)) would take "
        f"8589934592 bytes, more than the limit of {EXPANSION_LIMIT} bytes "
        "(8 x --max-body-bytes); send a smaller tensor, or raise --max-body-bytes"
    )
    assert results[2]["code"] == "RESOURCE_EXHAUSTED", results[2]
    assert results[2]["message"].startswith(
        "Decoding the inputs (inputs: [10000000] DT_STRING from 1 value(s)) would take "
        f"{10_000_000 * (1000 + 16)} bytes"
    )
    good_predict(server)
    survived(server)


def test_zeros_for_a_whole_shape_are_bounded_too(server: Server) -> None:
    (result,) = server.grpc(
        {"op": "predict_proto", "model": "plus", "inputs": {"x": huge_tensor("DT_FLOAT", [2**31])}}
    )
    survived(server)
    assert result["code"] == "RESOURCE_EXHAUSTED", result
    assert (
        "(x: [2147483648] DT_FLOAT from 0 value(s)) would take 8589934592 bytes"
        in (result["message"])
    )
    good_predict(server)
    survived(server)


def test_tensorprotos_are_read_as_tensorflow_reads_them(server: Server) -> None:
    """Tensor::FromProto's acceptance, within the bound: more values than the shape
    are cut, fewer filled from the last, wrapped to the dtype as C++ casts do;
    a bad shape or tensor_content is TF Serving's 'tensor parsing error'."""
    short = huge_tensor("DT_FLOAT", [4], floatVal=[1.0, 2.0])
    long = huge_tensor("DT_FLOAT", [2], floatVal=[1.0, 2.0, 3.0])
    negative = huge_tensor("DT_FLOAT", [-1], floatVal=[1.0])
    content = huge_tensor("DT_FLOAT", [3], tensorContent=base64.b64encode(b"\0" * 8).decode())
    results = server.grpc(
        *[
            {"op": "predict_proto", "model": "plus", "inputs": {"x": tensor}}
            for tensor in (short, long, negative, content)
        ]
    )
    assert [(r["code"], r.get("outputs"), r["message"]) for r in results] == [
        ("OK", {"y": [2.0, 3.0, 3.0, 3.0]}, ""),
        ("OK", {"y": [2.0, 3.0]}, ""),
        ("INVALID_ARGUMENT", None, "tensor parsing error: x"),
        ("INVALID_ARGUMENT", None, "tensor parsing error: x"),
    ]
    survived(server)


# -- classify and regress: a context copied into every example


def test_a_classify_context_cannot_multiply_a_small_body(server: Server) -> None:
    """A 1 MB context and 2 million empty examples: a 7 MB body, 2 TB once copied."""
    context = base64.b64encode(b"c" * 1_000_000).decode()
    count = 2_000_000
    document = {"signature_name": "classify", "context": {"pad": {"b64": context}},
                "examples": [{}] * count}  # fmt: skip
    body = json.dumps(document, separators=(",", ":")).encode()
    assert len(body) < BODY_LIMIT
    try:
        response = web.post(
            f"{server.rest}/v1/models/examples:classify",
            content=body,
            headers={"content-type": "application/json"},
            timeout=120,
        )
    finally:
        survived(server)  # unbounded, the kernel killed it (OOMKilled)
    assert response.status_code == 413, response.text
    message = response.json()["error"]
    found = re.search(r"context \((\d+) bytes\)", message)
    assert found, message
    context_bytes = int(found.group(1))  # the 1 MB and the feature's name, kind and lengths
    assert 1_000_000 < context_bytes < 1_000_100
    assert message == (
        f"{count} examples with their context ({context_bytes} bytes) copied into each would "
        f"take {count * context_bytes} bytes, more than the limit of {EXPANSION_LIMIT} bytes "
        "(8 x --max-body-bytes); send fewer examples per request or a smaller context, or "
        "raise --max-body-bytes"
    )
    response = web.post(
        f"{server.rest}/v1/models/examples:classify",
        json={"signature_name": "classify", **BODY},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    survived(server)


def test_a_grpc_context_cannot_multiply_either(server: Server) -> None:
    """1 MB of context and 10,000 examples: a 1.1 MB message, 10 GB once copied."""
    ops = [
        {"op": "examples_context", "kind": kind, "model": "examples", "signature": kind,
         "context_bytes": 1_000_000, "count": 10_000}
        for kind in ("classify", "regress")
    ]  # fmt: skip
    results = server.grpc(*ops)
    survived(server)
    for result in results:
        assert result["request_bytes"] < 1_200_000
        assert result["code"] == "RESOURCE_EXHAUSTED", result
        assert result["message"].startswith("10000 examples with their context (")
        assert "--max-body-bytes" in result["message"]
    # Within the bound a context is copied as TF Serving copies it.
    small = [{**op, "context_bytes": 1000, "count": 3} for op in ops]
    classified, regressed = server.grpc(*small)
    assert classified["code"] == "OK", classified
    assert len(classified["response"]["result"]["classifications"]) == 3
    assert regressed["code"] == "OK", regressed
    assert len(regressed["response"]["result"]["regressions"]) == 3
    survived(server)


# -- what a request quotes back


def test_an_error_quoting_a_long_request_string_still_reaches_the_client(server: Server) -> None:
    """A 40 kB model name or metadata field, or 2,000 non-ASCII characters
    (12 bytes each once grpc percent-encodes them): the error, cut to 6,000
    bytes on the wire, instead of grpc's 'received metadata size exceeds ...
    limit' (which the soak benchmark met with the non-ASCII name)."""
    name = "m" * 40_000
    missing, field, accented = server.grpc(
        {"op": "predict", "model": name, "inputs": {"x": {"values": [1.0]}}},
        {"op": "metadata", "model": "plus", "fields": ["f" * 40_000]},
        {"op": "predict", "model": "\u00fc" * 2_000, "inputs": {"x": {"values": [1.0]}}},
    )
    assert missing["code"] == "NOT_FOUND", missing
    assert missing["message"].startswith("Servable not found for request: Latest(mmm")
    assert len(missing["message"]) == 6000
    assert missing["message"].endswith("m...")
    assert field["code"] == "INVALID_ARGUMENT", field
    assert field["message"].startswith("Metadata field fff")
    assert len(field["message"]) == 6000
    assert accented["code"] == "NOT_FOUND", accented
    assert accented["message"].startswith("Servable not found for request: Latest(\u00fc")
    assert accented["message"].endswith("\u00fc...")
    text = accented["message"]
    wire = sum(1 if " " <= c <= "~" and c != "%" else 3 * len(c.encode()) for c in text)
    assert 5900 < wire <= 6000
    survived(server)


# -- a version's graph: bounded before it is read (docs/robustness.md, "Memory per load")

#: What a version's load may cost here: its container's memory. 1 GiB of garbage as a
#: graph used to take about 3 GiB to fail (TensorFlow read it whole, then parsed it).
LOAD_MEMORY = "1500m"
GIB = 1024 * 1024 * 1024


def write_random(path: Path, size: int) -> None:
    """`size` random bytes (not a sparse file: those read as zeros, which parse)."""
    chunk = 16 * 1024 * 1024
    with path.open("wb") as out:
        for start in range(0, size, chunk):
            out.write(os.urandom(min(chunk, size - start)))


def test_a_gigabyte_of_garbage_as_a_graph_fails_its_version_and_version_1_serves(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    """A 1 GiB saved_model.pb of random bytes dropped in as version 2, under a 1.5 GB
    limit: version 2 is END with DATA_LOSS naming the file, its size and
    --max-graph-bytes, without a byte of it read; version 1 still answers, and the
    container was not OOM-killed (it was, exit 137, taking version 1 with it)."""
    models = tmp_path / "models"
    model_library.copy("plus", models / "plus", versions=(1,))
    staged = models / "plus" / ".staged-2"
    staged.mkdir()
    for path in (models, models / "plus", models / "plus" / "1", staged):
        path.chmod(0o777)
    try:
        write_random(staged / "saved_model.pb", GIB)
        spec = serve(
            "--model_name=plus", "--model_base_path=/models/plus",
            "--file_system_poll_wait_seconds=0.5", "--max_num_load_retries=0",
            options=(("mem_limit", LOAD_MEMORY), ("memswap_limit", LOAD_MEMORY)),
        )  # fmt: skip
        with servers.private(spec, models) as server:
            staged.rename(models / "plus" / "2")

            def version_2() -> dict[str, Any] | None:
                server.container.reload()
                if server.container.status != "running":
                    return {"exited": server.container.attrs["State"]}
                try:
                    answer = web.get(f"{server.rest}/v1/models/plus/versions/2", timeout=10)
                except httpx2.TransportError:  # killed meanwhile: the next look says so
                    return None
                if answer.status_code != 200:
                    return None
                status: dict[str, Any] = answer.json()["model_version_status"][0]
                return status if status["state"] == "END" else None

            assert poll(lambda: version_2() is not None, 120, 0.25), server.logs()
            status = version_2()
            assert status is not None
            assert "exited" not in status, server.logs()
            assert status["status"]["error_code"] == "DATA_LOSS", status
            assert status["status"]["error_message"] == (
                "loading /models/plus/2 failed: /models/plus/2/saved_model.pb is 1,073,741,824 "
                "bytes, more than the limit of 67,108,864 bytes on a SavedModel's graph "
                "(--max-graph-bytes, SERVE_MAX_GRAPH_BYTES): not read; a graph's weights belong "
                "in variables/, or raise --max-graph-bytes"
            )
            answer = web.post(
                f"{server.rest}/v1/models/plus:predict", json={"instances": [1.0]}, timeout=30
            )
            assert answer.json() == {"predictions": [2.0]}
            survived(server)
            # Not read: the load's peak is the idle server's, far below the file.
            assert peak_memory(server.container) < 600 * 1024 * 1024, server.logs()
    finally:
        shutil.rmtree(models, ignore_errors=True)


# -- warm-up records are requests too


def test_a_warmup_record_cannot_ask_for_gigabytes(
    containers: Containers, model_library: ModelLibrary, tmp_path: Path
) -> None:
    """Its version fails to load, with the reason; the server does not die of it."""
    models = model_library.tree(tmp_path / "models", {"huge_warmup": "huge_warmup"})
    with containers.started(
        # No load retries (TF Serving's default retries 5 times a minute apart).
        [
            "serve",
            "--model_name=huge_warmup",
            "--model_base_path=/models/huge_warmup",
            "--max_num_load_retries=0",
        ],
        volumes={str(models): {"bind": "/models", "mode": "ro"}},
        nano_cpus=1_000_000_000,
        **LIMITED,
    ) as container:
        ran = wait(container, 180)
        container.reload()
        assert not container.attrs["State"]["OOMKilled"], ran.stderr
    assert ran.exit_code == 1, ran.stderr
    assert (
        "Decoding the inputs (x: [2147483648] DT_FLOAT from 1 value(s)) would take "
        "8589934592 bytes, more than the limit of"
    ) in ran.stderr
    assert "warm-up record 0 of /models/huge_warmup/1/assets.extra/" in ran.stderr


# -- REST: bodies are admitted before they are read


def raw_request(port: int, head: bytes) -> socket.socket:
    """A connection that has sent `head` (request line and headers) and nothing more."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head)
    return sock


def response_of(sock: socket.socket) -> bytes:
    """One HTTP response, head and body (its Content-Length), as it arrives."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(data) < len(head) + 4 + length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_bodies_are_read_only_once_admitted(servers: ServerPool) -> None:
    """With --max-queue 2, two requests whose bodies have not arrived hold both
    places: the next is refused at once, its 8 MB body never read; a body that
    does not arrive within --request-timeout gets 408."""
    with servers.private(limited("--max-queue=2", "--request-timeout=20")) as server:
        port = int(server.rest.rsplit(":", 1)[1])
        head = (
            b"POST /v1/models/plus:predict HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        )
        waiting = [raw_request(port, head % 100) for _ in range(2)]
        try:
            assert poll(lambda: server.metric("serving_predict_in_flight") == 2, 30), server.logs()
            refused = raw_request(port, head % BODY_LIMIT)  # its body is never sent
            answer = response_of(refused)
            refused.close()
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"Server is at capacity (2 predict requests in progress)" in answer
            started = time.monotonic()
            late = response_of(waiting[0])  # its body never came
            assert late.startswith(b"HTTP/1.1 408 "), late
            assert b"Request body not received within 20 s (--request-timeout)" in late
            assert b"connection: close" in late.lower()
            assert time.monotonic() - started < 25
        finally:
            for sock in waiting:
                sock.close()
        assert poll(lambda: server.metric("serving_predict_in_flight") == 0, 30)
        good_predict(server)
        survived(server)


# -- REST: a request's line and headers


def test_a_request_head_cannot_grow_without_bound(server: Server) -> None:
    """A header that never ends: cut off at 64 kB with 431, not kept until OOM."""
    port = int(server.rest.rsplit(":", 1)[1])
    sock = raw_request(port, b"GET /v1/models/plus HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent, answer = 0, b""
    try:
        while sent < 2**31:  # twice the container's memory
            if select.select([sock], [], [], 0)[0]:  # the server has answered
                break
            sock.sendall(b"a" * 2**16)
            sent += 2**16
        answer = response_of(sock)
    except OSError:  # it closed the connection while this was still sending
        pass
    finally:
        sock.close()
    try:
        good_predict(server)
    finally:
        survived(server)  # unbounded, the kernel killed it (OOMKilled) after about 400 MB
    assert sent < 64 * 2**20  # what the sockets' buffers held when the server cut it off
    if answer:  # else the reset of a connection closed with data unread came first
        assert answer.startswith(b"HTTP/1.1 431 "), answer
        assert b"Request line and headers exceed the limit of 65536 bytes" in answer


# -- gRPC: messages are read once admitted


def test_grpc_messages_are_read_only_once_admitted(servers: ServerPool, tmp_path: Path) -> None:
    """With --max-queue 1, a call refused at admission never has its message read,
    and a call is admitted before its message is read; on any CPU.

    The one place is held by a running call: mlp's gated signature runs until
    the test opens the gate (gates.py), and a running call never loses its
    place. The next Predict, 12 MB against the 8 MiB message limit, is then
    refused at capacity without being read: read, it would have been refused
    as too large, as it is once the place is free. Then a Predict whose message
    is held back is counted in flight before its message arrives; once it has
    waited longer than EVICTABLE_AFTER (1 s; the client waits 2 s after seeing
    it admitted: waiting longer than a bound is safe on any CPU), a newcomer
    takes its place and it ends RESOURCE_EXHAUSTED saying why.
    """
    gate = Gate(tmp_path / "gates")
    running = {"op": "predict", "model": "mlp", "signature": "gated",
               "inputs": {"x": {"values": [1.0]}}, "timeout": 600}  # fmt: skip
    big = {"op": "big", "model": "plus", "floats": 3_000_000}  # 12 MB of float zeros
    newcomer = {"op": "predict", "model": "plus", "inputs": {"x": {"values": [1.0]}}}
    with servers.private(
        limited(
            "--max-queue=1",
            "--request-timeout=0",  # the gated call runs as long as sidecars take to start
            gate=gate,
        )
    ) as server:

        def in_flight() -> bool:
            return server.metric("serving_predict_in_flight") == 1

        with ThreadPoolExecutor(1) as pool, gate.shut(OPEN):
            sent = pool.submit(server.grpc, running)
            started = poll(lambda: sent.done() or in_flight(), 180, 0.05) and in_flight()
            assert started, server.logs()
            (refused,) = server.grpc(big)
            gate.open(OPEN)
            (held,) = sent.result()
        assert poll(server.idle, 60, 0.05), server.logs()
        too_large, stalled = server.grpc(
            big, {"op": "hold_then", "model": "plus", "x": [1.0], "wait": 2, "ops": [newcomer]}
        )
        good_predict(server)
        survived(server)
    assert (refused["code"], refused["message"]) == (
        "RESOURCE_EXHAUSTED",
        "Server is at capacity (1 predict requests in progress); retry later",
    )
    assert (held["code"], held["outputs"]) == ("OK", {"y": [2.0]}), held
    assert too_large["code"] == "RESOURCE_EXHAUSTED", too_large
    assert "Received message larger than max" in too_large["message"], too_large
    assert stalled["admitted"], stalled  # counted in flight before its message was sent
    (taken,) = stalled["results"]
    assert (taken["code"], taken["outputs"]) == ("OK", {"y": [2.0]}), taken
    evicted = stalled["held"]
    assert evicted["code"] == "RESOURCE_EXHAUSTED", evicted
    waited = re.fullmatch(
        r"Server is at capacity and the request message had not arrived ([0-9.]+) s after "
        r"the call began: its admission place went to another request; retry later",
        evicted["message"],
    )
    assert waited, evicted
    assert float(waited[1]) >= 1.0, evicted  # it had waited its second (and the 2 s)


# -- REST with batching: many large bodies at once


def test_many_large_bodies_at_once_with_batching(servers: ServerPool) -> None:
    """12 clients at once, each with a 4 MB body of 2 million numbers.

    With batching every admitted request has a thread; unbounded, each parsed
    its JSON at once and held it, and its answer, while it waited: about
    125 MB each, 3 GB for 24 (measured before the bound), so 1.5 GB for these
    12 against MEMORY's 1 GB. Bounded, one (--workers) parses or writes an
    answer at a time, and the waiting ones hold compact arrays. (12, not 24:
    the same proof at half the CPU, the container tier's longest test.)
    """
    values, clients = 2_000_000, 12
    body = b'{"inputs": {"x": [' + b",".join([b"0"] * (values - 1) + [b"1"]) + b"]}}"
    assert 4_000_000 < len(body) < 4 * 1024 * 1024
    with servers.private(
        limited(
            "--enable_batching",
            "--max-body-bytes=4194304",
            "--request-timeout=0",  # they take turns: however long that takes on this machine
        )
    ) as server:
        before = peak_memory(server.container)

        def send(_: int) -> tuple[int, Any]:
            try:
                response = web.post(
                    f"{server.rest}/v1/models/plus:predict",
                    content=body,
                    headers={"content-type": "application/json"},
                    timeout=600,
                )
            except httpx2.TransportError as err:  # the server is gone
                return 0, str(err)
            if response.status_code != 200:
                return response.status_code, response.text
            y = response.json()["outputs"]
            return 200, (len(y), y[0], y[-1])

        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(send, range(clients)))
        survived(server)
        assert answers == [(200, (values, 1.0, 2.0))] * clients
        peak = peak_memory(server.container)
        good_predict(server)
        survived(server)
    print(f"idle {before / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB")

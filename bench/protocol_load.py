"""The load generator of bench/grpc_rest.py: REST and gRPC from one Python process.

Runs inside a container of the image that shares the server's network
namespace (`--network container:SERVER`), with the bench directory and the
models mounted read-only:

    python -m bench.protocol_load [--v2] MODEL [MODEL...]

It reads each model's expected answer from /models/MODEL/answer.json
(recorded by TensorFlow when the model library was exported:
bench/answers.py), so it never imports TensorFlow (about 5 CPU-seconds and
480 MB a client); checks that REST (127.0.0.1:8501) and gRPC
(127.0.0.1:8500) both give it, prints one JSON line `{"ready": ...}`, then
reads one JSON command per line on stdin and answers each with one JSON line:

    {"mode": "rest" | "grpc" | "grpc-channels" | "v2-json" | "v2-binary" | "v2-grpc",
     "model": M, "concurrency": C, "seconds": S, "last": true | false}

C callers in a closed loop for S seconds, each sending the next request as
soon as its answer is in. Every mode sends a request built once:

* rest: HTTP/1.1 keep-alive, one connection per caller, the request's bytes
  prebuilt (bench/serving.py's asyncio client); the body is read, not parsed;
* grpc: `grpc.aio`, a raw unary call of TF Serving's Predict, the
  PredictRequest built once with bench/tfs_messages.py (the input in
  tensor_content, as TensorFlow's make_tensor_proto writes it); all C callers
  share ONE channel (one HTTP/2 connection, C concurrent streams);
* grpc-channels: the same, but one channel (and TCP connection) per caller
  (a local subchannel pool, so gRPC does not share the connection);
* v2-json: the Open Inference Protocol on REST, POST /v2/models/M/infer with
  the JSON tensor form (`data` flat, `shape`), as the rest mode's caller;
* v2-binary: the same with the binary tensor data extension: a JSON header
  (`binary_data_size`, `binary_data_output` true) and the input's raw
  little-endian bytes after it, `Inference-Header-Content-Length`; the
  answer's output comes back as raw bytes too;
* v2-grpc: `inference.GRPCInferenceService/ModelInfer` on ONE grpc.aio
  channel, a raw unary-unary call with the image's own message classes
  (tf_entrypoint.serving.codec.v2_proto), the input in raw_input_contents.

The OIP modes are checked at start-up only with `--v2` (before the models):
the floors of bench/cost.py speak TF Serving's API alone.

gRPC channels are opened for a warm-up window (`"last": false`) and closed
after the timed window that follows it, so each window's count of open
connections is its own mode's.

The first answer of every window is decoded and compared with the expected
one (a mismatch is reported, and the host fails the run), so a broken path
cannot look fast. Latency is per request, from send to the full answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.bodies import ANSWER, request_body
from harness.load import Caller, Failed, HttpCaller, Tally, closed_loop

HOST = "127.0.0.1"
REST_PORT = 8501
GRPC_PORT = 8500
SIGNATURE = "serving_default"
TOLERANCE = 1e-4
#: The modes answered on the REST port (the others are gRPC's).
REST_MODES = ("rest", "v2-json", "v2-binary")
V1_MODES = ("rest", "grpc", "grpc-channels")
V2_MODES = ("v2-json", "v2-binary", "v2-grpc")
V2_INFER = "/inference.GRPCInferenceService/ModelInfer"


def instances(model: str) -> list[Any]:
    return list(json.loads(request_body(model))["instances"])


def expected_answer(model: str) -> Any:
    """Output y of /models/MODEL for the request, as recorded when the model library
    was exported (bench/answers.py): a client that checks it needs no TensorFlow."""
    path = Path("/models") / model / ANSWER
    try:
        return json.loads(path.read_text())["y"]
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(
            f"no recorded answer for {model} ({path}: {err}); the model library records "
            "one for each model of bench/answers.py's FOLDERS"
        ) from None


def close(got: Any, want: Any) -> bool:
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(close(g, w) for g, w in zip(got, want, strict=True))
        )
    return isinstance(got, int | float) and abs(got - want) <= TOLERANCE * max(1.0, abs(want))


def count_connections(port: int) -> int:
    """ESTABLISHED TCP connections to `port` seen from this network namespace (client side)."""
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                found += 1
    return found


class Client:
    def __init__(self, models: list[str]) -> None:
        import grpc  # noqa: PLC0415 - in the container only
        import numpy as np  # noqa: PLC0415

        from bench import tfs_messages  # noqa: PLC0415
        from tf_entrypoint.serving.codec import v2_proto  # noqa: PLC0415

        self.grpc, self.np, self.v2_proto, self.tfs = grpc, np, v2_proto, tfs_messages
        self.expected: dict[str, Any] = {}
        self.rest_raw: dict[str, bytes] = {}  # by model (v1) or "MODE MODEL" (v2)
        self.requests: dict[str, Any] = {}
        self.v2_requests: dict[str, Any] = {}
        for model in models:
            rows = instances(model)
            self.expected[model] = expected_answer(model)
            body = request_body(model)
            self.rest_raw[model] = (
                f"POST /v1/models/{model}:predict HTTP/1.1\r\nHost: {HOST}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            request = tfs_messages.PredictRequest()
            request.model_spec.name = model
            request.model_spec.signature_name = SIGNATURE
            array = np.asarray(rows, np.float32)
            request.inputs["x"].CopyFrom(
                tfs_messages.float_tensor(array.ravel().tolist(), array.shape)
            )
            self.requests[model] = request
            self.rest_raw.update(self.v2_rest_requests(model, np.asarray(rows, np.float32)))
            self.v2_requests[model] = self.v2_grpc_request(model, np.asarray(rows, np.float32))
        self.open: list[Any] = []
        self.open_mode = ""
        self.stale: list[Any] = []

    # --- the Open Inference Protocol's requests ---------------------------------

    @staticmethod
    def v2_rest_requests(model: str, rows: Any) -> dict[str, bytes]:
        """POST /v2/models/M/infer, raw: the JSON tensor form and the binary extension."""
        shape = list(rows.shape)
        tensor = {"name": "x", "shape": shape, "datatype": "FP32"}
        as_json = json.dumps({"inputs": [{**tensor, "data": rows.ravel().tolist()}]}).encode()
        raw = rows.astype("<f4").tobytes()
        header = json.dumps(
            {
                "inputs": [{**tensor, "parameters": {"binary_data_size": len(raw)}}],
                "parameters": {"binary_data_output": True},
            }
        ).encode()

        def post(body: bytes, headers: str) -> bytes:
            return (
                f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {HOST}\r\n{headers}"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body

        return {
            f"v2-json {model}": post(as_json, "Content-Type: application/json\r\n"),
            f"v2-binary {model}": post(
                header + raw,
                "Content-Type: application/octet-stream\r\n"
                f"Inference-Header-Content-Length: {len(header)}\r\n",
            ),
        }

    def v2_grpc_request(self, model: str, rows: Any) -> Any:
        """ModelInferRequest, the input in raw_input_contents (row-major little-endian)."""
        request = self.v2_proto.ModelInferRequest(model_name=model)
        request.inputs.add(name="x", datatype="FP32", shape=list(rows.shape))
        request.raw_input_contents.append(rows.astype("<f4").tobytes())
        return request

    # --- answers ------------------------------------------------------------------

    def rest_answer(self, body: bytes) -> Any:
        return json.loads(body).get("predictions")

    def grpc_answer(self, response: Any) -> Any:
        if "y" not in response.outputs:
            return str(response)[:300]
        read = self.tfs.float_values(response.outputs["y"])
        if read is None:
            return str(response)[:300]
        values, shape = read
        return self.np.asarray(values, self.np.float32).reshape(shape).tolist()

    def v2_answer(self, mode: str, headers: dict[str, str], body: bytes) -> Any:
        """Output y of a v2 REST answer, as nested lists of its shape (None if absent)."""
        length = headers.get("inference-header-content-length")
        answer = json.loads(body[: int(length)] if length is not None else body)
        (output,) = [o for o in answer.get("outputs", ()) if o.get("name") == "y"] or [None]
        if output is None or output.get("datatype") != "FP32":
            return answer
        if mode == "v2-binary":  # the one output, right after the JSON part
            if length is None or "data" in output:
                return answer  # asked for binary, got JSON: wrong
            values = self.np.frombuffer(body[int(length) :], "<f4")
        else:
            values = self.np.asarray(output["data"], self.np.float32)
        return values.reshape(output["shape"]).tolist()

    def v2_grpc_answer(self, response: Any) -> Any:
        outputs = [o for o in response.outputs if o.name == "y"]
        if len(outputs) != 1 or len(response.raw_output_contents) != len(response.outputs):
            return str(response)[:300]
        index = list(response.outputs).index(outputs[0])
        values = self.np.frombuffer(response.raw_output_contents[index], "<f4")
        return values.reshape(list(outputs[0].shape)).tolist()

    # --- channels -----------------------------------------------------------------

    def channels_for(self, mode: str, concurrency: int) -> list[Any]:
        """The channels of a warm-up window and the timed window after it (then closed).

        grpc, v2-grpc: one channel for every caller; grpc-channels: one per
        caller, each with a local subchannel pool so that it keeps its own TCP
        connection.
        """
        target = f"{HOST}:{GRPC_PORT}"
        wanted = concurrency if mode == "grpc-channels" else 1
        if (self.open_mode, len(self.open)) != (mode, wanted):
            self.stale.extend(self.open)
            self.open = [
                self.grpc.aio.insecure_channel(
                    target, options=[("grpc.use_local_subchannel_pool", 1)]
                )
                for _ in range(wanted)
            ]
            self.open_mode = mode
        return self.open

    async def close_channels(self) -> None:
        """Close every channel, so the next window's connection count is its own."""
        for channel in [*self.stale, *self.open]:
            await channel.close()
        self.stale, self.open, self.open_mode = [], [], ""

    # --- one window ---------------------------------------------------------------

    def rest_caller(self, mode: str, model: str) -> Caller:
        """A keep-alive HTTP/1.1 caller; its answer is (headers, body)."""
        return HttpCaller(
            HOST, REST_PORT, self.rest_raw[model if mode == "rest" else f"{mode} {model}"]
        )

    def grpc_caller(self, mode: str, channel: Any, model: str) -> Caller:
        """A caller on `channel` (shared with the window's other callers)."""
        if mode == "v2-grpc":
            call = channel.unary_unary(
                V2_INFER,
                request_serializer=self.v2_proto.ModelInferRequest.SerializeToString,
                response_deserializer=self.v2_proto.ModelInferResponse.FromString,
            )
            request = self.v2_requests[model]
        else:
            call = channel.unary_unary(
                self.tfs.PREDICT,
                request_serializer=self.tfs.PredictRequest.SerializeToString,
                response_deserializer=self.tfs.PredictResponse.FromString,
            )
            request = self.requests[model]
        error = self.grpc.aio.AioRpcError

        class Grpc:
            async def connect(self) -> None:
                pass

            async def send(self) -> Any:
                try:
                    return await call(request, timeout=30)
                except error as err:
                    raise Failed(err.code().name) from err

            async def close(self) -> None:
                pass

        return Grpc()

    def decode(self, mode: str, raw: Any) -> Any:
        """The first answer of a window, decoded to compare with the expected one."""
        if mode == "rest":
            return self.rest_answer(raw[1])
        if mode in REST_MODES:
            return self.v2_answer(mode, *raw)
        return self.v2_grpc_answer(raw) if mode == "v2-grpc" else self.grpc_answer(raw)

    async def window(
        self, mode: str, model: str, concurrency: int, seconds: float, *, last: bool = True
    ) -> dict[str, Any]:
        """One closed-loop window; `last`: close the gRPC channels afterwards."""
        rest = mode in REST_MODES
        channels = [] if rest else self.channels_for(mode, concurrency)
        for channel in self.stale:  # from a previous mode: gone before the window starts
            await channel.close()
        self.stale = []
        tally = Tally()
        connections: list[int] = []
        started = time.perf_counter()

        async def watch() -> None:
            """The most connections open at once in the window's middle half: one
            count at a fixed moment missed a caller still connecting on a busy host."""
            await asyncio.sleep(seconds / 4)
            until = started + 3 * seconds / 4
            seen = 0
            while True:
                seen = max(seen, count_connections(REST_PORT if rest else GRPC_PORT))
                if time.perf_counter() >= until:
                    break
                await asyncio.sleep(min(0.05, seconds / 20))
            connections.append(seen)

        made = itertools.count()

        def make() -> Caller:
            if rest:
                return self.rest_caller(mode, model)
            return self.grpc_caller(mode, channels[next(made) % len(channels)], model)

        await asyncio.gather(
            watch(), closed_loop(make, concurrency, tally, deadline=started + seconds)
        )
        elapsed = time.perf_counter() - started
        if last:
            await self.close_channels()
        answer = self.decode(mode, tally.first[0]) if tally.first else None
        right = answer is not None and close(answer, self.expected[model])
        return {
            **tally.summary(elapsed, points=(50, 90, 99), digits=4),
            "connections": connections[0] if connections else None,
            "answer_ok": right,
            "answer": None if right else answer,
        }


def emit(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def serve(models: list[str], modes: tuple[str, ...] = V1_MODES) -> None:
    client = Client(models)
    checks = {}
    for model in models:  # each path answers correctly before anything is timed
        for mode in modes:
            # A 50 ms window; again while it got no answer at all (a connect that took
            # longer on a busy machine), up to 10 s: only a wrong answer is a failure.
            for _ in range(200):
                result = await client.window(mode, model, 1, 0.05)
                if result["ok"] or result["errors"]:
                    break
            checks[f"{model} {mode}"] = result["answer_ok"]
    emit({"ready": True, "checks": checks, "expected": client.expected})
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        command = json.loads(line)
        emit(
            await client.window(
                command["mode"],
                command["model"],
                command["concurrency"],
                command["seconds"],
                last=command.get("last", True),
            )
        )


def main(argv: list[str]) -> int:
    v2 = argv[:1] == ["--v2"]
    models = argv[1:] if v2 else argv
    if not models:
        print("usage: python -m bench.protocol_load [--v2] MODEL [MODEL...]", file=sys.stderr)
        return 64
    asyncio.run(serve(models, V1_MODES + V2_MODES if v2 else V1_MODES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

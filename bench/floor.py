"""The floors of issue 24: the least a Python server can do per predict (runs in the image).

    python -m bench.floor rest MODEL [MODEL...]           # REST on 8501
    python -m bench.floor rest-workers N MODEL [MODEL...] # the same in N processes, a copy each
    python -m bench.floor grpc-aio MODEL [MODEL...]       # gRPC on 8500, grpc.aio
    python -m bench.floor grpc-threaded MODEL [MODEL...]  # gRPC on 8500, grpc.server
    python -m bench.floor calls MODEL [MODEL...]          # the model call alone, in process

Each loads /models/MODEL/1 (TF Serving's layout, bench/serving.py's
export_models) as the server does: a Session bundle
(tf.compat.v1.saved_model.loader.load) and one Session callable per model
for its serving_default signature (Session::MakeCallable, what the server's
model/bundle.py makes), fed the signature's one input and fetching its
outputs. Nothing of the server is imported: these are what the server is
measured against.

* rest: a raw ASGI app on uvicorn with uvloop and httptools: it reads the
  body, json.loads it, calls the model inline on the event loop and writes
  json.dumps of TF Serving's row-format answer ({"predictions": ...}). No
  routing framework, no validation, no metrics, no thread hop, no logging.
* grpc-aio: a grpc.aio server with a PredictionService servicer (TF
  Serving's stubs) whose Predict does tf.make_ndarray, the call inline,
  tf.make_tensor_proto.
* grpc-threaded: the same servicer on a threaded grpc.server
  (ThreadPoolExecutor of THREADS workers), the call in the handler's thread.

The ports are the server's (8501 / 8500), so bench/protocol_load.py drives
a floor unchanged. When a floor listens it prints `floor ready` on stdout.

calls times the model call alone with the benchmark's own inputs (the
request bodies of bench/serving.py): per model, the Session callable (what
the floors and the server call) and tf.saved_model.load's signature function,
in windows that take turns; one JSON line with the median call (µs of wall
time and of process CPU time).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.bodies import request_body

REST_PORT = 8501
GRPC_PORT = 8500
SIGNATURE = "serving_default"
THREADS = 16


class Model:
    """One SavedModel as a Session callable: array in, {output alias: array} out."""

    def __init__(self, name: str) -> None:
        import tensorflow as tf  # noqa: PLC0415 - in the image only
        from tensorflow.core.protobuf import config_pb2  # noqa: PLC0415

        self.name = name
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], f"/models/{name}/1")
        set_unset_variables(self.graph, self.session)
        signature = meta.signature_def[SIGNATURE]
        ((self.input_alias, tensor),) = signature.inputs.items()
        self.input_name = tensor.name
        self.dtype = tf.dtypes.as_dtype(tensor.dtype).as_numpy_dtype
        self.aliases = sorted(signature.outputs)
        fetches = [signature.outputs[alias].name for alias in self.aliases]
        options = config_pb2.CallableOptions(feed=[self.input_name], fetch=fetches)
        # Session::MakeCallable, as the server's model/bundle.py (the public
        # make_callable goes through Session.run's lookups on every call).
        self.run = self.session._make_callable_from_options(options)

    def __call__(self, array: Any) -> dict[str, Any]:
        return dict(zip(self.aliases, self.run(array), strict=True))


def set_unset_variables(graph: Any, session: Any) -> None:
    """Variables the restore left unset get the value of the restored copy made from them.

    Keras 3's exports (bench/workload.py's MLP) keep the model's own variables
    V, which the signature reads, and restore copies C whose initializer is
    AssignVariableOp(C, ReadVariableOp(V)); V := C after the restore is what
    tf.saved_model.load's binding amounts to (the server does the same at load).
    """
    import tensorflow as tf  # noqa: PLC0415

    handles = [op for op in graph.get_operations() if op.type == "VarHandleOp"]
    if not handles:
        return
    with graph.as_default():
        done = session.run(
            [tf.raw_ops.VarIsInitializedOp(resource=op.outputs[0]) for op in handles]
        )
        unset = {op.name for op, ok in zip(handles, done, strict=True) if not ok}
        sets = []
        for op in graph.get_operations():
            if op.type != "AssignVariableOp" or len(op.inputs) != 2:
                continue
            copy, read = op.inputs[0].op, op.inputs[1].op
            if (
                copy.type == "VarHandleOp"
                and copy.name not in unset
                and read.type == "ReadVariableOp"
                and read.inputs[0].op.name in unset
            ):
                value = tf.raw_ops.ReadVariableOp(
                    resource=copy.outputs[0], dtype=copy.get_attr("dtype")
                )
                sets.append(tf.raw_ops.AssignVariableOp(resource=read.inputs[0], value=value))
    if sets:
        session.run(sets)


def load(names: list[str]) -> dict[str, Model]:
    return {name: Model(name) for name in names}


def model_of(path: str) -> str:
    """MODEL of /v1/models/MODEL:predict (the only request the REST floor answers)."""
    return path.removeprefix("/v1/models/").removesuffix(":predict")


# --- REST ---------------------------------------------------------------------


def rest_app(models: dict[str, Model]) -> Any:
    import numpy as np  # noqa: PLC0415

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan: nothing to set up
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        model = models[model_of(scope["path"])]
        instances = json.loads(body)["instances"]
        outputs = model(np.asarray(instances, dtype=model.dtype))
        if len(outputs) == 1:
            (value,) = outputs.values()
            predictions: Any = value.tolist()
        else:
            columns = {alias: value.tolist() for alias, value in outputs.items()}
            rows = len(instances)
            predictions = [{a: v[i] for a, v in columns.items()} for i in range(rows)]
        answer = json.dumps({"predictions": predictions}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(answer)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    return app


def serve_rest(models: dict[str, Model], sock: socket.socket | None = None) -> None:
    import uvicorn  # noqa: PLC0415

    config = uvicorn.Config(
        rest_app(models),
        host="0.0.0.0",  # noqa: S104 - the container's own namespace
        port=int(os.environ.get("FLOOR_REST_PORT", REST_PORT)),
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.ensure_future(server.serve(sockets=None if sock is None else [sock]))
        while not server.started:
            await asyncio.sleep(0.05)
        print("floor ready", flush=True)
        await task

    # uvloop's own runner, as uvicorn's loop="uvloop" (the module has no types).
    importlib.import_module("uvloop").run(run())


# --- gRPC ---------------------------------------------------------------------


def servicer(models: dict[str, Model]) -> Any:
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import (  # noqa: PLC0415
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    def predict(request: Any) -> Any:
        model = models[request.model_spec.name]
        outputs = model(tf.make_ndarray(request.inputs[model.input_alias]))
        response = predict_pb2.PredictResponse()
        response.model_spec.name = model.name
        for alias, value in outputs.items():
            response.outputs[alias].CopyFrom(tf.make_tensor_proto(value))
        return response

    class Threaded(prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        def Predict(self, request: Any, context: Any) -> Any:
            return predict(request)

    class Aio(prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        async def Predict(self, request: Any, context: Any) -> Any:
            return predict(request)

    return Threaded, Aio, prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server


def serve_grpc_threaded(models: dict[str, Model]) -> None:
    from concurrent import futures  # noqa: PLC0415

    import grpc  # noqa: PLC0415

    threaded, _, add = servicer(models)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=THREADS))
    add(threaded(), server)
    server.add_insecure_port(f"0.0.0.0:{GRPC_PORT}")
    server.start()
    print("floor ready", flush=True)
    server.wait_for_termination()


def serve_grpc_aio(models: dict[str, Model]) -> None:
    import grpc  # noqa: PLC0415

    _, aio, add = servicer(models)

    async def run() -> None:
        server = grpc.aio.server()
        add(aio(), server)
        server.add_insecure_port(f"0.0.0.0:{GRPC_PORT}")
        await server.start()
        print("floor ready", flush=True)
        await server.wait_for_termination()

    asyncio.run(run())


# --- the call alone -----------------------------------------------------------


def _window(call: Any, seconds: float) -> tuple[float, float]:
    """(wall µs, CPU µs) per call over a window of `seconds`."""
    calls, wall, cpu = 0, time.perf_counter(), time.process_time()
    deadline = wall + seconds
    while time.perf_counter() < deadline:
        call()
        calls += 1
    return (
        (time.perf_counter() - wall) * 1e6 / calls,
        (time.process_time() - cpu) * 1e6 / calls,
    )


def calls(names: list[str], rounds: int, seconds: float) -> dict[str, Any]:
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    result: dict[str, Any] = {}
    for name in names:
        model = Model(name)
        rows = np.asarray(json.loads(request_body(name))["instances"], dtype=model.dtype)
        function = tf.saved_model.load(f"/models/{name}/1").signatures[SIGNATURE]
        tensor = tf.constant(rows)
        alias = model.input_alias
        paths: dict[str, Callable[[], Any]] = {
            "session_callable": functools.partial(model, rows),
            "saved_model_function": functools.partial(function, **{alias: tensor}),
        }
        same = np.allclose(
            model(rows)[model.aliases[0]],
            function(**{model.input_alias: tensor})[model.aliases[0]].numpy(),
        )
        for call in paths.values():  # warm
            for _ in range(50):
                call()
        seen: dict[str, list[tuple[float, float]]] = {path: [] for path in paths}
        for index in range(rounds):
            order = list(paths) if index % 2 == 0 else list(paths)[::-1]
            for path in order:
                seen[path].append(_window(paths[path], seconds))
        result[name] = {
            "rows": len(rows),
            "same_answer": bool(same),
            **{
                path: {
                    "wall_us": round(statistics.median(w for w, _ in windows), 1),
                    "cpu_us": round(statistics.median(c for _, c in windows), 1),
                }
                for path, windows in seen.items()
            },
        }
    return result


def serve_rest_workers(names: list[str], workers: int) -> None:
    """The REST floor in `workers` processes, as `uvicorn --workers N` runs an app: each
    loads its own copy of the models (forked after importing TensorFlow, before any
    Session) and listens on the port with SO_REUSEPORT."""
    import tensorflow  # noqa: F401, PLC0415 - imported once, before the fork

    port = int(os.environ.get("FLOOR_REST_PORT", REST_PORT))
    children = []
    for _ in range(workers - 1):
        pid = os.fork()
        if pid == 0:
            break
        children.append(pid)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("0.0.0.0", port))  # noqa: S104 - the container's own namespace
    sock.listen(2048)
    serve_rest(load(names), sock)


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "rest-workers":
        serve_rest_workers(argv[2:], int(argv[1]))
        return 0
    if len(argv) < 2 or argv[0] not in {"rest", "grpc-aio", "grpc-threaded", "calls"}:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 64
    kind, names = argv[0], argv[1:]
    if kind == "calls":
        rounds, seconds = 5, 1.0
        if names[0] == "--quick":
            rounds, seconds, names = 2, 0.1, names[1:]
        print(json.dumps(calls(names, rounds, seconds)), flush=True)
        return 0
    models = load(names)
    {"rest": serve_rest, "grpc-aio": serve_grpc_aio, "grpc-threaded": serve_grpc_threaded}[kind](
        models
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

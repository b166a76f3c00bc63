"""Server-side batching (--enable_batching) in the real image, over REST and gRPC.

Servers run under --cpus 1 (harness/servers.py); gRPC calls come from TF
Serving's own stubs in a sidecar (grpc_client.py, harness/clients.py). The
model (make_batch_models.py, from the model library) is a small MLP whose
TensorFlow graph refuses values of 1e6 or more, and a gated signature that
runs until the test opens the server's gate (gates.py).

No test here assumes a CPU's speed: a request that must keep the batch thread
busy is gated, so it runs exactly until the test opens the gate, and each
step waits for the state it needs (a metric, a log line), never for a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest

from harness import web
from harness.docker import Containers, poll, wait
from harness.models import ModelLibrary
from harness.servers import Server, ServerPool, ServerSpec, serve
from tests.container.gates import OPEN, Gate
from tests.container.grpc_models import gate_volume

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

QUEUE_FULL = "The batch scheduling queue to which this task was submitted is full"
BATCHING = """
max_batch_size { value: 64 }
batch_timeout_micros { value: 5000 }
num_batch_threads { value: 1 }
"""
TIGHT = """
max_batch_size { value: 1 }
max_enqueued_batches { value: 1 }
num_batch_threads { value: 1 }
"""


BAD = "max_batch_size { value: 8 }\nbatch_timeout { value: 1 }\n"


def spec(*args: str, gate: Gate | None = None) -> ServerSpec:
    """A server of mlp/1 (make_batch_models.py) with `args`; /models also holds the
    batching parameters files batching.txt and tight.txt."""
    return serve(
        "--model_name=mlp",
        *args,
        models={"mlp": "batch/mlp"},
        files={"batching.txt": BATCHING, "tight.txt": TIGHT},
        volumes=gate_volume(gate) if gate else (),
    )


@pytest.fixture(scope="module")
def pair(servers: ServerPool) -> tuple[Server, Server]:
    """(batching off, batching on), same model, same flags otherwise."""
    off = servers.shared(spec())
    on = servers.shared(
        spec("--enable_batching", "--batching_parameters_file=/models/batching.txt")
    )
    return off, on


def rest(server: Server, rows: Any, signature: str = "serving_default") -> tuple[int, Any]:
    answer = web.post(
        f"{server.rest}/v1/models/mlp:predict",
        json={"signature_name": signature, "inputs": {"x": rows}},
        timeout=60,
    )
    return answer.status_code, answer.json()


def rest_many(server: Server, requests: Sequence[Any], threads: int = 32) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda rows: rest(server, rows), requests))


def random_requests(seed: int, count: int) -> list[list[list[float]]]:
    rng = random.Random(seed)
    return [
        [[round(rng.uniform(-3, 3), 4) for _ in range(4)] for _ in range(rng.randint(1, 6))]
        for _ in range(count)
    ]


def same(a: Any, b: Any) -> bool:
    """Equal structure, keys, shapes and statuses; floats within float32 rounding.

    TensorFlow's matrix kernels may add in another order for another batch
    size, so a batched float can differ from the unbatched one in its last
    bits: float32 rounding of a sum of 16 products of magnitude up to about
    10 (16 x 10 x 6e-8 = 1e-5); anything more is a real difference.
    """
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b) and type(a) is type(b)


def test_same_is_not_lenient() -> None:
    assert same({"y": [[1.0, 2.5]]}, {"y": [[1.000001, 2.5]]})
    assert not same({"y": [[1.0, 2.5]]}, {"y": [[1.0001, 2.5]]})
    assert not same({"y": [[1.0]]}, {"y": [[1.0], [1.0]]})
    assert not same((200, {"y": 1.0}), (400, {"y": 1.0}))
    assert not same({"error": "a"}, {"error": "b"})


def test_outputs_with_batching_equal_outputs_without(pair: tuple[Server, Server]) -> None:
    off, on = pair
    requests = random_requests(15, 160)
    batches_before = on.metric("serving_batches_total")
    # Counted as deltas: the pool may have handed these servers to other tests before.
    sizes_before = on.metric("serving_batch_size_sum")
    expected = [rest(off, rows) for rows in requests]  # one at a time: never batched
    answers = rest_many(on, requests)
    assert all(status == 200 for status, _ in expected)
    assert same(answers, expected)
    assert [len(body["outputs"]["y"]) for _, body in answers] == [len(r) for r in requests]
    batches = on.metric("serving_batches_total") - batches_before
    assert 0 < batches < len(requests), batches  # some batches held several requests
    assert on.metric("serving_batch_size_sum") - sizes_before >= sum(len(r) for r in requests)

    grpc_requests = random_requests(16, 96)
    op = {"op": "predict_rows", "model": "mlp", "requests": grpc_requests, "threads": 32}
    (grpc_on,) = on.grpc(op)
    (grpc_off,) = off.grpc({**op, "threads": 1})
    assert [answer[0] for answer in grpc_on["answers"]] == ["OK"] * len(grpc_requests)
    assert same(grpc_on["answers"], grpc_off["answers"])


def test_a_bad_request_inside_a_batch_fails_alone(pair: tuple[Server, Server]) -> None:
    off, on = pair
    requests: list[Any] = random_requests(17, 60)
    requests[10] = [[1.0, 2.0, 3.0, 4.0], [1.0, 2e7, 3.0, 4.0]]  # fails in TensorFlow
    requests[20] = [[1.0, 2.0, 3.0]]  # fails validation (shape)
    requests[30] = [["a", "b", "c", "d"]]  # fails parsing
    expected = [rest(off, rows) for rows in requests]
    answers = rest_many(on, requests)
    assert same(answers, expected)
    assert [answer[1] for answer in answers if answer[0] != 200] == [
        answer[1] for answer in expected if answer[0] != 200
    ]  # the errors: exactly the same
    assert [status for status, _ in answers].count(200) == len(requests) - 3
    assert expected[10][0] == 400
    assert "input too large" in expected[10][1]["error"]


def test_parameters_file_errors_exit_78_before_serving(
    containers: Containers, model_library: ModelLibrary, tmp_path: Path
) -> None:
    library = model_library.tree(tmp_path / "models", {"mlp": "batch/mlp"})
    (library / "bad.txt").write_text(BAD)
    ran = containers.run(
        ["serve", "--model_name=mlp", "--enable_batching",
         "--batching_parameters_file=/models/bad.txt"],
        volumes={str(library): {"bind": "/models", "mode": "ro"}},
        timeout=120,
    )  # fmt: skip
    assert ran.exit_code == 78, ran.stderr
    assert "/models/bad.txt:2:1: " in ran.stderr
    assert '"batch_timeout"' in ran.stderr
    assert "Traceback" not in ran.stderr


def gated(server: Server) -> httpx2.Response:
    """A predict of the gated signature: answered once the server's gate is open."""
    return web.post(
        f"{server.rest}/v1/models/mlp:predict",
        json={"signature_name": "gated", "inputs": {"x": [1.0]}},
        timeout=120,
    )


#: The same over gRPC (grpc_client.py's predict_rows: answers [[code, message, outputs]]),
#: with a client deadline far beyond any wait of the test's.
GATED = {
    "op": "predict_rows", "model": "mlp", "signature": "gated", "requests": [[1.0]],
    "timeout": 300,
}  # fmt: skip


def settles(sent: Future[Any], check: Callable[[], bool]) -> bool:
    """Whether `check` holds, waiting for it up to 180 s (a gRPC sidecar starts
    TensorFlow first), or less if `sent` has finished (failed) meanwhile."""
    return poll(lambda: sent.done() or check(), 180, 0.05) and check()


def running(server: Server, before: float) -> Callable[[], bool]:
    """Whether a batch has started since `serving_batches_total` was `before`."""
    return lambda: server.metric("serving_batches_total") - before == 1


def test_a_full_queue_is_503_or_resource_exhausted_and_deadlines_count_queueing(
    servers: ServerPool, tmp_path: Path
) -> None:
    """max_batch_size 1, max_enqueued_batches 1, one batch thread; on any CPU.

    The first request runs until the test opens the gate (the others are
    sent once its batch has started), so exactly one runs, one waits in the
    only batch allowed and the rest are refused, whatever the CPU's speed and
    the order of arrival; the gate opens only once the refusals are in. A
    deadline passes while queued behind the held request, however short or
    long it is.
    """
    gate = Gate(tmp_path / "gates")
    tight = spec("--enable_batching", "--batching_parameters_file=/models/tight.txt", gate=gate)
    with servers.private(tight) as server:
        before = server.metric("serving_batches_total")
        with ThreadPoolExecutor(5) as pool, gate.shut(OPEN):
            # The first runs (its batch has started) before the others are sent: else, on a
            # busy host, all five could arrive before the batch thread took the first
            # from the queue, and four would find it full.
            first = pool.submit(gated, server)
            started = settles(first, running(server, before))
            futures = [first, *(pool.submit(gated, server) for _ in range(4))]
            three_answered = lambda: sum(f.done() for f in futures) >= 3  # noqa: E731
            settled = poll(three_answered, 120, 0.05)
            gate.open(OPEN)
            answers = [future.result() for future in futures]
        statuses = [answer.status_code for answer in answers]
        assert started, (statuses, server.logs())
        assert settled, statuses
        assert sorted(statuses) == [200, 200, 503, 503, 503], statuses
        refused = [answer for answer in answers if answer.status_code == 503]
        for answer in refused:
            assert answer.json() == {"error": QUEUE_FULL}
            assert answer.headers["retry-after"] == "1"
        assert all(answer.json() == {"outputs": [2.0]} for answer in answers if
                   answer.status_code == 200)  # fmt: skip

        assert poll(server.idle, 60, 0.05), server.logs()
        labels = {
            "method": "Predict",
            "code": "RESOURCE_EXHAUSTED",
            "model": "mlp",
            "protocol": "v1",
        }
        exhausted = server.metric("serving_grpc_requests_total", **labels)
        before = server.metric("serving_batches_total")
        with ThreadPoolExecutor(2) as pool, gate.shut(OPEN):
            alone = pool.submit(server.grpc, GATED)  # running before the others, as above
            started = settles(alone, running(server, before))
            sent = pool.submit(server.grpc, {"op": "parallel", "ops": [GATED] * 4})
            three_refused = lambda: (  # noqa: E731
                server.metric("serving_grpc_requests_total", **labels) - exhausted >= 3
            )
            settled = settles(sent, three_refused)
            gate.open(OPEN)
            (ran,) = alone.result()
            (grpc,) = sent.result()
        codes = [result["answers"][0][0] for result in [ran, *grpc["results"]]]
        assert started, (codes, server.logs())
        assert settled, codes
        assert sorted(codes) == ["OK", "OK"] + ["RESOURCE_EXHAUSTED"] * 3, codes

        # A request whose deadline passes while it is queued is withdrawn: it never runs.
        assert poll(server.idle, 60, 0.05), server.logs()
        before = server.metric("serving_batches_total")
        ended = {
            code: server.metric("serving_grpc_requests_total", method="Predict", code=code,
                                model="mlp", protocol="v1")
            for code in ("DEADLINE_EXCEEDED", "CANCELLED")
        }  # fmt: skip
        with ThreadPoolExecutor(1) as pool, gate.shut(OPEN):
            held = pool.submit(server.grpc, GATED)
            assert settles(held, running(server, before)), server.logs()
            # Queued behind the held one, which runs until the gate opens: its
            # 2 s pass in the queue on any CPU (and leave it time to arrive).
            (late,) = server.grpc({**GATED, "timeout": 2})
            withdrawn = lambda: server.metric("serving_predict_in_flight") == 1  # noqa: E731
            assert poll(withdrawn, 60, 0.05), server.logs()  # its thread has left the queue
            gate.open(OPEN)
            (first_result,) = held.result()
        first, second = first_result["answers"][0], late["answers"][0]
        assert first[0] == "OK", first
        assert second[0] == "DEADLINE_EXCEEDED", second

        # The server answered it (it was not refused at the door by the client's deadline).
        # Polled: with several front-ends a scrape may carry the answering front-end's
        # counts of up to a second before (docs/serving.md, "One metrics page").
        def answered() -> float:
            return sum(
                server.metric("serving_grpc_requests_total", method="Predict", code=code,
                              model="mlp", protocol="v1") - ended[code]
                for code in ended
            )  # fmt: skip

        assert poll(lambda: answered() == 1, 10, 0.1), answered()
        assert poll(server.idle, 60, 0.05), server.logs()
        assert server.metric("serving_batches_total") - before == 1
        assert "Traceback" not in server.logs()


def draining(server: Server) -> Callable[[], bool]:
    return lambda: "received SIGTERM: draining" in server.logs()


def test_rest_timeout_counts_queueing_and_sigterm_drains_the_queue(
    servers: ServerPool, tmp_path: Path
) -> None:
    """A timeout counts the time queued; SIGTERM runs what is queued; on any CPU.

    The first request is gated: it holds the only batch thread until the
    test opens the gate, so the second is queued behind it for certain, its
    timeout passes there, and SIGTERM finds one running and one queued.
    """
    params = ["--enable_batching", "--batching_parameters_file=/models/tight.txt"]
    gate = Gate(tmp_path / "gates")
    with servers.private(spec(*params, "--request-timeout=0.4", gate=gate)) as server:
        before = server.metric("serving_batches_total")
        # The first runs until the gate opens (its client gets 504 at 0.4 s);
        # the second waits behind it and its 0.4 s pass in the queue: withdrawn.
        with ThreadPoolExecutor(1) as pool, gate.shut(OPEN):
            held = pool.submit(gated, server)
            assert settles(held, running(server, before)), server.logs()
            second = gated(server)
            first = held.result()
            assert (first.status_code, second.status_code) == (504, 504)
            assert "Request timed out after 0.4 s" in second.json()["error"]
            withdrawn = lambda: server.metric("serving_predict_in_flight") == 1  # noqa: E731
            assert poll(withdrawn, 60, 0.05), server.logs()  # only the held one is left
            gate.open(OPEN)
        assert poll(server.idle, 60, 0.05), server.logs()  # the first has finished in TensorFlow
        assert server.metric("serving_batches_total") - before == 1  # only the first ran

    with servers.private(spec(*params, "--grace-period=30", gate=gate)) as server:
        before = server.metric("serving_batches_total")
        with ThreadPoolExecutor(2) as pool, gate.shut(OPEN):
            first_sent = pool.submit(gated, server)
            assert settles(first_sent, running(server, before)), server.logs()
            second_sent = pool.submit(gated, server)
            in_flight = lambda: server.metric("serving_predict_in_flight") == 2  # noqa: E731
            assert poll(in_flight, 30, 0.02), server.logs()
            server.container.kill(signal="SIGTERM")
            assert poll(draining(server), 60, 0.05), server.logs()
            gate.open(OPEN)  # only now can the held request, then the queued one, run
            statuses = [(a.status_code, a.json()) for a in (first_sent.result(),
                                                            second_sent.result())]  # fmt: skip
        stopped = wait(server.container, 60)
    assert statuses == [(200, {"outputs": [2.0]})] * 2  # the queued one ran too
    assert stopped.exit_code == 0, stopped.stderr
    assert "received SIGTERM: draining" in stopped.stderr
    assert "Traceback" not in stopped.stderr

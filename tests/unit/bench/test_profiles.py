"""bench/profiles.py's reading of a py-spy speedscope profile (no Docker, no py-spy)."""

from __future__ import annotations

import math

from bench import profiles


def _frame(name: str, file: str) -> dict[str, object]:
    return {"name": name, "file": file, "line": 1}


def test_each_sample_goes_to_its_innermost_categorised_frame() -> None:
    site = "/opt/venv/lib/python3.11/site-packages"
    frames = [
        _frame("run", "/usr/lib/python3.11/asyncio/runners.py"),  # 0 event loop
        _frame("app", f"{site}/starlette/routing.py"),  # 1 routing
        _frame("loads", "/usr/lib/python3.11/json/decoder.py"),  # 2 JSON
        _frame("__call__", f"{site}/tensorflow/python/client/session.py"),  # 3 TF
        _frame("helper", "/somewhere/unknown.py"),  # 4 no category
        _frame("_bootstrap", "/usr/lib/python3.11/threading.py"),  # 5 threading
    ]
    speedscope = {
        "shared": {"frames": frames},
        "profiles": [
            {
                "name": 'Thread 1 "rest"',
                "samples": [[0], [0, 1], [0, 1, 2], [0, 1, 4]],
                "weights": [0.01, 0.01, 0.01, 0.01],
            },
            {"name": 'Thread 2 "inference_0"', "samples": [[5, 3]], "weights": [0.02]},
            {"name": 'Thread 3 "Thread-1 (_poll_wrapper)"', "samples": [[5]], "weights": [0.02]},
        ],
    }
    found = profiles.shares(speedscope)
    assert math.isclose(found["samples"], 0.08)
    categories = found["categories"]
    assert math.isclose(sum(categories.values()), 1.0, abs_tol=1e-3)
    assert categories["routing"] == 0.25  # [0, 1] and [0, 1, 4]: 4 has none, 1 is innermost
    assert categories["JSON decode/encode"] == 0.125
    assert categories["TensorFlow (the model call)"] == 0.25
    assert categories["gRPC C-core poller thread"] == 0.25
    assert categories["event loop (task steps, I/O, native code under it)"] == 0.125
    assert found["threads"] == {
        'Thread 1 "rest"': 0.04,
        'Thread 2 "inference_0"': 0.02,
        'Thread 3 "Thread-1 (_poll_wrapper)"': 0.02,
    }


def test_the_server_modules_have_their_categories() -> None:
    base = "/opt/venv/lib/python3.11/site-packages/tf_entrypoint/serving"
    assert profiles.category(_frame("f", f"{base}/rest/app.py")) == "REST transport"
    assert profiles.category(_frame("f", f"{base}/core/metrics.py")) == "metrics"
    assert profiles.category(_frame("f", f"{base}/codec/json_tensor.py")) == "JSON decode/encode"
    assert profiles.category(_frame("f", f"{base}/codec/tensor_proto.py")) == "tensor conversions"
    assert profiles.category(_frame("f", "/x/unknown.py")) is None

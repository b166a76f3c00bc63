"""compose.yaml's retrain step: a new version swapped in while clients keep asking, and back.

`docker compose --profile retrain run --rm retrain` exports version 2 (y = 0.5 x + 3)
next to the served version 1; the running `serve` takes it without failing a
request. Removing version 2 rolls back the same way. Runs after test_serving.py
(which expects version 1) and leaves version 1 serving.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pytest_docker.plugin import DockerComposeExecutor

from harness import web
from harness.docker import poll

V1 = [2.5, 3.0]  # y = 0.5 x + 2 for x = 1, 2
V2 = [3.5, 4.0]  # y = 0.5 x + 3


#: Answers that make steady load before the action and after the swap (a count:
#: a loaded machine answers fewer a second, and the checks need the answers).
STEADY = 40


def under_load(server_url: str, action: Callable[[], None], until: list[float]) -> list[object]:
    """Run `action` while 4 clients predict; return every answer until STEADY
    more have come after the first `until` (at most 180 s); readiness is probed
    meanwhile. The action starts once STEADY answers have come."""
    stop = threading.Event()
    lock = threading.Lock()
    answers: list[object] = []
    first_until: list[int] = []  # index of the first `until` in answers

    def client() -> None:
        with web.client(base_url=server_url, timeout=30, trust_env=False) as http:
            while not stop.is_set():
                response = http.post("/v1/models/model:predict", json={"instances": [1.0, 2.0]})
                body = response.json()
                with lock:
                    answers.append(body["predictions"] if response.status_code == 200 else body)
                    found = response.status_code == 200 and body["predictions"] == until
                    if found and not first_until:
                        first_until.append(len(answers) - 1)

    def probe() -> None:
        with web.client(base_url=server_url, timeout=30, trust_env=False) as http:
            while not stop.is_set():
                status = http.get("/readyz").status_code
                if status != 200:
                    with lock:
                        answers.append(f"/readyz {status}")
                time.sleep(0.1)

    def steady_after(start: Callable[[], int | None]) -> bool:
        with lock:
            index = start()
            return index is not None and len(answers) - index > STEADY

    threads = [threading.Thread(target=client) for _ in range(4)]
    threads.append(threading.Thread(target=probe))
    for thread in threads:
        thread.start()
    try:
        poll(lambda: steady_after(lambda: 0), 180)
        action()
        poll(lambda: steady_after(lambda: first_until[0] if first_until else None), 180)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    return answers


def test_retrain_swaps_version_2_in_and_removing_it_rolls_back(
    compose: DockerComposeExecutor, server_url: str
) -> None:
    def retrain() -> None:
        compose.execute("--profile retrain run --rm retrain")

    answers = under_load(server_url, retrain, until=V2)
    assert answers, "no request was answered"
    assert [a for a in answers if a not in (V1, V2)] == []  # no error, no /readyz 503
    assert answers[-1] == V2
    assert answers.count(V1) > 0
    with web.client(base_url=server_url, timeout=30, trust_env=False) as http:
        states = {
            v["version"]: v["state"]
            for v in http.get("/v1/models/model").json()["model_version_status"]
        }
        assert states == {"2": "AVAILABLE", "1": "END"}

    def roll_back() -> None:
        compose.execute("--profile retrain run --rm retrain rm -r /models/model/2")

    answers = under_load(server_url, roll_back, until=V1)
    assert [a for a in answers if a not in (V1, V2)] == []
    assert answers[-1] == V1
    with web.client(base_url=server_url, timeout=30, trust_env=False) as http:
        states = {
            v["version"]: v["state"]
            for v in http.get("/v1/models/model").json()["model_version_status"]
        }
        assert states == {"2": "END", "1": "AVAILABLE"}

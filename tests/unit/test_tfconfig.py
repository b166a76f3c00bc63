"""tf_entrypoint.tfconfig: what TensorFlow and Kubeflow write passes, mistakes are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.problems import Problem
from tf_entrypoint.tfconfig import (
    EXPECTED_TF_CONFIG,
    TF_CONFIG,
    TfConfigProblem,
    check_tf_config,
    tf_config_notices,
)

REPO = Path(__file__).resolve().parents[2]


def reasons(raw: str) -> list[str]:
    problems = check_tf_config(raw)
    for problem in problems:
        assert problem.variable == TF_CONFIG
        assert problem.value == raw
        assert problem.expected == EXPECTED_TF_CONFIG
    return [problem.reason for problem in problems]


def config(cluster: object, task: object, **extra: object) -> str:
    return json.dumps({"cluster": cluster, "task": task, **extra})


TWO_WORKERS = {"worker": ["w0:2222", "w1:2222"]}

# --- accepted --------------------------------------------------------------------

ACCEPTED = {
    "unset-like empty": "",
    "blank": "  \t\n",
    "empty object: a local run": "{}",
    "empty cluster: a local run": '{"cluster": {}}',
    "worker 0 of 2": config(TWO_WORKERS, {"type": "worker", "index": 0}),
    "worker 1 of 2": config(TWO_WORKERS, {"type": "worker", "index": 1}),
    # What Kubeflow's training operator writes for a TFJob with Chief, Worker and PS.
    "kubeflow tfjob": config(
        {
            "chief": ["mnist-chief-0.default.svc:2222"],
            "ps": ["mnist-ps-0.default.svc:2222"],
            "worker": ["mnist-worker-0.default.svc:2222", "mnist-worker-1.default.svc:2222"],
        },
        {"type": "ps", "index": 0},
        environment="cloud",
    ),
    "chief": config({"chief": ["c:2222"], "worker": ["w:2222"]}, {"type": "chief", "index": 0}),
    "evaluator outside the cluster (TensorFlow allows it)": config(
        TWO_WORKERS, {"type": "evaluator", "index": 0}
    ),
    "evaluator without any cluster": '{"task": {"type": "evaluator", "index": 0}}',
    "evaluator inside the cluster": config(
        {"worker": ["w:1"], "evaluator": ["e:1"]}, {"type": "evaluator", "index": 0}
    ),
    "index as a numeric string (TensorFlow int()s it)": config(
        TWO_WORKERS, {"type": "worker", "index": "1"}
    ),
    "index as an integral float (int(1.0) == 1)": config(
        TWO_WORKERS, {"type": "worker", "index": 1.0}
    ),
    "sparse job (ClusterSpec's dict form)": config(
        {"worker": {"1": "w1:2222", "3": "w3:2222"}}, {"type": "worker", "index": 3}
    ),
    "rpc_layer": config(TWO_WORKERS, {"type": "worker", "index": 0}, rpc_layer="grpc"),
    "rpc_layer null": config(TWO_WORKERS, {"type": "worker", "index": 0}, rpc_layer=None),
    "unknown keys pass through": config(
        TWO_WORKERS, {"type": "worker", "index": 0, "trial": "7"}, model_dir="/tmp/m"
    ),
    "ipv4, ipv6, port 0 and a Borg name": config(
        {"worker": ["10.0.0.1:2222", "[::1]:2222", "localhost:0", "/bns/cell/job/0"]},
        {"type": "worker", "index": 3},
    ),
    "any job name TensorFlow can parse": config(
        {"trainer_2": ["t:1"]}, {"type": "trainer_2", "index": 0}
    ),
    "whitespace around the JSON": "\n " + config(TWO_WORKERS, {"type": "worker", "index": 0}),
}


@pytest.mark.parametrize("raw", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted(raw: str) -> None:
    assert check_tf_config(raw) == ()


# --- rejected: each with the reason a user reads ----------------------------------

REJECTED = {
    "not json": ("worker", ["not valid JSON: Expecting value at line 1, column 1"]),
    "python dict, not json": (
        "{'cluster': {}}",
        ["not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2"],
    ),
    "top-level list": ("[1, 2]", ["the top level is a JSON list, not a JSON object"]),
    "top-level string": ('"x"', ["the top level is the string 'x', not a JSON object"]),
    "top-level null": ("null", ["the top level is null, not a JSON object"]),
    "duplicate key": (
        '{"cluster": {"worker": ["a:1"]}, "cluster": {"worker": ["a:1"]}, '
        '"task": {"type": "worker", "index": 0}}',
        [
            "the key 'cluster' appears more than once in one JSON object "
            "(TensorFlow would silently keep the last one)"
        ],
    ),
    "cluster is a list": (
        config(["a:1"], {"type": "worker", "index": 0}),
        [
            "cluster is a JSON list; it must be an object from job name to a list of "
            "'host:port' addresses",
            "task.type 'worker' is not a job of cluster "
            "(jobs: none: the cluster is missing or empty)",
        ],
    ),
    "cluster null": (
        config(None, {"type": "evaluator", "index": 0}),
        ["cluster is null; it must be an object from job name to a list of 'host:port' addresses"],
    ),
    "index out of range": (
        config(TWO_WORKERS, {"type": "worker", "index": 2}),
        ["task.index 2 is out of range: cluster.worker has 2 entries"],
    ),
    "index out of range of one": (
        config({"worker": ["w:1"]}, {"type": "worker", "index": 3}),
        ["task.index 3 is out of range: cluster.worker has 1 entry"],
    ),
    "index missing from a sparse job": (
        config({"worker": {"0": "a:1", "2": "b:1"}}, {"type": "worker", "index": 1}),
        ["task.index 1 is not a task of cluster.worker (its task indexes: 0, 2)"],
    ),
    "type not in cluster": (
        config(TWO_WORKERS, {"type": "wroker", "index": 0}),
        ["task.type 'wroker' is not a job of cluster (jobs: 'worker')"],
    ),
    "a worker with no cluster trains alone": (
        '{"task": {"type": "worker", "index": 1}}',
        [
            "task.type 'worker' is not a job of cluster "
            "(jobs: none: the cluster is missing or empty)"
        ],
    ),
    "misspelt cluster key": (
        '{"clsuter": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
        [
            "task.type 'worker' is not a job of cluster "
            "(jobs: none: the cluster is missing or empty)"
        ],
    ),
    "cluster without task": (
        json.dumps({"cluster": TWO_WORKERS}),
        [
            "task is missing; with a cluster every process needs its own task, such as "
            '{"type": "worker", "index": 0}'
        ],
    ),
    "task not an object": (
        config(TWO_WORKERS, "worker:0"),
        [
            "task is the string 'worker:0'; it must be an object such as "
            '{"type": "worker", "index": 0}'
        ],
    ),
    "task without type and index": (
        config(TWO_WORKERS, {}),
        [
            "task.type is missing; it names this process's job (jobs: 'worker')",
            "task.index is missing; it is this process's position in its job, from 0",
        ],
    ),
    "type not a string": (
        config(TWO_WORKERS, {"type": 0, "index": 0}),
        ["task.type is the number 0; it must be a job name (jobs: 'worker')"],
    ),
    "index negative": (
        config(TWO_WORKERS, {"type": "worker", "index": -1}),
        ["task.index -1 is negative"],
    ),
    "index negative string": (
        config(TWO_WORKERS, {"type": "worker", "index": "-1"}),
        ["task.index '-1' is negative"],
    ),
    "index fractional (TensorFlow would truncate it)": (
        config(TWO_WORKERS, {"type": "worker", "index": 1.5}),
        ["task.index 1.5 is not a whole number"],
    ),
    "index boolean": (
        config(TWO_WORKERS, {"type": "worker", "index": True}),
        ["task.index is true (a boolean); it must be a whole number from 0"],
    ),
    "index null": (
        config(TWO_WORKERS, {"type": "worker", "index": None}),
        ["task.index is null; it must be a whole number from 0"],
    ),
    "index text": (
        config(TWO_WORKERS, {"type": "worker", "index": "one"}),
        ["task.index 'one' is not a whole number written with digits 0-9"],
    ),
    "index with spaces": (
        config(TWO_WORKERS, {"type": "worker", "index": " 1"}),
        ["task.index ' 1' is not a whole number written with digits 0-9"],
    ),
    "index NaN": (
        '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": NaN}}',
        ["task.index nan is not a number"],
    ),
    "huge index string": (
        config(TWO_WORKERS, {"type": "worker", "index": "9" * 5000}),
        ["task.index 1000000000000000000 is out of range: cluster.worker has 2 entries"],
    ),
    "two chiefs": (
        config({"chief": ["a:1", "b:1"], "worker": ["c:1"]}, {"type": "worker", "index": 0}),
        ["cluster.chief has 2 tasks; TensorFlow allows at most one chief"],
    ),
    "two evaluators": (
        config({"evaluator": ["a:1", "b:1"], "worker": ["c:1"]}, {"type": "worker", "index": 0}),
        ["cluster.evaluator has 2 tasks; TensorFlow allows at most one evaluator"],
    ),
    "job not a list": (
        config({"worker": "a:1,b:1"}, {"type": "worker", "index": 0}),
        [
            "cluster.worker is the string 'a:1,b:1'; it must be a list of 'host:port' "
            "addresses (or an object from task index to address)"
        ],
    ),
    "job name TensorFlow cannot parse": (
        config({"my-worker": ["a:1"]}, {"type": "my-worker", "index": 0}),
        [
            "cluster job name 'my-worker' is not a TensorFlow job name "
            "(a letter, then letters, digits or '_')"
        ],
    ),
    "sparse key not a number": (
        config({"worker": {"first": "a:1"}}, {"type": "worker", "index": 0}),
        [
            "cluster.worker has the key 'first', not a task index (digits 0-9)",
        ],
    ),
    "sparse index twice": (
        config({"worker": {"1": "a:1", "01": "b:1"}}, {"type": "worker", "index": 1}),
        ["cluster.worker gives task 1 twice: keys '1' and '01'"],
    ),
    "addresses": (
        config(
            {"worker": ["a", "a:http", "a:70000", ":2222", "http://a:1", "a :1", "", 7]},
            {"type": "worker", "index": 0},
        ),
        [
            "cluster.worker[0] 'a' has no ':port'",
            "cluster.worker[1] 'a:http' has the port 'http', not a number from 0 to 65535",
            "cluster.worker[2] 'a:70000' has the port '70000', not a number from 0 to 65535",
            "cluster.worker[3] ':2222' has no host before ':'",
            "cluster.worker[4] 'http://a:1' has a '/' in its host; write host:port, not a URL",
            "cluster.worker[5] 'a :1' contains whitespace",
            "cluster.worker[6] is empty; an address is 'host:port'",
            "cluster.worker[7] is the number 7; an address is a string such as 'host:2222'",
        ],
    ),
    "rpc_layer not a string": (
        config(TWO_WORKERS, {"type": "worker", "index": 0}, rpc_layer=1),
        ["rpc_layer is the number 1; it must be a string such as 'grpc'"],
    ),
    "deeply nested": ("[" * 100_000, ["not valid JSON: nested too deeply"]),
    "integer too long for int()": (
        '{"x": ' + "1" * 5000 + "}",
        [
            "cannot be read as JSON: Exceeds the limit (4300 digits) for integer string "
            "conversion: value has 5000 digits; use sys.set_int_max_str_digits() to "
            "increase the limit"
        ],
    ),
}


@pytest.mark.parametrize(("raw", "expected"), REJECTED.values(), ids=REJECTED.keys())
def test_rejected(raw: str, expected: list[str]) -> None:
    assert reasons(raw) == expected


def test_message_names_variable_value_and_form() -> None:
    raw = config(TWO_WORKERS, {"type": "worker", "index": 3})
    (problem,) = check_tf_config(raw)
    assert isinstance(problem, Problem)
    assert str(problem) == (
        f"TF_CONFIG={raw!r} is invalid (task.index 3 is out of range: cluster.worker has 2 "
        f"entries): expected {EXPECTED_TF_CONFIG}"
    )


def test_long_values_are_abbreviated_in_messages_only() -> None:
    workers = [f"trainer-worker-{i}.team.svc.cluster.local:2222" for i in range(100)]
    raw = config({"worker": workers}, {"type": "worker", "index": 100})
    (problem,) = check_tf_config(raw)
    assert isinstance(problem, TfConfigProblem)
    assert problem.value == raw  # the whole value stays available (explain --json)
    message = str(problem)
    assert len(message) < 600
    assert f"... ({len(raw)} characters) is invalid" in message
    assert "task.index 100 is out of range: cluster.worker has 100 entries" in message


def test_every_problem_at_once() -> None:
    raw = config({"worker": ["a:1", "b"]}, {"type": "worker", "index": 5}, rpc_layer=[])
    assert len(check_tf_config(raw)) == 3


# --- notices ----------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", " ", "\n"])
def test_blank_is_unchecked_but_noticed(raw: str) -> None:
    assert check_tf_config(raw) == ()
    (notice,) = tf_config_notices(raw)
    assert notice.variable == TF_CONFIG
    assert "unset it, or set '{}' for a single-worker run" in notice.message


def test_jobs_the_strategies_refuse_are_noticed() -> None:
    raw = config({"master": ["m:1"], "worker": ["w:1"]}, {"type": "master", "index": 0})
    assert check_tf_config(raw) == ()
    (notice,) = tf_config_notices(raw)
    assert notice.message.startswith(
        "cluster job 'master' is not one of chief, worker, ps, evaluator: "
        "TensorFlow's multi-worker strategies refuse other jobs"
    )
    (notice,) = tf_config_notices(ACCEPTED["any job name TensorFlow can parse"])
    assert notice.message.startswith("cluster job 'trainer_2' is not one of")
    raw = config({"a": ["m:1"], "b": ["w:1"]}, {"type": "a", "index": 0})
    (notice,) = tf_config_notices(raw)
    assert notice.message.startswith("cluster jobs 'a', 'b' are not one of")


#: Accepted values that get no notice: neither blank nor with a job the strategies refuse.
QUIET = {
    name: raw
    for name, raw in ACCEPTED.items()
    if raw.strip() and name != "any job name TensorFlow can parse"
}


@pytest.mark.parametrize("raw", [None, "x", "[" * 10_000, "[]", '{"cluster": 1}', *QUIET.values()])
def test_no_notice_otherwise(raw: str | None) -> None:
    assert tf_config_notices(raw) == ()


# --- properties -------------------------------------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["worker", "chief", "evaluator", "ps", "a:1", "w0:2222", "0", "1", "-1"]),
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(["cluster", "task", "type", "index", "worker", "chief", "0"]),
                st.text(max_size=6),
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=20,
)
addresses = st.one_of(
    st.sampled_from(["w0:2222", "10.1.2.3:1", "[::1]:2222", "/bns/x"]),
    st.from_regex(r"[a-z][a-z0-9.-]{0,10}:[0-9]{1,4}", fullmatch=True),
)


@given(
    st.one_of(
        st.text(), st.text(alphabet='{}[]":,0123456789 tfnrueal-.'), json_values.map(json.dumps)
    )
)
def test_any_string_gives_problems_and_never_raises(raw: str) -> None:
    assert all(n.variable == TF_CONFIG for n in tf_config_notices(raw))
    problems = check_tf_config(raw)
    assert all(isinstance(p, Problem) and p.value == raw and p.reason for p in problems)
    assert all(str(p).startswith("TF_CONFIG=") for p in problems)


@given(
    jobs=st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
            lambda name: name not in ("chief", "evaluator")
        ),
        st.lists(addresses, min_size=1, max_size=5),
        min_size=1,
        max_size=4,
    ),
    data=st.data(),
)
def test_every_task_of_a_valid_cluster_is_accepted(
    jobs: dict[str, list[str]], data: st.DataObject
) -> None:
    job = data.draw(st.sampled_from(sorted(jobs)))
    index = data.draw(st.integers(0, len(jobs[job]) - 1))
    raw = config(jobs, {"type": job, "index": index})
    assert check_tf_config(raw) == ()
    # ... and the next index is exactly one problem: out of range.
    (reason,) = reasons(config(jobs, {"type": job, "index": len(jobs[job])}))
    assert reason.startswith(f"task.index {len(jobs[job])} is out of range")

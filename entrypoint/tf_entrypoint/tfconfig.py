"""TF_CONFIG checked before the command starts, as TensorFlow will read it; never changed.

TensorFlow reads it only when a strategy is created, often minutes into a
job, and reports mistakes as a bare ``JSONDecodeError`` or a worker that
silently trains alone. :func:`check_tf_config` reports every mistake at once
and never raises; ``json`` is imported only when TF_CONFIG is set. README:
"Environment variables" (TF_CONFIG); docs/kubernetes.md (multi-worker training).

What is checked, and TensorFlow's source for each rule (TF 2.21,
``tensorflow/python/distribute``):

* JSON with an object at the top (``cluster_resolver/tfconfig_cluster_resolver.py``
  ``_load_tf_config``: ``json.loads``). A key repeated in one object is an
  error: ``json.loads`` silently keeps the last one.
* ``cluster``, when present, maps job names to the job's tasks
  (``training/server_lib.py`` ``ClusterSpec``): a list of addresses, or an
  object from task index to address (sparse jobs; JSON keys are strings and
  TensorFlow converts them with ``int()``, so they must be digits here).
  Job names follow TensorFlow's device names (``core/util/device_name_utils.cc``:
  a letter, then letters, digits or ``_``); ``/job:my-worker`` cannot be parsed.
  Job names are otherwise free: TFConfigClusterResolver accepts any; only
  the multi-worker strategies restrict them to chief, worker, ps and evaluator,
  so another name gets a warning (:func:`tf_config_notices`), not an error.
* Addresses are ``host:port`` (``core/distributed_runtime/rpc/grpc_channel.cc``
  ``ValidateHostPortPair``: the text after the last ``:`` is the port, the host
  has no ``/``; ``/bns/...`` names are accepted as they are). Here the port
  must also be 0-65535, and the host non-empty and free of whitespace.
* At most one chief and at most one evaluator (``multi_worker_util.py``
  ``_validate_cluster_spec``).
* With a non-empty cluster, ``task`` must give ``type`` and ``index``
  (``collective_all_reduce_strategy.py`` raises "When `cluster_spec` is given,
  you must also specify `task_type` and `task_id`"). ``task.type`` must be a
  job of the cluster, except ``evaluator``, which TensorFlow allows outside
  it (``_validate_cluster_spec``: "The only exception is `evaluator`").
  A task other than an evaluator with no cluster at all is an error here:
  TensorFlow would ignore the task and train alone, on one machine.
* ``task.index``: TensorFlow takes ``int(task['index'])``, so a numeric string
  (``"1"``) and an integral float (``1.0``) work and are accepted; ``1.5``
  (which ``int()`` would silently turn into 1), ``true``, negative numbers
  and other text are errors. The index must be in range for a list job, and
  an existing index for a sparse job.
* ``rpc_layer``, when present and not null, is a string (it becomes the URL
  scheme ``rpc_layer://host:port``). ``environment``, ``session_master`` and
  other keys are passed through unchecked.

Unset, empty or blank TF_CONFIG is "not distributed" and is not checked, like
every other variable. TensorFlow itself fails on an empty one
(``json.loads('')``); :func:`tf_config_notices` says so without stopping the
command, which may not be TensorFlow at all.
"""

from __future__ import annotations

from tf_entrypoint.common import digits_value, is_blank, is_digits
from tf_entrypoint.frozen import frozen
from tf_entrypoint.problems import Notice, Problem

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs start-up time
    from collections.abc import Callable
    from typing import TypeAlias

    #: Each job's task indexes, in order; None for a job whose tasks are unusable.
    _Jobs: TypeAlias = dict[str, list[int] | None]

TF_CONFIG = "TF_CONFIG"

EXPECTED_TF_CONFIG = (
    'a JSON object such as {"cluster": {"worker": ["host0:2222", "host1:2222"]}, '
    '"task": {"type": "worker", "index": 0}} (unset = not distributed)'
)

#: The jobs TensorFlow's multi-worker strategies accept (multi_worker_util._validate_cluster_spec).
_STRATEGY_JOBS = ("chief", "worker", "ps", "evaluator")
#: Task types TensorFlow allows at most one of (multi_worker_util._validate_cluster_spec).
_SINGLE_TASK_JOBS = ("chief", "evaluator")
#: The task type that need not be a job of the cluster.
_EVALUATOR = "evaluator"
_MAX_PORT = 65535
#: Values longer than this are abbreviated in messages (Problem.value keeps all of it).
_SHOWN_VALUE_CHARS = 200
#: Parts of the value quoted inside a reason are cut to this many characters.
_SHOWN_PART_CHARS = 60
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_JOB_NAME_CHARS = _ASCII_LETTERS | frozenset("0123456789_")


@frozen
class TfConfigProblem(Problem):
    """A Problem whose message abbreviates a long TF_CONFIG (``value`` keeps all of it).

    A TFJob with many workers gives a TF_CONFIG of several kilobytes; quoting
    it whole in every message would bury the reason.
    """

    def __str__(self) -> str:
        shown = repr(self.value)
        if len(self.value) > _SHOWN_VALUE_CHARS:
            shown = f"{self.value[:_SHOWN_VALUE_CHARS]!r}... ({len(self.value)} characters)"
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.variable}={shown} is invalid{why}: expected {self.expected}"


def check_tf_config(raw: str) -> tuple[Problem, ...]:
    """Every problem with a TF_CONFIG value; () when it is fine, unset-like or blank."""
    if is_blank(raw):
        return ()
    reasons: list[str] = []
    try:
        _check(raw, reasons.append)
    except Exception as err:  # noqa: BLE001 - a bug here must not hide behind a traceback
        reasons.append(f"could not be checked ({type(err).__name__}); please report this")
    return tuple(TfConfigProblem(TF_CONFIG, raw, EXPECTED_TF_CONFIG, r) for r in reasons)


def tf_config_notices(raw: str | None) -> tuple[Notice, ...]:
    """Warnings that do not stop the command (it may not be TensorFlow at all).

    * Set but blank: TensorFlow cannot read it (``json.loads('')``).
    * Jobs other than chief, worker, ps and evaluator: TensorFlow's multi-worker
      strategies refuse them ("Disallowed task type found in cluster spec"),
      though a program of your own may use them.
    """
    if raw is None:
        return ()
    if is_blank(raw):
        return (
            Notice(
                TF_CONFIG,
                "the value is empty; TensorFlow's MultiWorkerMirroredStrategy cannot read an "
                "empty TF_CONFIG (JSONDecodeError): unset it, or set '{}' for a single-worker run",
            ),
        )
    import json  # noqa: PLC0415 - only when TF_CONFIG is set

    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return ()  # check_tf_config reports it
    cluster = data.get("cluster") if isinstance(data, dict) else None
    if not isinstance(cluster, dict):
        return ()
    other = [name for name in cluster if name not in _STRATEGY_JOBS]
    if not other:
        return ()
    return (
        Notice(
            TF_CONFIG,
            f"cluster job{'s' if len(other) > 1 else ''} {', '.join(_shown(n) for n in other)} "
            f"{'are' if len(other) > 1 else 'is'} not one of {', '.join(_STRATEGY_JOBS)}: "
            "TensorFlow's multi-worker strategies refuse other jobs "
            "(Kubeflow's Master replica type is the chief's old name)",
        ),
    )


# --- the checks ------------------------------------------------------------------


def _check(raw: str, problem: Callable[[str], None]) -> None:
    data = _load(raw, problem)
    if data is _UNREADABLE:
        return
    if not isinstance(data, dict):
        problem(f"the top level is {_json_type(data)}, not a JSON object")
        return
    jobs = _check_cluster(data, problem)
    _check_task(data, jobs, problem)
    rpc_layer = data.get("rpc_layer")
    if rpc_layer is not None and not isinstance(rpc_layer, str):
        problem(f"rpc_layer is {_json_type(rpc_layer)}; it must be a string such as 'grpc'")


#: What _load returns for a value that is not JSON (JSON's own null is None).
_UNREADABLE = object()


def _load(raw: str, problem: Callable[[str], None]) -> object:
    """The parsed JSON, or _UNREADABLE after reporting why it cannot be read."""
    import json  # noqa: PLC0415 - only when TF_CONFIG is set

    duplicates: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for key, value in items:
            if key in seen and key not in duplicates:
                duplicates.append(key)
            seen[key] = value
        return seen

    try:
        data: object = json.loads(raw, object_pairs_hook=pairs)
    except json.JSONDecodeError as err:
        problem(f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}")
        return _UNREADABLE
    except RecursionError:
        problem("not valid JSON: nested too deeply")
        return _UNREADABLE
    except ValueError as err:  # e.g. an integer with more than 4300 digits
        problem(f"cannot be read as JSON: {err}")
        return _UNREADABLE
    for key in duplicates:
        problem(
            f"the key {_shown(key)} appears more than once in one JSON object "
            "(TensorFlow would silently keep the last one)"
        )
    return data


def _check_cluster(data: dict[str, object], problem: Callable[[str], None]) -> _Jobs:
    """Check ``cluster``; return each job's task indexes (empty when there is no cluster)."""
    if "cluster" not in data:
        return {}
    cluster = data["cluster"]
    if not isinstance(cluster, dict):
        problem(
            f"cluster is {_json_type(cluster)}; it must be an object from job name to a list "
            "of 'host:port' addresses"
        )
        return {}
    jobs: _Jobs = {}
    for name, tasks in cluster.items():
        if not _is_job_name(name):
            problem(
                f"cluster job name {_shown(name)} is not a TensorFlow job name "
                "(a letter, then letters, digits or '_')"
            )
        jobs[name] = _check_job(name, tasks, problem)
    for name in _SINGLE_TASK_JOBS:
        indexes = jobs.get(name)
        if indexes is not None and len(indexes) > 1:
            count = len(indexes)
            problem(f"cluster.{name} has {count} tasks; TensorFlow allows at most one {name}")
    return jobs


def _check_job(name: str, tasks: object, problem: Callable[[str], None]) -> list[int] | None:
    where = _job(name)
    if isinstance(tasks, list):
        for index, address in enumerate(tasks):
            _check_address(f"{where}[{index}]", address, problem)
        return list(range(len(tasks)))
    if isinstance(tasks, dict):
        indexes: dict[int, str] = {}
        usable = True  # every key is a task index: the task's index can be looked up
        for key, address in tasks.items():
            text = str(key)
            if not is_digits(text):
                problem(f"{where} has the key {_shown(text)}, not a task index (digits 0-9)")
                usable = False
                continue
            index = digits_value(text)
            if index in indexes:
                problem(f"{where} gives task {index} twice: keys {indexes[index]!r} and {text!r}")
                usable = False
                continue
            indexes[index] = text
            _check_address(f"{where}[{text!r}]", address, problem)
        return sorted(indexes) if usable else None
    problem(
        f"{where} is {_json_type(tasks)}; it must be a list of 'host:port' addresses "
        "(or an object from task index to address)"
    )
    return None


def _check_address(where: str, address: object, problem: Callable[[str], None]) -> None:
    if not isinstance(address, str):
        problem(f"{where} is {_json_type(address)}; an address is a string such as 'host:2222'")
        return
    if address.startswith("/bns/"):  # TensorFlow accepts Borg names as they are
        return
    shown = _shown(address)
    if not address:
        problem(f"{where} is empty; an address is 'host:port'")
        return
    if any(c.isspace() for c in address):
        problem(f"{where} {shown} contains whitespace")
        return
    host, colon, port = address.rpartition(":")
    if not colon:
        problem(f"{where} {shown} has no ':port'")
    elif not host:
        problem(f"{where} {shown} has no host before ':'")
    elif "/" in host:
        problem(f"{where} {shown} has a '/' in its host; write host:port, not a URL")
    elif not is_digits(port) or digits_value(port) > _MAX_PORT:
        problem(f"{where} {shown} has the port {_shown(port)}, not a number from 0 to {_MAX_PORT}")


def _check_task(data: dict[str, object], jobs: _Jobs, problem: Callable[[str], None]) -> None:
    if "task" not in data:
        if jobs:
            problem(
                "task is missing; with a cluster every process needs its own task, such as "
                '{"type": "worker", "index": 0}'
            )
        return
    task = data["task"]
    if not isinstance(task, dict):
        problem(
            f'task is {_json_type(task)}; it must be an object such as {{"type": "worker", '
            '"index": 0}'
        )
        return
    task_type = _check_task_type(task, jobs, problem)
    index = _check_task_index(task, problem)
    if task_type is None or index is None:
        return
    indexes = jobs.get(task_type)
    if indexes is None:  # no such job (reported above), an evaluator outside it, or a bad job
        return
    where = _job(task_type)
    if indexes == list(range(len(indexes))):
        if index >= len(indexes):
            count = f"{len(indexes)} {'entry' if len(indexes) == 1 else 'entries'}"
            problem(f"task.index {index} is out of range: {where} has {count}")
    elif index not in indexes:
        listed = ", ".join(str(i) for i in indexes[:10]) + (", ..." if len(indexes) > 10 else "")
        problem(f"task.index {index} is not a task of {where} (its task indexes: {listed})")


def _check_task_type(
    task: dict[str, object], jobs: _Jobs, problem: Callable[[str], None]
) -> str | None:
    """The task type when it names a job of the cluster (or a lone evaluator), else None."""
    known = ", ".join(_shown(name) for name in jobs) or "none: the cluster is missing or empty"
    if "type" not in task:
        problem(f"task.type is missing; it names this process's job (jobs: {known})")
        return None
    task_type = task["type"]
    if not isinstance(task_type, str):
        problem(f"task.type is {_json_type(task_type)}; it must be a job name (jobs: {known})")
        return None
    if task_type in jobs:
        return task_type
    if task_type == _EVALUATOR:  # TensorFlow lets the evaluator run outside the cluster
        return None
    problem(f"task.type {_shown(task_type)} is not a job of cluster (jobs: {known})")
    return None


def _check_task_index(task: dict[str, object], problem: Callable[[str], None]) -> int | None:
    """task.index as TensorFlow's int() would read it, when that is sound; else None."""
    if "index" not in task:
        problem("task.index is missing; it is this process's position in its job, from 0")
        return None
    value = _index_value(task["index"])
    if isinstance(value, str):
        problem(value)
        return None
    return value


def _index_value(index: object) -> int | str:
    """The task index, or why it is not one."""
    if isinstance(index, bool) or not isinstance(index, (int, float, str)):
        return f"task.index is {_json_type(index)}; it must be a whole number from 0"
    if isinstance(index, str):
        return _index_text_value(index)
    if isinstance(index, float):
        if index != index or index in (float("inf"), float("-inf")):  # noqa: PLR0124 - NaN
            return f"task.index {index!r} is not a number"
        if not index.is_integer():
            return f"task.index {index!r} is not a whole number"
        index = int(index)
    return f"task.index {index} is negative" if index < 0 else index


def _index_text_value(index: str) -> int | str:
    """A task index given as a string ("1": TensorFlow's int() reads it), or why not."""
    if index.startswith("-") and is_digits(index[1:]):
        return f"task.index {_shown(index)} is negative"
    if not is_digits(index):
        return f"task.index {_shown(index)} is not a whole number written with digits 0-9"
    return digits_value(index)


# --- helpers -----------------------------------------------------------------------


def _is_job_name(name: str) -> bool:
    return bool(name) and name[0] in _ASCII_LETTERS and all(c in _JOB_NAME_CHARS for c in name)


def _job(name: str) -> str:
    """Where a job is in TF_CONFIG: cluster.worker, or cluster['my-job'] when needed."""
    return f"cluster.{name}" if _is_job_name(name) else f"cluster[{_shown(name)}]"


def _shown(text: str) -> str:
    """repr() of a part of the value, cut to a readable length."""
    if len(text) > _SHOWN_PART_CHARS:
        return f"{text[:_SHOWN_PART_CHARS]!r}..."
    return repr(text)


def _json_type(value: object) -> str:
    """What a parsed JSON value is, for a message: 'the number 5', 'a JSON list'."""
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, (int, float)):
        shown = repr(value)
        return f"the number {shown if len(shown) <= 20 else shown[:20] + '...'}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    kinds = {list: "a JSON list", dict: "a JSON object", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)

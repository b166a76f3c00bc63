"""Server-side batching beside the servable (--enable_batching): predicts of
batchable signatures go through the core's batch queue (core/batching.py);
their rows are joined into one run and the outputs split back per request.

A request runs alone when the signature has no free batch dimension, when
its inputs disagree on the row count (or one is a scalar), or when it has more
rows than max_batch_size. Requests are batched only with requests whose
inputs agree in every dimension but the first and that ask for the same
outputs. Calls that run alone (those, classify, regress, MultiInference) run
at most num_batch_threads at once: with batching on, request threads are
many (--max-queue).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tf_entrypoint.serving.core.batching import (
    Batcher,
    BatchHooks,
    BatchingParameters,
)
from tf_entrypoint.serving.core.deadlines import acquire_before_deadline
from tf_entrypoint.serving.core.types import Signature
from tf_entrypoint.serving.model.bundle import Output
from tf_entrypoint.serving.model.servable import Runner


def _batchable(signature: Signature) -> bool:
    """Whether every input and output has a free leading (batch) dimension."""
    specs = (*signature.inputs.values(), *signature.outputs.values())
    return bool(signature.inputs) and all(
        spec.shape is not None and len(spec.shape) >= 1 and spec.shape[0] == -1 for spec in specs
    )


def _rows(arguments: Mapping[str, Any]) -> int | None:
    """The rows every input has (its first dimension), or None when they disagree."""
    counts = {int(value.shape[0]) if len(value.shape) else -1 for value in arguments.values()}
    if len(counts) != 1:
        return None
    (rows,) = counts
    return rows if rows >= 1 else None


class _Request(NamedTuple):
    """What the batch queue carries for one predict: its inputs and the outputs it asks for."""

    arrays: Mapping[str, Any]
    outputs: tuple[str, ...]


#: Runs a signature: (inputs by alias, output aliases) -> outputs by alias.
_Run = Callable[[Mapping[str, Any], Sequence[str]], dict[str, Output]]


class _Unsplittable(Exception):
    """A batch's output has not one row per input row: run the requests alone."""


def _run_batch(run: _Run, payloads: Sequence[_Request], padded: int) -> list[dict[str, Output]]:
    """One call for every request: inputs concatenated, outputs split back by row count.

    The requests of a batch share their key: the same inputs, trailing
    dimensions, dtypes and outputs asked for.
    """
    counts = [len(next(iter(payload.arrays.values()))) for payload in payloads]
    merged = {}
    for key in payloads[0].arrays:
        parts = [payload.arrays[key] for payload in payloads]
        if padded:  # as TensorFlow's batching: copies of the first row
            parts.append(np.repeat(parts[0][:1], padded, axis=0))
        merged[key] = np.concatenate(parts, axis=0)
    outputs = run(merged, payloads[0].outputs)
    total = sum(counts) + padded
    answers: list[dict[str, Output]] = [{} for _ in payloads]
    for alias, value in outputs.items():
        if len(value.shape) == 0 or int(value.shape[0]) != total:
            raise _Unsplittable(alias)
        array, dtype = value.numpy(), value.dtype
        start = 0
        for answer, count in zip(answers, counts, strict=True):
            answer[alias] = Output(array[start : start + count], dtype)
            start += count
    return answers


class Queued:
    """A predict in the batch queue (core/servable.py's Pending)."""

    __slots__ = ("cancel",)

    def __init__(self, cancel: Callable[[], bool]) -> None:
        self.cancel = cancel


class Batching:
    """A :class:`~tf_entrypoint.serving.model.servable.Runner` that puts the
    batchable calls of `direct` through a batch queue per signature."""

    def __init__(
        self,
        direct: Runner,
        signatures: Mapping[str, Signature],
        parameters: BatchingParameters,
        hooks: BatchHooks,
        *,
        version: int,
    ) -> None:
        self._direct = direct
        self._signatures = signatures
        self._parameters: BatchingParameters | None = parameters
        self._hooks = hooks
        self._version = version
        self._batchers: dict[str, Batcher[_Request, dict[str, Output]]] = {}
        self._lock = threading.Lock()
        self._alone = threading.BoundedSemaphore(parameters.num_batch_threads)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Around a call that runs alone: at most num_batch_threads such calls run
        at once; one whose deadline passes while it waits for its turn is withdrawn."""
        alone = self._alone
        acquire_before_deadline(alone)
        try:
            yield
        finally:
            alone.release()

    def run(
        self, name: str, arrays: Mapping[str, Any], outputs: tuple[str, ...], batch: bool
    ) -> dict[str, Output]:
        parameters = self._parameters
        rows = _rows(arrays)
        batcher = None
        if (
            batch
            and parameters is not None
            and rows is not None
            and rows <= parameters.max_batch_size
        ):
            batcher = self._batcher(name, parameters)
        if batcher is None:
            if not batch:  # the servable holds alone() around it already
                return self._direct.run(name, arrays, outputs, False)
            with self.alone():
                return self._direct.run(name, arrays, outputs, False)
        key = (outputs, tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in arrays.items())))
        return batcher.submit(key, rows or 0, _Request(arrays, outputs))

    def submit(
        self,
        name: str,
        arrays: Mapping[str, Any],
        outputs: tuple[str, ...],
        *,
        deadline: float | None,
        expired: str,
        on_done: Callable[[dict[str, Output] | None, BaseException | None], None],
    ) -> Queued | None:
        """Queue a batchable predict without waiting (for a caller on an event
        loop); `on_done(outputs, error)` is called on the batch thread. None when
        it cannot go through the queue (run it with :meth:`run`, on a thread)."""
        parameters = self._parameters
        rows = _rows(arrays)
        if parameters is None or rows is None or rows > parameters.max_batch_size:
            return None
        batcher = self._batcher(name, parameters)
        if batcher is None:
            return None
        key = (outputs, tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in arrays.items())))
        task = batcher.submit_async(
            key,
            rows,
            _Request(arrays, outputs),
            deadline=deadline,
            expired=expired,
            on_done=lambda task: on_done(task.result, task.error),
        )
        return Queued(lambda: batcher.withdraw(task))

    def _batcher(
        self, name: str, parameters: BatchingParameters
    ) -> Batcher[_Request, dict[str, Output]] | None:
        signature = self._signatures.get(name)
        if signature is None or not _batchable(signature):
            return None
        with self._lock:
            batcher = self._batchers.get(name)
            if batcher is None and self._parameters is not None:
                direct = self._direct

                def run(arrays: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Output]:
                    return direct.run(name, arrays, tuple(outputs), False)

                batcher = Batcher(
                    parameters,
                    lambda payloads, padded: _run_batch(run, payloads, padded),
                    lambda payload: run(payload.arrays, payload.outputs),
                    self._hooks,
                    name=f"batch-v{self._version}",
                )
                self._batchers[name] = batcher
            return batcher

    def close(self) -> None:
        """Stop the batch threads."""
        with self._lock:
            batchers, self._batchers, self._parameters = list(self._batchers.values()), {}, None
        for batcher in batchers:
            batcher.close()
        self._direct.close()

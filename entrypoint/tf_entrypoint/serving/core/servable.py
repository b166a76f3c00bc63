"""The backend's protocol: a loaded version of a model, with one ``run()``.

The core (``core/inference.py``) checks a request against the signature and
calls :meth:`Servable.run`; the TensorFlow backend (``model/``) implements it,
the unit tests a pure-Python model. The manager (``manager.py``) loads
versions with a :data:`Loader` and serves what it returns. Tensors in and out are the core's
:class:`~tf_entrypoint.serving.core.types.Tensor` (dtype name, shape, flat
values: a compact array the backend reads without a copy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tf_entrypoint.serving.core.types import Signature, Tensor

#: One signature run: (its name, the inputs by alias, the output aliases to fetch).
Call = tuple[str, Mapping[str, Tensor], Sequence[str]]
#: Called once, on the backend's thread, with (the outputs, None) or (None, the error).
Done = Callable[[dict[str, Tensor] | None, BaseException | None], None]


class Pending(Protocol):
    """A predict queued for a batch (:meth:`Servable.start`)."""

    def cancel(self) -> bool:
        """Take it out of the queue unless it has started; whether it was."""
        ...


class Servable(Protocol):
    """One loaded version of a model."""

    @property
    def version(self) -> int: ...

    @property
    def signatures(self) -> Mapping[str, Signature]: ...

    @property
    def signature_texts(self) -> Mapping[str, str]:
        """Each SignatureDef's text (C++ DebugString), quoted by TF Serving's errors."""
        ...

    @property
    def signature_def_map(self) -> bytes:
        """The SavedModel's SignatureDefs as they are, a serialized
        tensorflow.serving.SignatureDefMap (GetModelMetadata's answer, metadata.py);
        b"": none, the metadata is written from `signatures`."""
        ...

    @property
    def warmup_records(self) -> int:
        """Warm-up requests replayed before it became available."""
        ...

    @property
    def method_name_check(self) -> bool:
        """TF Serving's --enable_signature_method_name_check, as it was loaded with."""
        ...

    def runs(self, name: str) -> bool:
        """Whether signature `name` can be run (it may be in `signatures` only)."""
        ...

    def run(
        self,
        name: str,
        inputs: Mapping[str, Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, Tensor]:
        """Run signature `name` on checked inputs; the outputs of `outputs` it has.

        `batch`: the call may go through server-side batching (a predict).
        Raises ServingError with TensorFlow's code and message for what the
        graph refuses.
        """
        ...

    def run_many(self, calls: Sequence[Call]) -> list[dict[str, Tensor]]:
        """Several signatures on one set of inputs (MultiInference), in one run
        where the backend can (TF Serving runs them in one Session::Run)."""
        ...

    def start(
        self,
        name: str,
        inputs: Mapping[str, Tensor],
        outputs: Sequence[str],
        *,
        deadline: float | None,
        expired: str,
        done: Done,
    ) -> Pending | None:
        """A predict through server-side batching, queued without waiting (for a
        caller on an event loop): `done` gets its outputs or its error (a
        ServingError, DEADLINE_EXCEEDED with `expired` once `deadline` passes
        while queued). None when batching is off or the call cannot be batched:
        then :meth:`run` it, on a thread."""
        ...


#: Loads one version directory (and warms it up).
Loader = Callable[[Path, int], Servable]


class Capture(Protocol):
    """One profiling session of the backend, started by :meth:`Profiler.start`."""

    def stop(self) -> bytes:
        """End it; what it recorded, a serialized `tensorflow.profiler.XSpace`."""
        ...


class Profiler(Protocol):
    """The backend's profiler, in this process (TF Serving's ProfilerService: grpc/profiler.py).

    Its methods block (TensorFlow's calls, files): the transport calls them on a thread.
    """

    def start(self, options: Mapping[str, int], scratch: str, seconds: float) -> Capture:
        """Start recording with TensorFlow's ProfileOptions `options` (tracer levels);
        ServingError ALREADY_EXISTS while another capture runs. `scratch`: a folder
        the capture may write under and removes ("": a temporary one). `seconds`: how
        long the caller means to record before it stops the capture (a backend in
        another process stops one left running well past it: ipc/profiler.py)."""
        ...

    def save(self, root: str, run: str, host: str, xspace: bytes) -> str:
        """Write `xspace` as TensorFlow's profiler service does (ROOT/RUN/HOST.xplane.pb,
        any file system TensorFlow writes to); its path."""
        ...

    def empty(self, xspace: bytes) -> bool:
        """Whether `xspace` recorded no event (the response's `empty_trace`)."""
        ...

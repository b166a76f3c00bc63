"""SavedModel loading as a Session bundle, as TF Serving loads it
(docs/tf-serving.md, "Loading SavedModels").

TF1 and TF2 exports alike: ``tf.compat.v1.saved_model.loader.load`` into a
fresh graph and Session, tag "serve", assets rewired to the export's own
copies, the init op run. A call feeds its inputs and fetches its outputs by
tensor name, as TF Serving's Session::Run does, through a Session callable
made once per signature and set of outputs. Shapes are the graph's business:
what it accepts is answered, what it refuses gets TensorFlow's own error and
code.

Keras 3 exports, whose graph leaves the model's variables unset once
restored in a Session, have them set from the restored copies their graph
names; an export that leaves a used variable unset with no such copy is
loaded with ``tf.saved_model.load`` instead (:func:`open_saved_model`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tf_entrypoint.server_flags import (
    DEFAULT_MAX_GRAPH_BYTES,
    ENV_SAVED_MODEL_LOADER,
    SAVED_MODEL_LOADERS,
)
from tf_entrypoint.serving.core.types import Signature
from tf_entrypoint.serving.model.signatures import (
    SERVE_TAG,
    read_meta_graph,
    read_saved_model,
    without_graph,
)

log = logging.getLogger("tf_entrypoint.serving")

#: The loaders (SERVE_SAVED_MODEL_LOADER, read and checked at start by config).
LOADER_VARIABLE = ENV_SAVED_MODEL_LOADER
LOADERS = SAVED_MODEL_LOADERS
#: Session callables kept per version: one per signature and set of outputs
#: asked for (gRPC's output_filter picks subsets); the least recently used
#: beyond this are released.
MAX_CALLABLES = 64
#: A callable's first runs time it both ways, TRIAL_RUNS through TensorFlow's
#: inter-op pool (its tf_Compute threads) and TRIAL_RUNS in the calling thread
#: (RunOptions.inter_op_thread_pool = -1: no hand-off to another thread and
#: back); it runs in the calling thread from then on when that was no slower
#: (median wall time). docs/tf-serving.md, "How a version is loaded".
TRIAL_RUNS = 8
#: Python packages whose import registers ops TF Serving's own binary links in
#: (its model_servers/BUILD), with the recipe that adds each to an image:
#: imported only when a graph needs an op TensorFlow does not have, so that
#: other models never pay for them. The images leave them out (TF Text is
#: 194 MB installed).
OP_LIBRARIES = {"tensorflow_text": "docs/own-image/Dockerfile.tf-text"}
#: The OP_LIBRARIES that imported (None: not tried yet).
_op_libraries: list[str] | None = None
_op_libraries_lock = threading.Lock()


def _missing_op(err: BaseException) -> bool:
    """Whether a load failed on an op TensorFlow has not registered."""
    return "Op type not registered" in str(err)


def register_op_libraries() -> list[str]:
    """Import OP_LIBRARIES (once per process); the ones that imported."""
    global _op_libraries  # noqa: PLW0603 - once per process
    with _op_libraries_lock:
        if _op_libraries is None:
            _op_libraries = []
            for name, recipe in OP_LIBRARIES.items():
                try:
                    importlib.import_module(name)
                except ImportError as err:
                    log.warning(
                        "%s could not be imported (%s): graphs that use its ops do not load; "
                        "add it to the image (%s)",
                        name,
                        err,
                        recipe,
                    )
                else:
                    _op_libraries.append(name)
        return list(_op_libraries)


def _session_bundle(directory: Path, limit: int) -> SessionBundle:
    """A Session bundle; a graph that names an op TensorFlow lacks is tried once
    more after OP_LIBRARIES registered theirs (TF Text's, as TF Serving has)."""
    try:
        return SessionBundle(directory, read_saved_model(directory, limit))
    except Exception as err:
        if not _missing_op(err) or _op_libraries is not None or not register_op_libraries():
            raise
    log.info("%s needs ops TensorFlow does not have: imported %s for them",
             directory, ", ".join(_op_libraries or ()))  # fmt: skip
    return SessionBundle(directory, read_saved_model(directory, limit))


def _load_into(session: Any, directory: Path, saved_model: Any) -> Any:
    """``tf.compat.v1.saved_model.loader.load`` on a SavedModel parsed already
    (read_saved_model); the "serve" MetaGraphDef without its GraphDef.

    TensorFlow's own ``load`` reads and parses the file twice (the
    SavedModelLoader's copy, and a second one kept through the import only to
    count a metric) from the whole file's bytes: three copies of the graph
    besides the ones the import makes. Here its steps run on the one parsed
    copy, which the caller drops once the graph is imported.
    """
    from tensorflow.python.saved_model import loader_impl, path_helpers  # noqa: PLC0415

    class Parsed(loader_impl.SavedModelLoader):  # type: ignore[misc]
        def __init__(self) -> None:  # not the base's: it parses the file
            self._export_dir = str(directory)
            self._variables_path = path_helpers.get_variables_path(str(directory))
            self._saved_model = saved_model

    loader, tags = Parsed(), [SERVE_TAG]
    with session.graph.as_default():
        saver, _ = loader.load_graph(session.graph, tags)
        loader.restore_variables(session, saver)
        loader.run_init_ops(session, tags)
    return without_graph(loader.get_meta_graph_def_from_tags(tags))


class Output:
    """One output tensor: a NumPy array and the graph tensor's TensorFlow dtype
    (what :func:`_from_tf` and :func:`_as_proto_field` read)."""

    __slots__ = ("_array", "dtype")

    def __init__(self, array: Any, dtype: Any) -> None:
        self._array = array
        self.dtype = dtype

    @property
    def shape(self) -> tuple[int, ...]:
        shape: tuple[int, ...] = self._array.shape
        return shape

    def numpy(self) -> Any:
        return self._array


def quiet() -> contextlib.AbstractContextManager[Any]:
    """TensorFlow's deprecation warnings off around TF1 APIs that are what TF
    Serving runs (its loader, the record reader), not code to migrate: the
    server's log would otherwise tell its user to use tf.saved_model.load."""
    from tensorflow.python.util import deprecation  # noqa: PLC0415

    silence = getattr(deprecation, "silence", None)
    return silence() if silence is not None else contextlib.nullcontext()


class SessionBundle:
    """A SavedModel loaded as TF Serving loads it: a graph in its own Session.

    ``tf.compat.v1.saved_model.loader.load``'s steps (:func:`_load_into`, on
    `saved_model` as read_saved_model parsed it) do what TF Serving's C++
    LoadSavedModel does: imports the "serve" MetaGraph into a fresh graph,
    restores the variables through the MetaGraph's saver, and runs the init op
    (main_op, legacy_init_op, or TF2's __saved_model_init_op) with the asset
    tensors fed the export's own asset files. The Session is made without a
    config, so TensorFlow gives it the eager context's: the thread counts and
    GPU options the entrypoint's hook set; every Session of the process shares
    TensorFlow's global pools (the inter-op pool, the intra-op pool of the CPU
    device), so a version adds no threads.
    """

    def __init__(self, directory: Path, saved_model: Any) -> None:
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph)
        try:
            with quiet():
                #: The "serve" MetaGraphDef, without its GraphDef (the graph is TensorFlow's).
                self.meta_graph = _load_into(self._session, directory, saved_model)
        except BaseException:
            self._session.close()
            raise
        self._lock = threading.Lock()
        #: (feed names, fetch names) -> the Session callable, most recently used last.
        self._callables: OrderedDict[tuple[tuple[str, ...], tuple[str, ...]], SessionCallable] = (
            OrderedDict()
        )

    def runs(self, name: str) -> bool:
        return name in self.meta_graph.signature_def

    def run(
        self,
        name: str,
        signature: Signature,
        feeds: Mapping[str, Any],
        outputs: Sequence[str],
    ) -> dict[str, Output]:
        """Feed `feeds` (alias -> array) by tensor name and fetch `outputs` (aliases)."""
        fetched = self.run_tensors(
            {signature.inputs[alias].tensor_name: array for alias, array in feeds.items()},
            [signature.outputs[alias].tensor_name for alias in outputs],
        )
        return dict(zip(outputs, fetched, strict=True))

    def run_tensors(self, feeds: Mapping[str, Any], fetches: Sequence[str]) -> list[Output]:
        """One Session run: `feeds` (graph tensor name -> array) in, the graph
        tensors `fetches` out, in their order."""
        feed_names = tuple(sorted(feeds))
        made = self._callable(feed_names, tuple(fetches))
        args = [feeds[name] for name in feed_names]
        run = made.chosen
        values = run(*args) if run is not None else made.trial(args)
        # As ndarrays: a Session gives NumPy scalars, and bytes for a string scalar,
        # where the tensor has rank 0.
        return [
            Output(np.asarray(value, dtype=object) if text else np.asarray(value), dtype)
            for value, dtype, text in zip(values, made.dtypes, made.texts, strict=True)
        ]

    def _callable(self, feeds: tuple[str, ...], fetches: tuple[str, ...]) -> SessionCallable:
        """The Session callable for these feeds and fetches, made on first use.

        A callable (Session::MakeCallable) is pruned and compiled once; a call
        is one Session::RunCallable with the arrays, with no graph lookup and
        no per-call check in Python: shapes and dtypes are checked by
        TensorFlow as they are in TF Serving's Session::Run.
        """
        key = (feeds, fetches)
        made = self._callables.get(key)
        if made is not None:
            # Most recently used now (each is one C call under the GIL; one evicted
            # meanwhile is still used for this run, then released).
            with contextlib.suppress(KeyError):
                self._callables.move_to_end(key)
            return made
        dtypes = [self._graph.get_tensor_by_name(fetch).dtype for fetch in fetches]
        fresh = SessionCallable(self._session, feeds, fetches, dtypes)
        with self._lock:
            made = self._callables.setdefault(key, fresh)
            self._callables.move_to_end(key)
            while len(self._callables) > MAX_CALLABLES:
                self._callables.popitem(last=False)
        return made

    def unset_variables(self) -> list[str]:
        """Resource variables that restoring and the init op left unset, and that
        something other than their own ops, another variable's initializer or
        the saver uses (a function call: a signature). Keras 3's model.export
        leaves the model's original variables in the graph, unset and unused:
        those do not count."""
        handles = [op for op in self._graph.get_operations() if op.type == "VarHandleOp"]
        if not handles:
            return []
        with self._graph.as_default():
            checks = [tf.raw_ops.VarIsInitializedOp(resource=op.outputs[0]) for op in handles]
        done = self._session.run(checks)
        return sorted(
            op.name for op, ok in zip(handles, done, strict=True) if not ok and self._used(op)
        )

    def _used(self, handle: Any) -> bool:
        saver = self.meta_graph.saver_def
        saver_ops = {saver.restore_op_name, saver.save_tensor_name.partition(":")[0]}
        for user in handle.outputs[0].consumers():
            if (
                user.name.startswith(handle.name + "/")
                or user.name in saver_ops
                or user.type in ("VarIsInitializedOp", "DestroyResourceOp")  # ours, here
            ):
                continue
            if user.type == "ReadVariableOp" and all(
                reader.type == "AssignVariableOp" for reader in user.outputs[0].consumers()
            ):
                continue  # read only to initialize another variable
            return True
        return False

    def set_from_restored_copies(self, unset: Sequence[str]) -> list[str]:
        """Give each of `unset` the value of the restored variable its graph copied it
        into; the variables still unset afterwards (all is well when none).

        Keras 3's exports (keras-team/keras#20095) keep the model's own
        variables V, which the signatures read, and variables C that the
        checkpoint restores, each made from one V: the graph says so, C's
        initializer is AssignVariableOp(C, ReadVariableOp(V)). So V := C
        after the restore gives V the saved value, as tf.saved_model.load's
        binding of the signatures to the restored objects does. A C that
        nothing but its own ops and the saver uses is then destroyed: V holds
        the same tensor, so the weights are not kept twice.
        """
        graph, wanted = self._graph, set(unset)
        copies: dict[str, Any] = {}
        for op in graph.get_operations():
            if op.type != "AssignVariableOp" or len(op.inputs) != 2:
                continue
            target, value = op.inputs[0].op, op.inputs[1].op
            if (
                target.type == "VarHandleOp"
                and target.name not in wanted
                and value.type == "ReadVariableOp"
                and value.inputs[0].op.type == "VarHandleOp"
                and value.inputs[0].op.name in wanted
            ):
                copies.setdefault(value.inputs[0].op.name, target)
        if set(copies) != wanted:
            return sorted(wanted - set(copies))
        with graph.as_default():
            sets = [
                tf.raw_ops.AssignVariableOp(
                    resource=graph.get_operation_by_name(name).outputs[0],
                    value=tf.raw_ops.ReadVariableOp(
                        resource=copy.outputs[0], dtype=copy.get_attr("dtype")
                    ),
                )
                for name, copy in sorted(copies.items())
            ]
            unused = [
                tf.raw_ops.DestroyResourceOp(resource=copy.outputs[0], ignore_lookup_error=True)
                for copy in copies.values()
                if not self._used(copy)
            ]
        self._session.run(sets)
        if unused:
            self._session.run(unused)
        return [name for name in self.unset_variables() if name in wanted]

    def close(self) -> None:
        """Close the Session; the graph and its memory go with the last reference."""
        with self._lock:
            self._callables.clear()
        self._session.close()


class SessionCallable:
    """One Session callable (feeds and fetches), and where its runs run.

    Its first 2 x TRIAL_RUNS runs alternate between TensorFlow's inter-op
    pool and the calling thread, timed; then :attr:`chosen` is the faster.
    For a small graph the hand-off to a tf_Compute thread and back is most of
    a run (measured in the image, wall time and the process's CPU time per
    run: half_plus_two 46 and 69 us through the pool, 10 and 10 us in the
    calling thread; a 3-layer MLP 70 and 121 us, 39 and 39 us); a graph whose
    independent ops the pool runs side by side keeps the pool, since it was
    faster there. Concurrent runs still run side by side either way, each in
    its own request's thread.
    """

    def __init__(self, session: Any, feeds: tuple[str, ...], fetches: tuple[str, ...],
                 dtypes: list[Any]) -> None:  # fmt: skip
        self._session, self._feeds, self._fetches = session, feeds, fetches
        self.dtypes = dtypes
        #: Which fetches are strings (a Session gives bytes for a string scalar).
        self.texts = [dtype == tf.string for dtype in dtypes]
        self.pooled = self._make(inline=False)
        self.inline: Any = None  # made at the first trial run that needs it
        #: The callable every run uses once the trial is over (None during it).
        self.chosen: Any = None
        #: Whether that is the calling thread's (None during the trial).
        self.in_calling_thread: bool | None = None
        #: Wall times (s) of the trial's runs: through the pool, in the calling thread.
        self.times: tuple[list[float], list[float]] = ([], [])
        self._lock = threading.Lock()

    def _make(self, *, inline: bool) -> Any:
        from tensorflow.core.protobuf import config_pb2  # noqa: PLC0415

        options = config_pb2.CallableOptions(feed=self._feeds, fetch=self._fetches)
        if inline:
            options.run_options.inter_op_thread_pool = -1  # the calling thread
        # BaseSession._make_callable_from_options: Session::MakeCallable (the public
        # make_callable with feeds runs Session.run, its lookups and checks, per call).
        return self._session._make_callable_from_options(options)

    def trial(self, args: Sequence[Any]) -> Any:
        """One run during the trial, the way with fewer timed runs so far (the
        chosen way if the trial ended meanwhile)."""
        with self._lock:
            turn = None
            if self.chosen is not None:
                run = self.chosen
            else:
                turn = int(len(self.times[1]) < len(self.times[0]))  # 1: the calling thread
                if turn and self.inline is None:
                    self.inline = self._make(inline=True)
                run = (self.pooled, self.inline)[turn]
        if turn is None:
            return run(*args)
        start = time.perf_counter()
        values = run(*args)  # a run that fails (a bad input) is not timed
        took = time.perf_counter() - start
        with self._lock:
            if self.chosen is None:
                self.times[turn].append(took)
                if min(len(self.times[0]), len(self.times[1])) >= TRIAL_RUNS:
                    self._choose()
        return values

    def _choose(self) -> None:
        pooled, inline = self.times
        here = runs_inline(pooled, inline)
        self.chosen = self.inline if here else self.pooled
        self.in_calling_thread = here
        self.pooled = self.inline = None  # the other's handle is released with it
        log.debug(
            "a Session callable (%d feed(s), %d fetch(es)) runs %s: median %.0f us through "
            "the inter-op pool, %.0f us in the calling thread",
            len(self._feeds), len(self._fetches),
            "in the calling thread" if here else "through the inter-op pool",
            statistics.median(pooled) * 1e6, statistics.median(inline) * 1e6,
        )  # fmt: skip


def runs_inline(pooled: Sequence[float], inline: Sequence[float]) -> bool:
    """Whether the calling thread was no slower than the pool (median wall times)."""
    return statistics.median(inline) <= statistics.median(pooled)


class FunctionBundle:
    """A SavedModel loaded with tf.saved_model.load: its signature functions
    (TF2's loader, which restores variables through the object graph)."""

    def __init__(self, directory: Path) -> None:
        loaded = tf.saved_model.load(str(directory), tags=[SERVE_TAG])
        self._loaded: Any = loaded  # keeps the functions' variables alive
        self._functions: dict[str, Any] = dict(loaded.signatures)

    def names(self) -> set[str]:
        return set(self._functions)

    def runs(self, name: str) -> bool:
        return name in self._functions

    def run(
        self,
        name: str,
        signature: Signature,
        feeds: Mapping[str, Any],
        outputs: Sequence[str],
    ) -> dict[str, Output]:
        results = self._functions[name](**{k: tf.constant(v) for k, v in feeds.items()})
        if not isinstance(results, Mapping):
            results = {"output_0": results}
        return {
            alias: Output(results[alias].numpy(), results[alias].dtype)
            for alias in outputs
            if alias in results
        }

    def close(self) -> None:
        self._functions, self._loaded = {}, None


Bundle = SessionBundle | FunctionBundle


def open_saved_model(
    directory: Path, loader: str = LOADERS[0], max_graph_bytes: int = DEFAULT_MAX_GRAPH_BYTES
) -> tuple[Bundle, Any]:
    """Load a SavedModel as TF Serving does; (the bundle, its 'serve' MetaGraphDef).

    Keras 3 (TensorFlow 2.16 and later) writes exports whose graph a Session
    cannot restore as it stands: keras-team/keras#20095, #20096,
    tensorflow/serving#2250, any Keras 3 model with variables saved with
    tf.saved_model.save or model.export. The signatures read the model's own
    variables, the checkpoint restores copies of them, so once restored the
    former are unset, and TF Serving answers every call with
    FAILED_PRECONDITION "Could not find variable ...". Here such variables are
    set from the copies their graph made of them
    (:meth:`SessionBundle.set_from_restored_copies`), and the export is
    served as a Session bundle; one whose unset variables have no such copy
    is loaded with tf.saved_model.load instead, which binds the signatures to
    the restored variables through the object graph, with a warning. `loader`
    "tf2" (SERVE_SAVED_MODEL_LOADER) loads every export that way.

    The graph file is checked against `max_graph_bytes` (--max-graph-bytes)
    before it is read, and read once (signatures.read_saved_model).
    """
    if loader not in LOADERS:
        raise ValueError(f"{LOADER_VARIABLE}={loader!r}: expected one of {', '.join(LOADERS)}")
    if loader == "tf2":
        graph = read_meta_graph(directory, max_graph_bytes)
        return FunctionBundle(directory), graph
    bundle = _session_bundle(directory, max_graph_bytes)
    graph = bundle.meta_graph
    if not graph.object_graph_def.nodes:  # a TF1 export: served as TF Serving serves it
        return bundle, graph
    unset = bundle.unset_variables()
    if not unset:
        return bundle, graph
    left = bundle.set_from_restored_copies(unset)
    if not left:
        log.info(
            "%s: %d variable(s) that restoring its graph leaves unset (a Keras 3 export, "
            "keras-team/keras#20095; TF Serving would answer FAILED_PRECONDITION 'Could not "
            "find variable') were set from the copies the checkpoint restores",
            directory,
            len(unset),
        )
        return bundle, graph
    bundle.close()
    shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    log.warning(
        "%s: restoring its graph leaves variable(s) %s unset, and the graph holds no copy "
        "of them to set them from (TF Serving would answer every call FAILED_PRECONDITION "
        "'Could not find variable'): loaded with tf.saved_model.load instead",
        directory,
        shown,
    )
    return FunctionBundle(directory), graph

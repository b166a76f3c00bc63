"""The control side of the served models: the one thread that loads, swaps, unloads, reloads.

:class:`Manager` (the request side is :class:`~.models.Models`, its base)
changes the served models on one thread (:meth:`Manager.run`): it reads each
model's directory (``repository.py``), asks the version policy which
versions it wants (the "aspired" versions, ``model_specs.py``), loads new
ones off the request path (warm-up included), publishes a loaded version
atomically, and only then retires versions the policy no longer wants;
ReloadConfigRequests (:meth:`Manager.submit`) and config file changes too."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping

from tf_entrypoint.serving.core import repository
from tf_entrypoint.serving.core.errors import Code, ConfigError, ServingError
from tf_entrypoint.serving.core.model_specs import (
    ServingConfig,
    Specific,
    aspired_versions,
    describe_policy,
)
from tf_entrypoint.serving.core.models import (
    Events,
    Model,
    Models,
    Version,
    warn_unavailable_labels,
)
from tf_entrypoint.serving.core.object_store import ObjectStores
from tf_entrypoint.serving.core.servable import Loader, Servable
from tf_entrypoint.serving.core.sources import Sources
from tf_entrypoint.serving.core.submission import NO_RETRIES, LoadRetries, Submission
from tf_entrypoint.serving.core.types import END, LOADING, UNLOADING

log = logging.getLogger("tf_entrypoint.serving")

#: Versions in END kept per model for the status API (older ones are forgotten).
END_HISTORY = 20
#: Longest the control thread sleeps before it looks at its stop event again.
_WAKE_EVERY = 0.25

#: A version's answer to GET .../metadata, encoded once when it loads (the codec's,
#: given by the composition root): (model, version, servable) -> the bytes sent.
Describe = Callable[[str, int, Servable], bytes]


class Manager(Models):
    """The served models (a :class:`Models`) and the thread that changes them."""

    def __init__(
        self,
        loader: Loader,
        events: Events,
        describe: Describe,
        *,
        retries: LoadRetries = NO_RETRIES,
        stores: ObjectStores | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(events)
        #: Where versions are read: local directories, object stores (s3://, gs://).
        self._sources = Sources(stores)
        self._loader = loader
        self._describe = describe
        self._retries = retries
        self._clock = clock
        #: The configuration applied last.
        self.config: ServingConfig | None = None
        #: Configurations sent by HandleReloadConfigRequest, for the control thread.
        self._submitted: list[Submission] = []
        #: Why no configuration will be applied any more (the thread has ended), or None.
        self._closed: str | None = None
        self._wake = threading.Event()

    # ------------------------------------------------------------------
    # The control side: one thread

    def apply(self, config: ServingConfig, *, initial: bool = False) -> None:
        """Serve `config`'s models: add new ones, update changed ones, retire removed ones."""
        finished: list[Version] = []
        notes: list[str] = []
        with self._lock:
            old = self._models
            models: dict[str, Model] = {}
            for spec in config.models:
                model = old.get(spec.name)
                if model is None:
                    model = Model(spec, counts_for_readiness=initial)
                    if not initial:
                        notes.append(f"model {spec.name!r} added ({describe_policy(spec.policy)})")
                elif model.spec != spec:
                    notes.append(
                        f"model {spec.name!r} reconfigured ({describe_policy(spec.policy)})"
                    )
                    model.spec = spec
                models[spec.name] = model
            retired: list[tuple[Model, Version]] = []
            for name, model in old.items():
                if name not in models:
                    notes.append(f"model {name!r} removed from the configuration: unloading it")
                    for version in model.serving:
                        retired.append((model, version))
                        if self._begin_unload(model, version):
                            finished.append(version)
            self._models = models
            self.config = config
            self._bump()
        for note in notes:  # logging is I/O: never under the lock requests take
            log.info("%s", note)
        for model, version in retired:
            self._log_unloading(model, version)
        for version in finished:
            self._finish_unload(version)

    def sync(
        self, stop: Callable[[], bool] = lambda: False, *, retries_only: bool = False
    ) -> list[str]:
        """Bring every model in line with its directory and policy; the load errors
        (final ones: a load that will be retried is none yet).

        `retries_only`: only retry the failed loads that are due (no new versions).

        An OSError that escapes a model's sync (the model store failing in a
        way the repository functions do not absorb) is logged and that model
        is retried on the next poll: the control thread never dies from I/O.
        """
        errors: list[str] = []
        self._sources.keep_only(self.local_copies())
        for model in list(self._models.values()):
            if stop():
                break
            try:
                errors.extend(self._sync_model(model, stop, retries_only))
            except OSError as err:
                log.error(
                    "model %r: reading %s failed: %s; keeping what is loaded, retrying on the "
                    "next poll",
                    model.spec.name,
                    model.spec.base_path,
                    repository.describe(err),
                )
        if self._collect:
            self._collect = False
            gc.collect()  # a retired TensorFlow model's memory goes back now
        return errors

    def close(self) -> None:
        """Delete the local copies of versions from object storage (at exit)."""
        self._sources.close()

    def _sync_model(
        self, model: Model, stop: Callable[[], bool], retries_only: bool = False
    ) -> list[str]:
        spec = model.spec
        # Every look at the file system happens here, outside the lock: on
        # NFS or FUSE a listing or a stat can take seconds, and requests
        # (lease, check, status, readiness) must not wait for it.
        listing = self._sources.scan(spec.base_path)
        model.listed = frozenset() if listing is None else frozenset(listing.versions)
        if listing is None:
            if not model.warned_unlistable and not self._sources.logs_its_failures(spec.base_path):
                log.warning(
                    "cannot list %s (model %r): keeping what is loaded, retrying",
                    spec.base_path,
                    spec.name,
                )
                model.warned_unlistable = True
            return []
        model.warned_unlistable = False
        self._sources.warn_too_large(model, listing.too_large)
        aspired = aspired_versions(spec.policy, list(listing.versions))
        self._cancel_retries(model, aspired)
        errors: list[str] = []
        for version, unreadable in self._to_load(model, listing.versions, aspired, retries_only):
            if stop():
                return errors
            if unreadable is not None:
                error = self._unreadable(model, version, unreadable)
            else:
                error = self._load(model, version)
            if error:
                errors.append(error)
        self._retire(model, aspired)
        return errors

    def _to_load(
        self,
        model: Model,
        found: Mapping[int, repository.Found],
        aspired: frozenset[int],
        retries_only: bool = False,
    ) -> list[tuple[Version, OSError | None]]:
        """The aspired versions to load now (newest first), each with the error that
        keeps it from being read, if any; each is in the status (START) from here on.
        A failed load whose retry is due is tried again (the same Version)."""
        now = self._clock()
        with self._lock:
            # New versions, failed ones (retried when their files change), due retries.
            candidates = [
                number
                for number in aspired
                if (v := model.versions.get(number)) is None
                or v.state == END
                or (v.retry_at is not None and v.retry_at <= now)
                if not retries_only or (v is not None and v.retry_at is not None)
            ]
        # Their identities, taken before they load (a change during a load is a change).
        looked = {number: self._sources.identity(found[number].path) for number in candidates}
        todo: list[tuple[Version, OSError | None]] = []
        with self._lock:
            for number in sorted(aspired, reverse=True):  # the newest is available first
                current = model.versions.get(number)
                if current is not None and current.retry_at is not None and number in looked:
                    current.identity, current.retry_at = looked[number], None
                    todo.append((current, found[number].error))
                    continue
                if number not in looked or (current is not None and current.state != END):
                    continue  # loaded, or on its way (or it changed since the look)
                ident = looked[number]
                if current is not None and current.error and current.identity == ident:
                    continue  # the same files failed already
                version = Version(model.spec.name, number, found[number].path, ident)
                model.versions[number] = version
                todo.append((version, found[number].error))
        return todo

    def _cancel_retries(self, model: Model, aspired: frozenset[int]) -> None:
        """End the pending retries of versions no longer wanted (gone, or the policy changed),
        as TF Serving cancels the retries of a version it no longer aspires to."""
        with self._lock:
            cancelled = [
                v
                for v in model.versions.values()
                if v.retry_at is not None and v.number not in aspired
            ]
            for version in cancelled:
                version.state, version.retry_at = END, None
        for version in cancelled:
            log.info(
                "model %r version %d is no longer wanted: its load is not retried any more",
                model.spec.name,
                version.number,
            )

    def _retire(self, model: Model, aspired: frozenset[int]) -> None:
        """Unload the versions the policy no longer wants, once a wanted one serves."""
        retired: list[Version] = []
        finished: list[Version] = []
        with self._lock:
            # Availability first: retire versions only once a wanted one serves.
            if any(v.number in aspired for v in model.serving):
                for version in model.serving:
                    if version.number not in aspired:
                        retired.append(version)
                        if self._begin_unload(model, version):
                            finished.append(version)
        for version in retired:
            self._log_unloading(model, version)
        for version in finished:
            self._finish_unload(version)
        with self._lock:
            self._forget_old(model)

    def _unreadable(self, model: Model, version: Version, err: OSError) -> str:
        """A version directory that cannot be read: reported as a failed load."""
        with self._lock:
            version.state = LOADING
        message = f"cannot read {version.path}: {repository.describe(err)}"
        return self._failed(model, version, message, repository.error_code(err), 0.0)

    def _failed(
        self, model: Model, version: Version, message: str, code: Code, seconds: float
    ) -> str:
        """Record a failed load in the status, the log and the metrics: END with the
        error once its retries are spent (returned), else LOADING until its retry ("")."""
        name = model.spec.name
        retries = self._retries
        final = version.attempts >= retries.retries
        with self._lock:
            version.error, version.code = message, code
            if final:
                version.state = END
            else:
                version.attempts += 1
                version.retry_at = self._clock() + retries.interval
            serving = [v.number for v in model.serving]
        self._events.version_load_failed(name, seconds)
        self._events.saved_model_loaded(version.path, False, seconds, None, 0)
        still = f"still serving version(s) {serving}" if serving else "no version is serving"
        if not final:
            log.error(
                "model %r: %s; %s; retry %d of %d in %g s (--max_num_load_retries, "
                "--load_retry_interval_micros)",
                name,
                message,
                still,
                version.attempts,
                retries.retries,
                retries.interval,
            )
            return ""
        spent = f"; {retries.retries} retries spent" if retries.retries else ""
        log.error("model %r: %s%s; %s; retried when the directory changes", name, message,
                  spent, still)  # fmt: skip
        return f"model {name!r}: {message}"

    def _load(self, model: Model, version: Version) -> str:
        name = model.spec.name
        with self._lock:
            version.state = LOADING
        log.info("loading model %r version %d from %s", name, version.number, version.path)
        started = time.monotonic()
        try:
            path, copy = self._sources.loadable(name, version.number, version.path)
            with self._lock:
                version.local = copy
            servable = self._loader(path, version.number)
            metadata = self._describe(name, version.number, servable)
        except Exception as err:
            seconds = time.monotonic() - started
            log.debug("loading %s failed", version.path, exc_info=True)
            message = f"loading {version.path} failed: {type(err).__name__}: {err}"
            code = Code.UNKNOWN
            if isinstance(err, ServingError):  # the loader's own code (a graph over the limit)
                code = err.code
                message = f"loading {version.path} failed: {err.message}"
            elif isinstance(err, OSError) and err.errno is not None:
                code = repository.error_code(err)
                message = f"loading {version.path} failed: {repository.describe(err)}"
            with self._lock:
                version.local = None  # its copy (if any) is deleted at the next sync
            return self._failed(model, version, message, code, seconds)
        seconds = time.monotonic() - started
        with self._lock:
            version.available(servable, metadata)
            model.serving = tuple(sorted((*model.serving, version), key=lambda v: v.number))
            model.counts_for_readiness = True
            self._bump()
            numbers = [v.number for v in model.serving]
        self._events.version_loaded(name, seconds, servable.warmup_records)
        # Time replaying TF Serving's warm-up file; None without one (optional:
        # only the TensorFlow servable measures it).
        warmup_seconds: float | None = getattr(servable, "warmup_seconds", None)
        self._events.saved_model_loaded(
            version.path,
            True,
            seconds - (warmup_seconds or 0.0),
            warmup_seconds,
            servable.warmup_records,
        )
        self._events.versions_available(name, numbers)
        log.info(
            "model %r version %d is available (loaded in %.2f s, %d warm-up record(s) "
            "replayed); serving %s; signatures: %s",
            name,
            version.number,
            seconds,
            servable.warmup_records,
            numbers,
            ", ".join(sorted(servable.signatures)),
        )
        return ""

    def _begin_unload(self, model: Model, version: Version) -> bool:
        """Retire `version` (lock held): no new requests; True when none is running."""
        version.state = UNLOADING
        model.serving = tuple(v for v in model.serving if v is not version)
        self._bump()
        self._events.versions_available(model.spec.name, [v.number for v in model.serving])
        return version.in_flight == 0

    @staticmethod
    def _log_unloading(model: Model, version: Version) -> None:
        log.info(
            "model %r version %d: unloading once the request(s) in flight finish",
            model.spec.name,
            version.number,
        )

    @staticmethod
    def _forget_old(model: Model) -> None:
        ended = sorted(
            (v for v in model.versions.values() if v.state == END), key=lambda v: v.number
        )
        for version in ended[:-END_HISTORY]:
            del model.versions[version.number]

    # ------------------------------------------------------------------
    # Start-up and the polling loop

    def _waiting_for(self, waited: float) -> tuple[list[str], bool]:
        """Why start-up is not done: (models with no version to load yet, each with
        why; whether a failed load will be retried). A model is done once any of
        its versions serves (TF Serving waits for ServableRequest::Latest)."""
        problems = []
        retrying = False
        for model in self._models.values():
            if model.serving:
                continue
            if any(v.retry_at is not None for v in model.versions.values()):
                retrying = True
                continue
            spec = model.spec
            # What the sync just before found: listing again here would double the
            # I/O of every start-up round (a LIST per poll for a store).
            found = model.listed
            if not found:
                why = self._sources.problem(spec.base_path)
                problems.append(
                    f"no version of model {spec.name!r} appeared in {spec.base_path} within "
                    f"{waited:g} s (expected {spec.base_path}/<version>/saved_model.pb"
                    + (f"; {why})" if why else ")")
                )
            elif isinstance(spec.policy, Specific):
                absent = [v for v in spec.policy.versions if v not in found]
                listed = ", ".join(str(v) for v in absent)
                problems.append(
                    f"{spec.origin}: model_version_policy.specific.versions: version(s) "
                    f"{listed} did not appear in {spec.base_path} within {waited:g} s "
                    f"(on disk: {', '.join(str(v) for v in sorted(found))})"
                )
        return problems, retrying

    def initial_load(
        self,
        wait: float | None,
        stop: Callable[[], bool],
        *,
        poll: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> str:
        """Load every model's wanted versions; '' once each model serves one, else the
        fatal reason.

        As TF Serving, start-up is done once every model serves a version (with
        a `specific` policy, any listed one), and a load that fails for good
        (its retries spent) is fatal. `wait`: seconds to wait for versions to
        appear before that is fatal (--wait-for-model); None waits for them as
        TF Serving does (readiness stays down meanwhile).
        """
        started = self._clock()
        told = False
        while True:
            errors = self.sync(stop)
            if errors:
                return errors[0]
            now = self._clock()
            waited = now - started
            missing, retrying = self._waiting_for(waited if wait is None else wait)
            if (not missing and not retrying) or stop():
                return ""
            if missing and wait is not None and waited >= wait:
                return missing[0]
            if missing and wait is None and not told:
                told = True
                log.info(
                    "waiting for a version to serve (not ready until one does; "
                    "--wait-for-model=SECONDS exits 1 instead): %s",
                    missing[0].replace(f" within {waited:g} s", " yet"),
                )
            pause = poll
            if wait is not None and missing:
                pause = min(pause, max(0.0, wait - waited))
            if retrying:
                pause = min(pause, max(0.0, self.next_retry() - now))
            sleep(pause)

    def run(
        self,
        *,
        wait: float | None,
        file_system_poll: float,
        config_poll: float,
        reload: Callable[[], ServingConfig] | None,
        stop: threading.Event,
        on_fatal: Callable[[str], None],
    ) -> None:
        """The manager thread: start-up, then poll directories and the config file.

        It also applies the configurations :meth:`submit` hands it, so every
        change to the served models happens on this one thread. I/O errors
        are retried on the next poll; anything else is a bug and ends the
        server (`on_fatal`, exit 1) rather than leave it serving models no
        one updates any more.
        """
        try:
            fatal = self.initial_load(wait, stop.is_set)
            if fatal:
                on_fatal(fatal)
                self._refuse_submitted(fatal)
                return
            warn_unavailable_labels(self._models.values())
            self._poll(file_system_poll, config_poll, reload, stop)
        except BaseException as err:  # a bug: the server must not go on without this thread
            log.critical("the model manager thread failed", exc_info=err)
            reason = f"the model manager thread failed: {type(err).__name__}: {err}"
            self._refuse_submitted(reason)
            on_fatal(reason)
            return
        self._refuse_submitted("the server is stopping")

    def _poll(
        self,
        file_system_poll: float,
        config_poll: float,
        reload: Callable[[], ServingConfig] | None,
        stop: threading.Event,
    ) -> None:
        now = time.monotonic()
        next_scan = now + file_system_poll if file_system_poll > 0 else float("inf")
        next_read = now + config_poll if reload is not None and config_poll > 0 else float("inf")
        while not stop.is_set():
            due = min(next_scan, next_read, time.monotonic() + _WAKE_EVERY)
            retry_in = self.next_retry() - self._clock()
            self._wake.wait(max(0.0, min(due - time.monotonic(), retry_in)))
            self._wake.clear()
            if stop.is_set():
                break
            self._apply_submitted(stop.is_set)
            now = time.monotonic()
            if now >= next_read and reload is not None:
                next_read = now + config_poll
                self._reload(reload, stop.is_set)
            if now >= next_scan:
                next_scan = now + file_system_poll
                self.sync(stop.is_set)
            elif self.next_retry() <= self._clock():
                self.sync(stop.is_set, retries_only=True)

    def submit(self, config: ServingConfig) -> Submission:
        """Serve `config` instead (HandleReloadConfigRequest), on the control thread.

        Once submitted it is applied whatever becomes of the caller (see
        :class:`Submission`); refused (RuntimeError in `done`) only when the
        server stops, or has failed, before it was applied.
        """
        submission = Submission(config)
        with self._lock:
            closed = self._closed
            if closed is None:
                self._submitted.append(submission)
        if closed is not None:  # the thread has ended: nobody would ever apply it
            submission.done.set_running_or_notify_cancel()
            submission.done.set_exception(RuntimeError(closed))
        self._wake.set()
        return submission

    def _take_submitted(self) -> Submission | None:
        with self._lock:
            return self._submitted.pop(0) if self._submitted else None

    def _apply_submitted(self, stop: Callable[[], bool]) -> None:
        while (submission := self._take_submitted()) is not None:
            # Whether or not the caller still waits (its future may be
            # cancelled), the configuration it was told was accepted applies.
            listening = submission.done.set_running_or_notify_cancel()
            config = submission.config
            try:
                log.info("model configuration received: %s", ", ".join(config.names()))
                self.apply(config)
                submission.applied.set()
                self._events.config_reloaded("success")
                errors = self.sync(stop)
                warn_unavailable_labels(self._models.values())
            except BaseException as err:
                if listening:
                    submission.done.set_exception(err)
                raise  # a bug: run() ends the server
            if listening:
                submission.done.set_result(errors)

    def _refuse_submitted(self, reason: str) -> None:
        """Refuse what is queued, and from now on what is submitted (the thread ends)."""
        with self._lock:
            self._closed = reason
        while (submission := self._take_submitted()) is not None:
            if submission.done.set_running_or_notify_cancel():
                submission.done.set_exception(RuntimeError(reason))

    def _reload(self, reload: Callable[[], ServingConfig], stop: Callable[[], bool]) -> None:
        try:
            config = reload()
        except (ConfigError, OSError) as err:
            reason = repository.describe(err) if isinstance(err, OSError) else str(err)
            log.error("%s; keeping the previous configuration", reason)
            self._events.config_reloaded("failure")
            return
        if config == self.config:
            return
        log.info("model config file changed: %s", ", ".join(config.names()))
        self.apply(config)
        self._events.config_reloaded("success")
        self.sync(stop)  # new models load now, even when directories are not polled
        warn_unavailable_labels(self._models.values())

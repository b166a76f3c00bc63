"""The hook's start-up half: register a finder that fires after ``import tensorflow``.

The wheel installs this file at the top of site-packages as
``_tf_entrypoint_pth`` (its own top-level name, so that nothing of the package
is imported at interpreter start); ``tf_entrypoint_hook.pth`` calls
:func:`install`. The finder answers only for ``tensorflow``, wraps that
spec's loader, and once ``tensorflow/__init__.py`` has run imports
:data:`HOOK_MODULE` and calls it, then leaves ``sys.meta_path``. It imports
nothing at start-up. docs/configuration.md: "What is applied where".
"""

import os
import sys

# Annotations are strings so that none of these is imported at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The one module name the finder answers for.
TARGET = "tensorflow"
#: The switch; its off values are also checked by the line in the .pth file.
SWITCH = "TF_ENTRYPOINT_HOOK"
OFF_VALUES = ("off", "false", "0", "no")
#: The hook, imported when TensorFlow has been.
HOOK_MODULE = "tf_entrypoint.hook"
_WHITESPACE = " \t\n\r\v\f"
_PREFIX = "tf-entrypoint:"


def is_off(raw: "str | None") -> bool:
    """True when TF_ENTRYPOINT_HOOK asks for no hook (off/false/0/no, any case)."""
    return raw is not None and raw.strip(_WHITESPACE).lower() in OFF_VALUES


class TensorFlowFinder:
    """A ``sys.meta_path`` finder that only ever answers for ``tensorflow``."""

    #: Marks our finders whatever module copy defined the class.
    tf_entrypoint_hook = True

    def __init__(self, on_loaded: "Callable[[ModuleType], None]") -> None:
        self._on_loaded = on_loaded
        self._searching = False
        self._fired = False

    def find_spec(
        self,
        fullname: str,
        path: "Sequence[str] | None" = None,
        target: "ModuleType | None" = None,
    ) -> "ModuleSpec | None":
        if fullname != TARGET or self._searching or self._fired:
            return None
        # A finder after us may itself call importlib.util.find_spec("tensorflow").
        self._searching = True
        try:
            spec = _find_with_the_others(self, fullname, path, target)
        except Exception:  # noqa: BLE001 - let the normal import system report it
            return None
        finally:
            self._searching = False
        if spec is None or not _wrap_loader(spec, self._loaded):
            return None
        # Not removed yet: importlib.util.find_spec("tensorflow") (libraries
        # probe with it) returns this spec and imports nothing; the import
        # that follows asks us again.
        return spec

    def _loaded(self, module: "ModuleType") -> None:
        """tensorflow/__init__.py ran: fire once, then leave sys.meta_path (reloads too)."""
        if self._fired:
            return
        self._fired = True
        uninstall(self)
        self._on_loaded(module)


def _find_with_the_others(
    finder: TensorFlowFinder,
    fullname: str,
    path: "Sequence[str] | None",
    target: "ModuleType | None",
) -> "ModuleSpec | None":
    finders = list(sys.meta_path)
    if finder in finders:
        # The finders before us already said no.
        finders = finders[finders.index(finder) + 1 :]
    for other in finders:
        find_spec = getattr(other, "find_spec", None)
        if find_spec is None:
            continue
        spec: ModuleSpec | None = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _wrap_loader(spec: "ModuleSpec", on_loaded: "Callable[[ModuleType], None]") -> bool:
    """Make spec's own loader call on_loaded(module) after exec_module succeeds.

    The wrapper is an attribute of that one loader instance (the loader's type
    and ``module.__loader__`` stay TensorFlow's), and it removes itself when it
    runs. Namespace packages, class-level loaders and loaders without
    exec_module are left alone (no hook).
    """
    loader = spec.loader
    if loader is None or isinstance(loader, type) or not spec.has_location:
        return False
    original = getattr(loader, "exec_module", None)
    if original is None:
        return False

    def exec_module(module: "ModuleType") -> None:
        try:
            original(module)
        finally:
            try:  # noqa: SIM105 - contextlib is not loaded at interpreter start
                del loader.exec_module
            except AttributeError:
                pass
        on_loaded(module)

    try:
        loader.exec_module = exec_module  # type: ignore[method-assign]
    except (AttributeError, TypeError):
        return False
    return True


def load_hook() -> "ModuleType":
    """The hook module, imported by its package name (once per process, as any import)."""
    __import__(HOOK_MODULE)
    return sys.modules[HOOK_MODULE]


#: The file the wheel puts at the top of site-packages.
PTH_FILE = "tf_entrypoint_hook.pth"


def copies_on_path(path: "Sequence[str] | None" = None) -> "list[str]":
    """Directories on sys.path holding tf_entrypoint_hook.pth, first to last, each once.

    More than one means two installations (e.g. a venv with system site
    packages, or `pip install --user` beside a system install): only the
    first registers the hook, the others' .pth lines find it registered.
    """
    found: list[str] = []
    for entry in sys.path if path is None else path:
        if not entry:
            continue
        try:
            directory = os.path.realpath(entry)
            if directory not in found and os.path.isfile(os.path.join(directory, PTH_FILE)):
                found.append(directory)
        except (OSError, ValueError):
            continue
    return found


def fire(tensorflow: "ModuleType") -> None:
    """Run the hook on the freshly imported TensorFlow; never raise."""
    try:
        copies = copies_on_path()
        if len(copies) > 1:
            _say(
                f"{len(copies)} copies of the tf-entrypoint hook are on this Python's path "
                f"({', '.join(copies)}); the first applies the plan, once; uninstall the others"
            )
    except Exception:  # noqa: BLE001, S110 - a warning must never stop the hook
        pass
    try:
        load_hook().on_tensorflow_imported(tensorflow)
    except Exception as err:  # noqa: BLE001 - user code must never break because of us
        _say(f"hook failed, TensorFlow left as it is ({type(err).__name__}: {err})")


def _say(message: str) -> None:
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"{_PREFIX} {' '.join(message.split())}\n")
        stream.flush()
    except Exception:  # noqa: BLE001, S110 - a closed stderr is not our problem to report
        pass


def install(environ: "MutableMapping[str, str] | None" = None) -> "TensorFlowFinder | None":
    """Register the finder (first on sys.meta_path); the .pth line calls this.

    Does nothing when TF_ENTRYPOINT_HOOK is off, when TensorFlow is already
    imported, or when one of our finders is registered already. Returns the
    finder it registered, if any.
    """
    env = os.environ if environ is None else environ
    if is_off(env.get(SWITCH)) or TARGET in sys.modules:
        return None
    for finder in sys.meta_path:
        if getattr(finder, "tf_entrypoint_hook", False) is True:
            return None
    finder = TensorFlowFinder(fire)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall(finder: TensorFlowFinder) -> None:
    """Take finder off sys.meta_path (no-op when it is not there)."""
    try:  # noqa: SIM105 - contextlib is not loaded at interpreter start
        sys.meta_path.remove(finder)
    except ValueError:
        pass

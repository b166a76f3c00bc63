"""What the entrypoint tells the user about their configuration.

A :class:`Problem` is a mistake that stops the hand-off (exit code
:data:`EXIT_CONFIG`); a :class:`Notice` is worth saying but lets the command
run. Both are plain data: modules return them, only the CLI prints them.
"""

from __future__ import annotations

from tf_entrypoint.frozen import frozen

#: Exit code when the configuration (environment variables) is invalid.
#: 78 is EX_CONFIG from sysexits.h: "something was found in an unconfigured or
#: misconfigured state".
EXIT_CONFIG = 78
#: Exit code for a wrong tf-entrypoint command line (EX_USAGE).
EXIT_USAGE = 64
#: The command to hand off to exists but cannot be executed (as a shell says).
EXIT_CANNOT_EXECUTE = 126
#: The command to hand off to was not found (as a shell says).
EXIT_NOT_FOUND = 127


@frozen
class Problem:
    """One invalid value: which variable, what it held, what was expected."""

    variable: str
    value: str
    expected: str
    #: What is wrong with it, when "not what was expected" is not enough
    #: (e.g. "GPU 3 is not visible"); empty otherwise.
    reason: str = ""

    def __str__(self) -> str:
        what = f"{self.variable}={self.value!r}"
        why = f" ({self.reason})" if self.reason else ""
        return f"{what} is invalid{why}: expected {self.expected}"


@frozen
class Notice:
    """Something the user should know that does not stop the command."""

    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.message}" if self.variable else self.message

"""The one error type users see: a single line naming what is wrong and where."""


class ForgeError(Exception):
    """A user-facing failure. build.py prints `error: <message>` and exits non-zero.

    Messages are one line and name the file and field (or release, target, path) at fault.
    """

    exit_code = 2

    def __str__(self) -> str:
        # Guarantee the one-line promise even when a message is built from multi-line text.
        return " ".join(super().__str__().split())


class ConflictError(ForgeError):
    """A patch that should apply to a release fits neither forward nor reverse."""

    exit_code = 3

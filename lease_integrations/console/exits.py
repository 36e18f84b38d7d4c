"""Exit codes scripts can rely on, and the exceptions that carry them out of a
command (so a command never calls ``sys.exit`` halfway through its output)."""

from __future__ import annotations

OK = 0
NOT_FOUND = 1
USAGE = 2
UNAVAILABLE = 3
REFUSED = 4
INTERNAL = 5
#: ``show`` of a key whose stored record cannot be parsed (what can be read
#: is still printed); ``list`` shows such keys as UNREADABLE and exits 0.
UNREADABLE = 6
#: ``check`` found a violation of a safety rule in the key's history.
VIOLATION = 7
#: ``probe`` found that the object store ignores a conditional write.
CONDITION_IGNORED = 8
#: The reader closed stdout early (``| head -1``): 128 + SIGPIPE, as a Unix
#: tool that SIGPIPE ends, and nothing on stderr.
CLOSED_PIPE = 141


class CommandFailed(Exception):
    """A command ended with a message for stderr and a documented exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def not_found(message: str) -> CommandFailed:
    return CommandFailed(message, NOT_FOUND)


def refused(message: str) -> CommandFailed:
    return CommandFailed(message, REFUSED)

"""Exceptions: one class per flashcpu_status, all subclasses of Error."""


class Error(Exception):
    """A flashcpu call failed. status: the C status name; message: the
    library's message (or the binding's, for what it checks itself)."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class NullPointerError(Error):
    pass


class InvalidArgumentError(Error, ValueError):
    pass


class ShapeMismatchError(InvalidArgumentError):
    pass


class BadLayoutError(InvalidArgumentError):
    pass


class OverlapError(InvalidArgumentError):
    pass


class UnsupportedDtypeError(Error, TypeError):
    pass


class SizeOverflowError(Error, OverflowError):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class InternalError(Error):
    pass


class UnsupportedError(Error, NotImplementedError):
    """A feature flashcpu does not have."""


BY_STATUS = {
    1: NullPointerError, 2: InvalidArgumentError, 3: ShapeMismatchError,
    4: BadLayoutError, 5: OverlapError, 6: UnsupportedDtypeError,
    7: SizeOverflowError, 8: OutOfMemoryError, 9: InternalError,
}


def from_status(status, status_name, message):
    """The exception for a non-zero flashcpu_status."""
    return BY_STATUS.get(status, Error)(status_name, message)

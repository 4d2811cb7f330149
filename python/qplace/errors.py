"""Errors: every failing C call raises a subclass of qplace.Error carrying its status and message.

    try:
        qplace.quantize(onnx_path="missing.onnx")
    except qplace.BadInputError as e:      # or qplace.Error for any of them
        print(e.status, e.exit_code, e.message)

The subclass follows the C status (include/qplace/status.h); `exit_code` is what the `qplace`
command would exit with (1 usage, 2 bad input, 3 internal).
"""

from . import _lib


class Error(Exception):
    """A qplace call failed. `status` is the C status number, `status_name` its name,
    `message` the library's message (what and where), `exit_code` the CLI's exit code."""

    status = _lib.ERR_INTERNAL

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message
        self.status_name = _lib.dec(_lib.qp_status_name(self.status))

    @property
    def exit_code(self):
        return 1 if self.status == _lib.ERR_USAGE else 3 if self.status in (
            _lib.ERR_INTERNAL, _lib.ERR_NOMEM) else 2


class UsageError(Error, ValueError):
    """Bad arguments (an unknown option value, a wrong type, an API misuse)."""
    status = _lib.ERR_USAGE


class BadInputError(Error, ValueError):
    """A malformed or inconsistent model, data or file."""
    status = _lib.ERR_BAD_INPUT


class UnsupportedError(Error):
    """Well-formed input qplace does not handle (an op, a dtype, an opset)."""
    status = _lib.ERR_UNSUPPORTED


class FileError(Error, OSError):
    """A file that cannot be opened, read or written."""
    status = _lib.ERR_IO


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed or a size would overflow."""
    status = _lib.ERR_NOMEM


class InternalError(Error):
    """A bug in qplace."""
    status = _lib.ERR_INTERNAL


_BY_STATUS = {c.status: c for c in (UsageError, BadInputError, UnsupportedError, FileError,
                                    OutOfMemoryError, InternalError)}


def error_for(status, message):
    cls = _BY_STATUS.get(status, InternalError)
    return cls(message, status)


def check(status, err):
    """Raises the Error of a non-zero status with the message in `err` (a _lib.Error)."""
    if status != _lib.OK:
        msg = err.msg.decode("utf-8", "replace") or _lib.dec(_lib.qp_status_name(status))
        raise error_for(status, msg)


def usage(message):
    return UsageError(message)

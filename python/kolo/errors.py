"""Kolo's exceptions: one class per status code, all under KoloError.

Every failed collective raises the class of the status kolod or libkolo
returned, carrying its message verbatim (for example a FailedPreconditionError
naming the tensor, the ranks and the values they disagreed on).
"""


class KoloError(RuntimeError):
    """A Kolo call failed. `code` is the status code (absl::StatusCode values),
    `code_name` its name and `message` the daemon's or library's text."""

    code = 2
    code_name = "UNKNOWN"

    def __init__(self, message="", code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code_name}: {self.message}"


class CancelledError(KoloError):
    code, code_name = 1, "CANCELLED"


class UnknownError(KoloError):
    code, code_name = 2, "UNKNOWN"


class InvalidArgumentError(KoloError, ValueError):
    code, code_name = 3, "INVALID_ARGUMENT"


class DeadlineExceededError(KoloError, TimeoutError):
    code, code_name = 4, "DEADLINE_EXCEEDED"


class NotFoundError(KoloError):
    code, code_name = 5, "NOT_FOUND"


class AlreadyExistsError(KoloError):
    code, code_name = 6, "ALREADY_EXISTS"


class PermissionDeniedError(KoloError):
    code, code_name = 7, "PERMISSION_DENIED"


class ResourceExhaustedError(KoloError):
    code, code_name = 8, "RESOURCE_EXHAUSTED"


class FailedPreconditionError(KoloError):
    """Raised among others when ranks disagree on a collective (shape, dtype,
    op, root, scale factors) and when kolo is used before init()."""

    code, code_name = 9, "FAILED_PRECONDITION"


class AbortedError(KoloError):
    """The job's collectives were aborted, e.g. because a rank died."""

    code, code_name = 10, "ABORTED"


# What kolod's message of a membership change starts with (common/membership.h
# holds the rule; kolo._core.MEMBERSHIP_CHANGED_PREFIX is the same text and a
# test keeps the two equal).
MEMBERSHIP_CHANGED_PREFIX = "MEMBERSHIP_CHANGED: "


class MembershipChangedError(AbortedError):
    """An elastic job's membership changed under this collective: a rank
    died, left, or ranks wait to join. Collectives of the ended epoch fail
    with it on every survivor; kolo.elastic.run catches it, restores the last
    committed state and resets into the next epoch (Horovod's
    HorovodInternalError plays this part there)."""


def is_membership_changed(error):
    """Whether `error` (a KoloError, or a framework's error carrying kolod's
    message, e.g. tf.errors.AbortedError) reports a membership change."""
    if isinstance(error, MembershipChangedError):
        return True
    return MEMBERSHIP_CHANGED_PREFIX in str(error)


class OutOfRangeError(KoloError):
    code, code_name = 11, "OUT_OF_RANGE"


class UnimplementedError(KoloError, NotImplementedError):
    code, code_name = 12, "UNIMPLEMENTED"


class InternalError(KoloError):
    code, code_name = 13, "INTERNAL"


class UnavailableError(KoloError):
    """kolod cannot be reached (not running, or it died)."""

    code, code_name = 14, "UNAVAILABLE"


class DataLossError(KoloError):
    code, code_name = 15, "DATA_LOSS"


class UnauthenticatedError(KoloError):
    code, code_name = 16, "UNAUTHENTICATED"


_BY_CODE = {
    cls.code: cls
    for cls in (CancelledError, UnknownError, InvalidArgumentError,
                DeadlineExceededError, NotFoundError, AlreadyExistsError,
                PermissionDeniedError, ResourceExhaustedError,
                FailedPreconditionError, AbortedError, OutOfRangeError,
                UnimplementedError, InternalError, UnavailableError,
                DataLossError, UnauthenticatedError)
}


def error_for(code, message):
    """The exception for status `code` with `message` (KoloError when unknown)."""
    cls = _BY_CODE.get(int(code))
    if cls is AbortedError and str(message).startswith(MEMBERSHIP_CHANGED_PREFIX):
        cls = MembershipChangedError
    if cls is None:
        return KoloError(message, code=int(code))
    return cls(message)


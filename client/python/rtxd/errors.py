"""
rtxd.errors - the exceptions of rtxd calls, one class per kind of gRPC status.

Every exception of a call that reached gRPC is an RtxdError with the status (`code`), the
daemon's own message (`message`: it names the problem: the node, the input, the job) and the
request id the call carried (`request_id`: rtxd writes it on every log line of the request).
The classes also derive from the built-in exception that fits, so `except ValueError` catches
an InvalidArgument and `except TimeoutError` a DeadlineExceeded.

| gRPC status                       | exception                                   |
| --------------------------------- | ------------------------------------------- |
| INVALID_ARGUMENT, OUT_OF_RANGE    | InvalidArgument (ValueError)                |
| NOT_FOUND                         | NotFound (LookupError)                      |
| RESOURCE_EXHAUSTED                | Overloaded when admission control refused   |
|                                   | (retry_after), else ResourceExhausted       |
| UNAVAILABLE                       | Unavailable (ConnectionError)               |
| DEADLINE_EXCEEDED                 | DeadlineExceeded (TimeoutError)             |
| CANCELLED                         | Cancelled                                   |
| FAILED_PRECONDITION               | FailedPrecondition                          |
| PERMISSION_DENIED, UNAUTHENTICATED| PermissionDenied (PermissionError)          |
| UNIMPLEMENTED                     | Unimplemented                               |
| INTERNAL, UNKNOWN, DATA_LOSS      | InternalError                               |
| ALREADY_EXISTS, ABORTED           | RtxdError                                   |
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

import grpc

if TYPE_CHECKING:
    from rtxd.job import Job


class RtxdError(Exception):
    """An rtxd call failed. `code` is the gRPC status (None for JobFailed), `message` the
    daemon's message, `request_id` the x-request-id the call carried."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None,
                 request_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.request_id = request_id

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}" if self.code else self.message


class InvalidArgument(RtxdError, ValueError):
    """The daemon refused the request: an invalid graph or model, an input that does not
    fit, an unknown lane or device, a deadline already passed."""


class NotFound(RtxdError, LookupError):
    """An unknown job id, or outputs that retention deleted."""


class ResourceExhausted(RtxdError):
    """A graph, tensor or message over a configured limit."""


class Overloaded(ResourceExhausted):
    """Admission control refused the job (nothing was journaled; it has no id): its lane is
    full or shed, or its deadline cannot be met. `retry_after` is when a retry may be
    admitted (seconds), `reason` the daemon's word for why ("lane_full", "deadline", "shed",
    "full"), `device` the scheduler that refused ("cpu", "cuda:0"); each None if unknown."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None,
                 request_id: Optional[str] = None, retry_after: Optional[float] = None,
                 reason: Optional[str] = None, device: Optional[str] = None) -> None:
        super().__init__(message, code, request_id)
        self.retry_after = retry_after
        self.reason = reason
        self.device = device


class Unavailable(RtxdError, ConnectionError):
    """No daemon answers at the address, or it is draining, or no device can take the job."""


class DeadlineExceeded(RtxdError, TimeoutError):
    """The call's time limit passed (Client(timeout=...), Job.wait(timeout=...))."""


class Cancelled(RtxdError):
    """The call was cancelled."""


class FailedPrecondition(RtxdError):
    """The job is not in a state that allows it: outputs of a job that did not succeed."""


class PermissionDenied(RtxdError, PermissionError):
    """PERMISSION_DENIED or UNAUTHENTICATED (from a proxy in front of rtxd)."""


class Unimplemented(RtxdError):
    """A method the daemon does not serve (an older rtxd)."""


class InternalError(RtxdError):
    """A failure inside the daemon (its store, memory, a device)."""


class JobFailed(RtxdError):
    """Job.result(): the job ended other than succeeded. `job` is it in its final state
    (state, reason, failure_code)."""

    def __init__(self, job: "Job") -> None:
        what = job.failure_code or job.state.name.lower()
        super().__init__(f"job {job.id} {job.state.name.lower()} ({what}): {job.reason}")
        self.job = job


_BY_CODE: Dict[grpc.StatusCode, Type[RtxdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNKNOWN: InternalError,
    grpc.StatusCode.DATA_LOSS: InternalError,
}

# "overloaded on cpu (lane_full): lane batch: ...; retry after 31 ms" (docs/daemon.md)
_OVERLOAD_RE = re.compile(r"overloaded on (\S+) \((\w+)\)")
_RETRY_RE = re.compile(r"retry after (\d+) ms")
PUSHBACK_KEY = "grpc-retry-pushback-ms"


def from_rpc_error(e: grpc.RpcError, request_id: Optional[str] = None) -> RtxdError:
    """The RtxdError of a failed gRPC call: the class of its status, the daemon's message
    (gRPC's own when no daemon answered: it names the address)."""
    call = e if isinstance(e, grpc.Call) else None
    code = call.code() if call is not None else grpc.StatusCode.UNKNOWN
    message = (call.details() if call is not None else None) or str(e)
    cls = _BY_CODE.get(code, RtxdError)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        pushback = None
        trailers: Any = call.trailing_metadata() if call is not None else None
        for md in trailers or ():
            if md[0] == PUSHBACK_KEY:
                try:
                    pushback = int(md[1]) / 1000.0
                except (TypeError, ValueError):
                    pass
        m = _OVERLOAD_RE.search(message)
        if m or pushback is not None:
            r = _RETRY_RE.search(message)
            if pushback is None and r:
                pushback = int(r.group(1)) / 1000.0
            return Overloaded(message, code, request_id, pushback,
                              m.group(2) if m else None, m.group(1) if m else None)
    return cls(message, code, request_id)

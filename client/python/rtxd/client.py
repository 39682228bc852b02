"""
rtxd.client - Client: one gRPC channel to one rtxd and the calls of its jobs API (rtx.v1.Jobs:
Submit, Get, Wait, Cancel, List, GetOutputs) and of Admin.Health.

DESIGN
The calls are multi-callables made once per client from one table of rtx.v1 methods (path,
request and response types), so the client needs nothing from the generated gRPC stubs and
its types are checked end to end. Every call carries an x-request-id ("rtxpy-" and 16 hex
digits) that rtxd writes on each log line of the request; a failed call's RtxdError carries
it. A Client may be used by several threads at once (gRPC channels are thread-safe).

rtxd serves plaintext gRPC without authentication (docs/daemon.md); for anything in front of
it (a TLS-terminating proxy, interceptors) build the grpc.Channel yourself and pass it.
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import (Any, Dict, Generator, Iterable, Iterator, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, Type, Union, cast)

import grpc
import numpy as np

from rtxd._proto.rtx.v1 import admin_pb2, graph_pb2, jobs_pb2
from rtxd.dtypes import TensorLike, encode
from rtxd.errors import from_rpc_error
from rtxd.graph import Graph
from rtxd.job import Job, JobState, Progress, RestartPolicy

DEFAULT_ADDRESS = "127.0.0.1:8001"

# What Client.submit runs: a Graph, an ONNX model (bytes, or an object with
# SerializeToString() such as onnx.ModelProto), or a file: .rtxg is a graph file, any other an
# ONNX model.
JobSource = Union[Graph, graph_pb2.Graph, bytes, bytearray, memoryview, str, "os.PathLike[str]",
                  Any]

Deadline = Union[float, int, timedelta, datetime]
"""A job's deadline: seconds from now (a number or a timedelta) or a datetime (naive: local
time)."""

Time = Union[float, int, datetime]
"""A point in time: a datetime (naive: local time) or seconds since the Unix epoch."""


class Health(NamedTuple):
    """Admin.Health: whether the daemon takes jobs, and if not why ("draining")."""

    serving: bool
    detail: str


# Channel options: no limit on message sizes (rtxd applies its own, server.max_message_bytes).
_CHANNEL_OPTIONS: List[Tuple[str, Any]] = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]


def _deadline_ms(deadline: Deadline) -> int:
    if isinstance(deadline, datetime):
        return int(deadline.timestamp() * 1000)
    seconds = deadline.total_seconds() if isinstance(deadline, timedelta) else float(deadline)
    return int((datetime.now().timestamp() + seconds) * 1000)


def _time_ms(t: Time) -> int:
    return int((t.timestamp() if isinstance(t, datetime) else float(t)) * 1000)


def _labels(labels: Optional[Mapping[str, str]]) -> List[jobs_pb2.Label]:
    out = []
    for k, v in (labels or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"label {k!r}: keys and values are strings, not {v!r}")
        out.append(jobs_pb2.Label(key=k, value=v))
    return out


def _set_source(req: jobs_pb2.SubmitRequest, source: JobSource) -> None:
    """Sets req.graph or req.onnx_model from what Client.submit was given."""
    if isinstance(source, Graph):
        req.graph.CopyFrom(source.to_proto())
    elif isinstance(source, graph_pb2.Graph):
        req.graph.CopyFrom(source)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        req.onnx_model = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source)
        what = "graph" if p.suffix == ".rtxg" else "ONNX model"
        try:
            data = p.read_bytes()
        except OSError as e:
            raise OSError(e.errno, f"cannot read the job's {what}: {e.strerror}", str(p)) \
                from None
        if p.suffix == ".rtxg":
            req.graph.CopyFrom(Graph.from_bytes(data).to_proto())
        else:
            req.onnx_model = data
    elif callable(getattr(source, "SerializeToString", None)):
        req.onnx_model = source.SerializeToString()
    else:
        raise TypeError(f"a job runs an rtxd.Graph, an ONNX model (bytes, a ModelProto) or a "
                        f"file (.rtxg, .onnx), not {type(source).__name__}")


class Client:
    """A connection to one rtxd. Use it as a context manager, or close() it.

    address: "host:port" of rtxd's gRPC listener (setting server.listen).
    timeout: seconds each call but Wait may take (None: no limit); Job.wait takes its own.
    options: extra gRPC channel options, e.g. [("grpc.enable_http_proxy", 0)].
    channel: a grpc.Channel to use instead of opening one (address and options are then
        only informative); the client does not close a channel it was given.

    Connecting is lazy: a daemon that is not there shows as Unavailable on the first call.
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, *, timeout: Optional[float] = None,
                 options: Sequence[Tuple[str, Any]] = (),
                 channel: Optional[grpc.Channel] = None) -> None:
        self.address = address
        self.timeout = timeout
        self._own_channel = channel is None
        self.channel: grpc.Channel = channel if channel is not None else grpc.insecure_channel(
            address, options=_CHANNEL_OPTIONS + list(options))
        ch = self.channel
        self._submit = ch.unary_unary("/rtx.v1.Jobs/Submit",
                                      request_serializer=jobs_pb2.SubmitRequest.SerializeToString,
                                      response_deserializer=jobs_pb2.SubmitResponse.FromString)
        self._get_rpc = ch.unary_unary("/rtx.v1.Jobs/Get",
                                       request_serializer=jobs_pb2.GetJobRequest.SerializeToString,
                                       response_deserializer=jobs_pb2.Job.FromString)
        self._wait_rpc = ch.unary_stream(
            "/rtx.v1.Jobs/Wait", request_serializer=jobs_pb2.WaitJobRequest.SerializeToString,
            response_deserializer=jobs_pb2.Job.FromString)
        self._cancel_rpc = ch.unary_unary(
            "/rtx.v1.Jobs/Cancel", request_serializer=jobs_pb2.CancelJobRequest.SerializeToString,
            response_deserializer=jobs_pb2.Job.FromString)
        self._list_rpc = ch.unary_unary(
            "/rtx.v1.Jobs/List", request_serializer=jobs_pb2.ListJobsRequest.SerializeToString,
            response_deserializer=jobs_pb2.ListJobsResponse.FromString)
        self._outputs_rpc = ch.unary_unary(
            "/rtx.v1.Jobs/GetOutputs",
            request_serializer=jobs_pb2.GetOutputsRequest.SerializeToString,
            response_deserializer=jobs_pb2.GetOutputsResponse.FromString)
        self._health_rpc = ch.unary_unary(
            "/rtx.v1.Admin/Health", request_serializer=admin_pb2.HealthRequest.SerializeToString,
            response_deserializer=admin_pb2.HealthResponse.FromString)

    # --- lifetime

    def close(self) -> None:
        """Closes the channel (if the client opened it); calls in flight are cancelled."""
        if self._own_channel:
            self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.address!r})"

    # --- calls

    def _unary(self, rpc: "grpc.UnaryUnaryMultiCallable[Any, Any]", request: Any) -> Any:
        rid = "rtxpy-" + secrets.token_hex(8)
        try:
            return rpc(request, timeout=self.timeout, metadata=(("x-request-id", rid),))
        except grpc.RpcError as e:
            raise from_rpc_error(e, rid) from None

    def submit(self, graph_or_onnx: JobSource,
               inputs: Optional[Mapping[str, TensorLike]] = None, *,
               lane: Optional[str] = None, deadline: Optional[Deadline] = None,
               labels: Optional[Mapping[str, str]] = None,
               idempotency_key: Optional[str] = None, device: Optional[str] = None,
               restart_policy: Union[RestartPolicy, str, None] = None) -> Job:
        """Submits a job; returns it once rtxd has journaled it (it survives a restart).

        graph_or_onnx: an rtxd.Graph; an ONNX model as bytes or a ModelProto (rtxd converts
            it for the shapes of `inputs`); or a path: an .rtxg graph file, else an .onnx
            file.
        inputs: {input name: array}; an array travels as its own dtype (rtxd.dtypes), an
            rtxd.Tensor(array, dtype) as the dtype it names.
        lane: the SLA lane ("realtime", "interactive", "batch", ...; None: the default).
        deadline: a job not started by then expires (seconds from now, a timedelta or a
            datetime).
        labels: key -> value, to find the job again (Client.jobs).
        idempotency_key: a second submit with the same key returns the first job
            (Job.deduplicated is then True).
        device: "auto", "cpu", "cuda", "cuda:N" (None: the setting jobs.device).
        restart_policy: RestartPolicy or "rerun" / "fail" (None: the daemon's default).

        Raises InvalidArgument with the daemon's message for an invalid graph, model or
        input, Overloaded when admission control refuses (retry_after), Unavailable when no
        daemon answers or it is draining; TypeError/ValueError for what the client itself can
        see is wrong (a float64 input, an unreadable file).
        """
        req = jobs_pb2.SubmitRequest()
        _set_source(req, graph_or_onnx)
        for name, value in (inputs or {}).items():
            req.inputs.append(encode(name, value, what=f"input '{name}'"))
        if lane is not None:
            req.lane = lane
        if deadline is not None:
            req.deadline_unix_ms = _deadline_ms(deadline)
        req.labels.extend(_labels(labels))
        if idempotency_key is not None:
            req.idempotency_key = idempotency_key
        if device is not None:
            req.device = device
        if restart_policy is not None:
            policy = RestartPolicy[restart_policy.upper()] if isinstance(restart_policy, str) \
                else RestartPolicy(restart_policy)
            req.restart_policy = cast(jobs_pb2.RestartPolicy, int(policy))
        resp = self._unary(self._submit, req)
        return Job(self, resp.job_id, deduplicated=resp.deduplicated)

    def run(self, graph_or_onnx: JobSource, inputs: Optional[Mapping[str, TensorLike]] = None,
            *, timeout: Optional[float] = None, progress: Union[Progress, bool, None] = None,
            **submit_options: Any) -> Dict[str, "np.ndarray[Any, Any]"]:
        """submit(), then Job.result(): the outputs of the job, or JobFailed."""
        return self.submit(graph_or_onnx, inputs, **submit_options).result(timeout, progress)

    def job(self, job_id: str) -> Job:
        """The job of this id as it is now (NotFound if rtxd has none)."""
        return Job(self, job_id, self._get(job_id))

    def jobs(self, *, states: Optional[Iterable[Union[JobState, str]]] = None,
             labels: Optional[Mapping[str, str]] = None, created_after: Optional[Time] = None,
             created_before: Optional[Time] = None, page_size: int = 100,
             limit: Optional[int] = None) -> Iterator[Job]:
        """The daemon's jobs, newest first, fetched a page (page_size, at most 1000) at a time
        as the iteration goes: those in any of `states`, carrying all of `labels`, created
        in the time bounds; at most `limit` (None: all)."""
        req = jobs_pb2.ListJobsRequest(page_size=page_size)
        req.states.extend(cast(jobs_pb2.JobState, int(JobState.parse(s))) for s in states or ())
        req.labels.extend(_labels(labels))
        if created_after is not None:
            req.created_after_unix_ms = _time_ms(created_after)
        if created_before is not None:
            req.created_before_unix_ms = _time_ms(created_before)
        n = 0
        while limit is None or n < limit:
            resp = self._unary(self._list_rpc, req)
            for msg in resp.jobs:
                if limit is not None and n >= limit:
                    return
                n += 1
                yield Job(self, msg.id, msg)
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    def health(self) -> Health:
        """Admin.Health: SERVING, or not and why."""
        r = self._unary(self._health_rpc, admin_pb2.HealthRequest())
        return Health(r.status == admin_pb2.HealthResponse.SERVING, r.detail)

    # --- what Job calls

    def _get(self, job_id: str) -> jobs_pb2.Job:
        msg: jobs_pb2.Job = self._unary(self._get_rpc, jobs_pb2.GetJobRequest(job_id=job_id))
        return msg

    def _cancel(self, job_id: str) -> jobs_pb2.Job:
        msg: jobs_pb2.Job = self._unary(self._cancel_rpc,
                                        jobs_pb2.CancelJobRequest(job_id=job_id))
        return msg

    def _get_outputs(self, job_id: str) -> List[graph_pb2.Tensor]:
        r = self._unary(self._outputs_rpc, jobs_pb2.GetOutputsRequest(job_id=job_id))
        return list(r.outputs)

    def _wait(self, job_id: str,
              timeout: Optional[float]) -> Generator[jobs_pb2.Job, None, None]:
        """The Wait stream's messages; the call is cancelled when the iteration stops."""
        rid = "rtxpy-" + secrets.token_hex(8)
        call = self._wait_rpc(jobs_pb2.WaitJobRequest(job_id=job_id), timeout=timeout,
                              metadata=(("x-request-id", rid),))
        try:
            for msg in call:
                yield msg
        except grpc.RpcError as e:
            raise from_rpc_error(e, rid) from None
        finally:
            call.cancel()

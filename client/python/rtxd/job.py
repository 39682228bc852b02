"""
rtxd.job - Job, the client's handle of one rtxd job: its state as last seen, and the calls on
it (refresh, wait with progress, outputs, result, cancel). Also JobState, RestartPolicy,
OutputInfo and the text progress of Job.wait(progress=True).

DESIGN
A Job holds the last rtx.v1.Job message the daemon sent for it and reads every field from it.
A job returned by Client.submit has none yet (Submit answers only the id): the first field read
asks the daemon (Get), so `job.state` right after submit is the state then, not a guess.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Optional, TextIO, Tuple, Union)

import numpy as np

from rtxd._proto.rtx.v1 import jobs_pb2
from rtxd.dtypes import DataType, decode
from rtxd.errors import DeadlineExceeded, JobFailed, Unavailable

if TYPE_CHECKING:
    from rtxd.client import Client


class JobState(enum.IntEnum):
    """rtx.v1.JobState. SUCCEEDED, FAILED, CANCELLED and EXPIRED are terminal."""

    UNSPECIFIED = 0
    QUEUED = 1
    RUNNING = 2
    SUCCEEDED = 3
    FAILED = 4      # Job.reason says why, Job.failure_code what kind
    CANCELLED = 5
    EXPIRED = 6     # the deadline passed before the job could run

    @property
    def terminal(self) -> bool:
        """Whether the job has ended (it changes no more)."""
        return self >= JobState.SUCCEEDED

    @classmethod
    def parse(cls, value: Union["JobState", str, int]) -> "JobState":
        """A state from a JobState, its number, or its name in any case, with or without the
        JOB_STATE_ prefix ("succeeded", "JOB_STATE_FAILED")."""
        if isinstance(value, str):
            key = value.strip().upper()
            key = key[len("JOB_STATE_"):] if key.startswith("JOB_STATE_") else key
            if key not in cls.__members__:
                raise ValueError(f"unknown job state {value!r} "
                                 f"({', '.join(s.name.lower() for s in cls if s)})")
            return cls[key]
        return cls(value)


class RestartPolicy(enum.IntEnum):
    """rtx.v1.RestartPolicy: what a restart of rtxd does with the job if it was running."""

    DEFAULT = 0     # the daemon's setting jobs.restart_policy
    RERUN = 1       # queue it again (Job.attempts counts the runs)
    FAIL = 2        # mark it failed


@dataclass(frozen=True)
class OutputInfo:
    """What a succeeded job's output is, without its data (rtx.v1.OutputInfo)."""

    name: str
    dtype: DataType
    shape: Tuple[int, ...]
    nbytes: int
    sha256: str         # hex digest of the data as rtxd sent it


def _when(ms: int) -> Optional[datetime]:
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc) if ms else None


Progress = Callable[["Job"], Any]
"""A wait callback: called with the Job (its fields as the daemon just sent them) when the
wait starts and at each state change."""


class TextProgress:
    """Job.wait(progress=True): a line on a stream (stderr unless given) each time the job
    enters a state, with the lane, device, attempt, times and, at the end, the reason."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self._stream = stream
        self._last: Optional[JobState] = None

    def __call__(self, job: "Job") -> None:
        if job.state == self._last:
            return
        self._last = job.state
        print(f"rtxd: job {job.id} {self.describe(job)}", file=self._stream or sys.stderr,
              flush=True)

    @staticmethod
    def describe(job: "Job") -> str:
        """The job's state in words: "running on cpu", "succeeded in 0.42 s (...)"."""
        s = job.state
        if s is JobState.QUEUED:
            return f"queued (lane {job.lane})" if job.lane else "queued"
        if s is JobState.RUNNING:
            again = f", attempt {job.attempts}" if job.attempts > 1 else ""
            return f"running on {job.device or 'a device'}{again}"
        if s is JobState.SUCCEEDED:
            p = job.proto
            total = (p.finished_unix_ms - p.created_unix_ms) / 1000.0
            return f"succeeded in {total:.2f} s (run {job.run_ms:.1f} ms on {job.device})"
        if s is JobState.FAILED:
            return f"failed ({job.failure_code or 'error'}): {job.reason}"
        return f"{s.name.lower()}: {job.reason}" if job.reason else s.name.lower()


class Job:
    """A job of an rtxd: from Client.submit, Client.job or Client.jobs. Fields reflect the
    last message from the daemon; refresh() and wait() bring them up to date."""

    def __init__(self, client: "Client", job_id: str, message: Optional[jobs_pb2.Job] = None,
                 deduplicated: bool = False) -> None:
        self._client = client
        self._id = job_id
        self._msg = message
        self._deduplicated = deduplicated

    # --- fields

    @property
    def id(self) -> str:
        return self._id

    @property
    def proto(self) -> jobs_pb2.Job:
        """The last rtx.v1.Job message (fetched with Get if there is none yet)."""
        if self._msg is None:
            self.refresh()
        assert self._msg is not None
        return self._msg

    @property
    def deduplicated(self) -> bool:
        """True when Submit found an earlier job of the same idempotency key: this is it."""
        return self._deduplicated

    @property
    def state(self) -> JobState:
        return JobState(self.proto.state)

    @property
    def done(self) -> bool:
        """Whether the job was in a terminal state when last seen."""
        return self.state.terminal

    @property
    def reason(self) -> str:
        """Why it failed, was cancelled or expired ("" otherwise)."""
        return self.proto.reason

    @property
    def failure_code(self) -> str:
        """Of a failed job, the gRPC status name of the failure ("RESOURCE_EXHAUSTED",
        "UNAVAILABLE", "INTERNAL"); "" otherwise."""
        return self.proto.failure_code

    @property
    def lane(self) -> str:
        return self.proto.lane

    @property
    def labels(self) -> Dict[str, str]:
        return {lb.key: lb.value for lb in self.proto.labels}

    @property
    def graph_name(self) -> str:
        return self.proto.graph_name

    @property
    def idempotency_key(self) -> str:
        return self.proto.idempotency_key

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.proto.restart_policy)

    @property
    def device(self) -> str:
        """Where it runs or ran ("cpu", "cuda:0"); "" until it starts."""
        return self.proto.device

    @property
    def requested_device(self) -> str:
        return self.proto.requested_device

    @property
    def created(self) -> Optional[datetime]:
        return _when(self.proto.created_unix_ms)

    @property
    def started(self) -> Optional[datetime]:
        """When its last run started; None until it runs."""
        return _when(self.proto.started_unix_ms)

    @property
    def finished(self) -> Optional[datetime]:
        return _when(self.proto.finished_unix_ms)

    @property
    def deadline(self) -> Optional[datetime]:
        return _when(self.proto.deadline_unix_ms)

    @property
    def attempts(self) -> int:
        """Runs started (a restart under policy rerun adds one)."""
        return self.proto.attempts

    @property
    def run_ms(self) -> float:
        """Execution time of the last run, milliseconds."""
        return self.proto.run_ms

    @property
    def peak_bytes(self) -> int:
        return self.proto.peak_bytes

    @property
    def exec_mode(self) -> str:
        """How a succeeded run executed: "plain", "fixed", "captured", "replayed" ("" when
        unknown)."""
        return self.proto.exec_mode

    @property
    def output_info(self) -> List[OutputInfo]:
        """The outputs of a succeeded job, described (no data): name, dtype, shape, size."""
        return [OutputInfo(o.name, DataType(o.dtype), tuple(o.dims), o.bytes, o.sha256)
                for o in self.proto.outputs]

    @property
    def outputs_available(self) -> bool:
        """False once retention deleted the outputs (or before the job succeeded)."""
        return self.proto.outputs_available

    def __repr__(self) -> str:
        state = self.state.name.lower() if self._msg is not None else "not fetched"
        return f"Job({self._id!r}, {state})"

    # --- calls

    def refresh(self) -> "Job":
        """Asks the daemon for the job as it is now (Get). Returns the job."""
        self._msg = self._client._get(self._id)
        return self

    def wait(self, timeout: Optional[float] = None,
             progress: Union[Progress, bool, None] = None) -> "Job":
        """Follows the job (the Wait stream) until it ends; returns it in its final state,
        whatever that is (a failed job is a successful wait: look at `state`, or use
        result()). `timeout`: seconds (None: no limit), past which DeadlineExceeded is
        raised, the job going on. `progress`: a callable given the Job when the wait starts and
        at each state change, or True for a line on stderr per state (TextProgress)."""
        report: Optional[Progress] = None
        if progress is True:
            report = TextProgress()
        elif callable(progress):
            report = progress
        last: Optional[JobState] = None
        stream = self._client._wait(self._id, timeout)
        try:
            for msg in stream:
                self._msg = msg
                last = JobState(msg.state)
                if report is not None:
                    report(self)
                if last.terminal:
                    return self
        except DeadlineExceeded as e:
            raise DeadlineExceeded(
                f"job {self._id} is still {(last or JobState.UNSPECIFIED).name.lower()} "
                f"after {timeout} s", e.code, e.request_id) from None
        finally:
            stream.close()  # cancels the call when the iteration stops early
        raise Unavailable(f"the Wait stream of job {self._id} ended before the job did (last "
                          f"state {(last or JobState.UNSPECIFIED).name.lower()})")

    def outputs(self) -> Dict[str, "np.ndarray[Any, Any]"]:
        """The outputs of the succeeded job (GetOutputs), by name in the graph's output
        order. Each array has its rtx dtype's NumPy type; bf16 arrives as float32 (exactly
        the bf16 values). FailedPrecondition if the job has not succeeded, NotFound if
        retention deleted the outputs."""
        return {t.name: decode(t) for t in self._client._get_outputs(self._id)}

    def result(self, timeout: Optional[float] = None,
               progress: Union[Progress, bool, None] = None) -> Dict[str, "np.ndarray[Any, Any]"]:
        """wait(), then the outputs; JobFailed (with the job) if it did not succeed."""
        self.wait(timeout, progress)
        if self.state is not JobState.SUCCEEDED:
            raise JobFailed(self)
        return self.outputs()

    def cancel(self) -> "Job":
        """Cancels the job: a queued job is cancelled at once, a running one stops at its
        next op (wait() for it). Cancelling a job that has ended changes nothing. Returns the
        job as the daemon answered."""
        self._msg = self._client._cancel(self._id)
        return self

"""
rtxd - the Python client of rtxd's jobs API.

    import numpy as np
    import rtxd

    g = rtxd.Graph("double")
    g.input("x", "f32", [None, 4])
    g.output(g.node("add", ["x", "x"], "y"))
    with rtxd.Client("127.0.0.1:8001") as client:
        job = client.submit(g, {"x": np.ones((2, 4), np.float32)})
        job.wait(progress=True)
        print(job.outputs()["y"])

Client submits jobs (an rtxd.Graph, an .rtxg file or an ONNX model, with NumPy inputs) and
lists them; Job follows one (wait with progress), fetches its outputs as NumPy arrays and
cancels it; errors are RtxdError subclasses by gRPC status (rtxd.errors); dtypes map to NumPy
as rtxd.dtypes says. docs/client-python.md in the rtxd repository is the guide.
"""

from rtxd.client import DEFAULT_ADDRESS, Client, Health
from rtxd.dtypes import DataType, Tensor, bf16_round, numpy_dtype
from rtxd.errors import (Cancelled, DeadlineExceeded, FailedPrecondition, InternalError,
                         InvalidArgument, JobFailed, NotFound, Overloaded, PermissionDenied,
                         ResourceExhausted, RtxdError, Unavailable, Unimplemented)
from rtxd.graph import Attr, Graph
from rtxd.job import Job, JobState, OutputInfo, RestartPolicy, TextProgress

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDRESS", "Attr", "Cancelled", "Client", "DataType", "DeadlineExceeded",
    "FailedPrecondition", "Graph", "Health", "InternalError", "InvalidArgument", "Job",
    "JobFailed", "JobState", "NotFound", "OutputInfo", "Overloaded", "PermissionDenied",
    "ResourceExhausted", "RestartPolicy", "RtxdError", "Tensor", "TextProgress", "Unavailable",
    "Unimplemented", "bf16_round", "numpy_dtype",
]

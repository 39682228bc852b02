"""
rtxd.dtypes - rtx.v1.DataType and NumPy: which array travels as which rtx dtype, and what
comes back.

| DataType | an input array of NumPy dtype       | an output arrives as                   |
| -------- | ----------------------------------- | -------------------------------------- |
| F32      | float32                             | float32                                |
| F16      | float16                             | float16                                |
| BF16     | bfloat16 (ml_dtypes), or any real   | float32 holding the bf16 values        |
|          | array wrapped as Tensor(a, "bf16")  | exactly (NumPy has no bfloat16)        |
| I8, I32, I64, U8, BOOL | int8, int32, int64, uint8, bool | the same                     |

An array is sent as the rtx dtype of its own NumPy dtype; there is no silent conversion: a
float64 or int16 array is refused with a TypeError that says what to convert it to. Tensor(a,
dtype) asks for a conversion explicitly (NumPy's astype; to bf16: round to nearest even).
Tensor data is row-major and little-endian on the wire whatever the host's byte order.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Dict, Tuple, Union, cast

import numpy as np
import numpy.typing as npt

from rtxd._proto.rtx.v1 import graph_pb2


class DataType(enum.IntEnum):
    """rtx.v1.DataType: the element types of rtx tensors (docs/ops.md)."""

    F32 = 1
    F16 = 2
    BF16 = 3
    I8 = 4
    I32 = 5
    I64 = 6
    U8 = 7
    BOOL = 8

    @property
    def short_name(self) -> str:
        """The name docs/ops.md and the `cast` op use: "f32", "bf16", "bool", ..."""
        return self.name.lower()

    def __str__(self) -> str:
        return self.short_name


DTypeLike = Union[DataType, str, "np.dtype[Any]", type]
"""A dtype as the API takes it: a DataType, an rtx name ("f32", "bf16"), or anything
numpy.dtype() accepts (np.float32, "int64")."""

# Element type of each DataType on the wire: little-endian; bf16 as its uint16 bit pattern.
_WIRE: Dict[DataType, "np.dtype[Any]"] = {
    DataType.F32: np.dtype("<f4"), DataType.F16: np.dtype("<f2"),
    DataType.BF16: np.dtype("<u2"), DataType.I8: np.dtype("i1"), DataType.I32: np.dtype("<i4"),
    DataType.I64: np.dtype("<i8"), DataType.U8: np.dtype("u1"), DataType.BOOL: np.dtype("u1"),
}
# The NumPy dtype of a received array (bf16 widened to float32).
_RECEIVED: Dict[DataType, "np.dtype[Any]"] = {
    DataType.F32: np.dtype(np.float32), DataType.F16: np.dtype(np.float16),
    DataType.BF16: np.dtype(np.float32), DataType.I8: np.dtype(np.int8),
    DataType.I32: np.dtype(np.int32), DataType.I64: np.dtype(np.int64),
    DataType.U8: np.dtype(np.uint8), DataType.BOOL: np.dtype(np.bool_),
}
# NumPy (kind, itemsize) -> DataType, whatever the byte order.
_OF_NUMPY: Dict[Tuple[str, int], DataType] = {
    ("f", 4): DataType.F32, ("f", 2): DataType.F16, ("i", 1): DataType.I8,
    ("i", 4): DataType.I32, ("i", 8): DataType.I64, ("u", 1): DataType.U8,
    ("b", 1): DataType.BOOL,
}
_NAMES = ", ".join(d.short_name for d in DataType)


def _is_bfloat16(nd: "np.dtype[Any]") -> bool:
    """ml_dtypes' bfloat16 (NumPy itself has none)."""
    return nd.name == "bfloat16" and nd.itemsize == 2


def _suggest(nd: "np.dtype[Any]") -> str:
    if nd.kind in "fc":
        return " (e.g. .astype(numpy.float32))"
    if nd.kind in "iu":
        return " (e.g. .astype(numpy.int64), or int32)"
    return ""


def data_type(dtype: DTypeLike) -> DataType:
    """The DataType of a dtype given as a DataType, an rtx name ("f32", "bf16", "bool") or a
    NumPy dtype. Raises TypeError for a dtype rtx has no equivalent of (float64, int16, ...)."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str):
        key = dtype.strip().upper()
        if key in DataType.__members__:
            return DataType[key]
        if key == "BFLOAT16":  # ml_dtypes' name, also when ml_dtypes is not imported
            return DataType.BF16
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a dtype (rtx dtypes: {_NAMES})") from None
    if _is_bfloat16(nd):
        return DataType.BF16
    dt = _OF_NUMPY.get((nd.kind, nd.itemsize))
    if dt is None:
        raise TypeError(f"numpy {nd} has no rtx dtype (rtx dtypes: {_NAMES}); convert the "
                        f"array first{_suggest(nd)}")
    return dt


def proto_dtype(dtype: DTypeLike) -> graph_pb2.DataType:
    """The rtx.v1.DataType value of a dtype (for fields of generated messages)."""
    return cast(graph_pb2.DataType, int(data_type(dtype)))


def numpy_dtype(dtype: DTypeLike) -> "np.dtype[Any]":
    """The NumPy dtype an array of this rtx dtype arrives as (bf16: float32)."""
    return _RECEIVED[data_type(dtype)]


@dataclass(frozen=True)
class Tensor:
    """An array and the rtx dtype it is to travel as, converting it if need be: the way to
    send bf16 from float data (`Tensor(x, "bf16")`, rounded to nearest even), or to send an
    array of another dtype on purpose (`Tensor(ids, "i32")`: NumPy's astype)."""

    data: npt.ArrayLike
    dtype: DTypeLike


TensorLike = Union[Tensor, npt.ArrayLike]
"""An input value: a NumPy array (sent as its own dtype), anything numpy.asarray takes, or a
Tensor naming the dtype."""


def bf16_bits(x: npt.ArrayLike) -> "npt.NDArray[np.uint16]":
    """bfloat16 bit patterns of float values: through float32, rounded to nearest even (as
    rtxd's kernels round); NaN stays NaN (quiet)."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    wide = f.view(np.uint32).astype(np.uint64)
    rounded = (wide + 0x7FFF + ((wide >> 16) & 1)) >> 16
    quiet = (wide >> 16) | 0x40
    return np.where(np.isnan(f), quiet, rounded).astype(np.uint16).reshape(f.shape)


def bf16_to_float32(bits: npt.ArrayLike) -> "npt.NDArray[np.float32]":
    """float32 values of bfloat16 bit patterns (exact)."""
    b = np.asarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def bf16_round(x: npt.ArrayLike) -> "npt.NDArray[np.float32]":
    """x rounded to bfloat16, as float32: what a bf16 output of the same values arrives as."""
    return bf16_to_float32(bf16_bits(x))


def _wire_bytes(a: "np.ndarray[Any, Any]", dt: DataType, what: str) -> bytes:
    """The data of `a` as `dt` on the wire (a conversion when the dtypes differ)."""
    if _is_bfloat16(a.dtype) and dt is DataType.BF16:
        return np.ascontiguousarray(a).view(np.uint16).astype("<u2").tobytes()
    if a.dtype.kind not in "fiub" and not _is_bfloat16(a.dtype):
        raise TypeError(f"{what}: a numpy {a.dtype} array cannot be sent as {dt} (rtx dtypes: "
                        f"{_NAMES})")
    if dt is DataType.BF16:
        return bf16_bits(a).astype("<u2").tobytes()
    if dt is DataType.BOOL:
        return np.ascontiguousarray(a, dtype=np.bool_).view(np.uint8).tobytes()
    return np.ascontiguousarray(a, dtype=_WIRE[dt]).tobytes()


def encode(name: str, value: TensorLike, dtype: DTypeLike | None = None,
           what: str | None = None) -> graph_pb2.Tensor:
    """An rtx.v1.Tensor named `name` from a value (see TensorLike), as `dtype` when given
    (a conversion), else as the value's own dtype. `what` names it in errors."""
    what = what or f"tensor '{name}'"
    if isinstance(value, Tensor):
        a, dtype = np.asarray(value.data), value.dtype
    else:
        a = np.asarray(value)
    try:
        dt = data_type(dtype if dtype is not None else a.dtype)
    except TypeError as e:
        raise TypeError(f"{what}: {e}") from None
    return graph_pb2.Tensor(name=name, dtype=proto_dtype(dt), dims=[int(d) for d in a.shape],
                            data=_wire_bytes(a, dt, what))


def decode(t: graph_pb2.Tensor) -> "np.ndarray[Any, Any]":
    """The NumPy array of an rtx.v1.Tensor: its shape, the received dtype of its DataType
    (bf16: float32), a fresh writable array in native byte order."""
    try:
        dt = DataType(t.dtype)
    except ValueError:
        raise ValueError(f"tensor '{t.name}': unknown dtype {t.dtype}") from None
    shape = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in shape):
        raise ValueError(f"tensor '{t.name}': negative dimension in {list(shape)}")
    wire = _WIRE[dt]
    want = math.prod(shape) * wire.itemsize
    if len(t.data) != want:
        raise ValueError(f"tensor '{t.name}': {len(t.data)} data bytes for {dt}{list(shape)} "
                         f"({want} expected)")
    raw = np.frombuffer(t.data, dtype=wire)
    if dt is DataType.BF16:
        a: "np.ndarray[Any, Any]" = bf16_to_float32(raw)
    elif dt is DataType.BOOL:
        a = raw != 0
    else:
        a = raw.astype(_RECEIVED[dt])
    return a.reshape(shape)

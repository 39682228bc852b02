"""
rtxd.graph - Graph, a builder of rtx.v1.Graph: declared inputs, initializers (weights) from
NumPy arrays, nodes with attributes, outputs. The ops and their attributes are those of
docs/ops.md.

    g = rtxd.Graph("mlp")
    x = g.input("x", "f32", [None, 64])           # None (or -1): bound when the job runs
    w = g.initializer("w", np.ones((64, 8), np.float32))
    h = g.node("matmul", [x, w])                  # returns the output's name
    g.output(g.node("relu", [h], "y"))

DESIGN
The builder checks what it can see without the daemon: names (non-empty, each value defined
once, node names unique), dtypes, shapes, tensor data, attribute types, and, when the graph
is encoded, that every node input and graph output names a value something defines. Ops,
arities, attribute names and shapes are for the daemon to judge: Submit answers
InvalidArgument naming the node. Nodes may be added in any order (the daemon sorts them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np

from rtxd._proto.rtx.v1 import graph_pb2
from rtxd.dtypes import DataType, DTypeLike, Tensor, data_type, encode, proto_dtype

AttrKind = Literal["i", "f", "s", "ints", "floats", "t"]


@dataclass(frozen=True)
class Attr:
    """An attribute value with its type stated, where the value alone does not say it:
    Attr("floats", []), Attr("f", 1) (a float from an int), Attr("t", array, "bf16")."""

    kind: AttrKind
    value: Any
    dtype: Optional[DTypeLike] = None  # of a tensor ("t"): as for Graph.initializer


AttrValue = Union[Attr, bool, int, float, str, Sequence[int], Sequence[float],
                  "np.ndarray[Any, Any]", Tensor, np.integer, np.floating]
"""An attribute as Graph.node takes it: int (and bool: 0/1) -> int, float -> float, str ->
string, a sequence of ints -> ints, of numbers -> floats (an empty sequence: ints), an array or
Tensor -> tensor; Attr states the type."""

Shape = Optional[Sequence[Optional[int]]]
"""A declared shape: a sequence of sizes, None or -1 for a size bound at run time; None for
no shape at all."""


def _is_int(v: Any) -> bool:
    return isinstance(v, (bool, int, np.integer))


def _is_real(v: Any) -> bool:
    return _is_int(v) or isinstance(v, (float, np.floating))


def _typed(name: str, v: AttrValue) -> Attr:
    if isinstance(v, Attr):
        return v
    if _is_int(v):
        return Attr("i", v)
    if isinstance(v, (float, np.floating)):
        return Attr("f", v)
    if isinstance(v, str):
        return Attr("s", v)
    if isinstance(v, (np.ndarray, Tensor)):
        return Attr("t", v)
    if isinstance(v, (list, tuple)):
        if all(_is_int(e) for e in v):
            return Attr("ints", v)
        if all(_is_real(e) for e in v):
            return Attr("floats", v)
    raise TypeError(f"attribute '{name}': cannot tell the type of {v!r}; use rtxd.Attr(kind, "
                    "value) with kind one of i, f, s, ints, floats, t")


def _fill_attr(a: graph_pb2.Attribute, name: str, value: AttrValue) -> None:
    t = _typed(name, value)
    a.name = name
    try:
        if t.kind == "i":
            a.i = int(t.value)
        elif t.kind == "f":
            a.f = float(t.value)
        elif t.kind == "s":
            if not isinstance(t.value, str):
                raise TypeError(f"a string attribute needs a str, not {t.value!r}")
            a.s = t.value
        elif t.kind == "ints":
            a.ints.SetInParent()
            a.ints.values.extend(int(e) for e in t.value)
        elif t.kind == "floats":
            a.floats.SetInParent()
            a.floats.values.extend(float(e) for e in t.value)
        elif t.kind == "t":
            a.t.CopyFrom(encode(name, t.value, t.dtype, what=f"attribute '{name}'"))
        else:
            raise ValueError(f"unknown kind {t.kind!r} (i, f, s, ints, floats, t)")
    except (TypeError, ValueError, OverflowError) as e:
        if str(e).startswith(f"attribute '{name}'"):
            raise
        raise type(e)(f"attribute '{name}': {e}") from None


def _dims(shape: Sequence[Optional[int]], what: str) -> List[int]:
    dims = []
    for d in shape:
        if d is None or (_is_int(d) and int(d) == -1):
            dims.append(-1)
        elif _is_int(d) and int(d) >= 0:
            dims.append(int(d))
        else:
            raise ValueError(f"{what}: bad dimension {d!r} in {list(shape)} (a size >= 0, or "
                             "None / -1 for one bound at run time)")
    return dims


class Graph:
    """An rtx.v1.Graph under construction. Every method that adds something returns the
    name of the value it defines, to pass on as a node input."""

    def __init__(self, name: str = "graph") -> None:
        self._g = graph_pb2.Graph(name=name, ir_version=1)
        self._defined: Dict[str, str] = {}  # value name -> what defines it, for messages
        self._node_names: Dict[str, int] = {}
        self._count = 0

    # --- loading and encoding

    @classmethod
    def from_proto(cls, message: graph_pb2.Graph) -> "Graph":
        """A builder holding a copy of an rtx.v1.Graph message, to submit or extend."""
        g = cls(message.name)
        g._g.CopyFrom(message)
        for vi in message.inputs:
            g._defined.setdefault(vi.name, "an input")
        for t in message.initializers:
            g._defined.setdefault(t.name, "an initializer")
        for i, n in enumerate(message.nodes):
            g._node_names.setdefault(n.name, i)
            for o in n.outputs:
                g._defined.setdefault(o, f"node '{n.name}'")
        g._count = len(message.nodes)
        return g

    @classmethod
    def from_bytes(cls, data: bytes) -> "Graph":
        """A builder of an encoded rtx.v1.Graph (the contents of an .rtxg file)."""
        msg = graph_pb2.Graph()
        try:
            msg.ParseFromString(bytes(data))
        except Exception as e:  # protobuf's DecodeError
            raise ValueError(f"not an rtx.v1.Graph: {e}") from None
        return cls.from_proto(msg)

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "Graph":
        """A builder of an .rtxg file (rtxrun's and rtxctl's graph files)."""
        try:
            return cls.from_bytes(Path(path).read_bytes())
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def to_proto(self) -> graph_pb2.Graph:
        """A copy of the graph as an rtx.v1.Graph message, after check()."""
        self.check()
        msg = graph_pb2.Graph()
        msg.CopyFrom(self._g)
        return msg

    def to_bytes(self) -> bytes:
        """The graph encoded (an .rtxg file's contents), after check()."""
        self.check()
        return self._g.SerializeToString()

    def save(self, path: Union[str, "os.PathLike[str]"]) -> Path:
        """Writes the graph as an .rtxg file; returns the path."""
        p = Path(path)
        p.write_bytes(self.to_bytes())
        return p

    # --- what it holds

    @property
    def name(self) -> str:
        return self._g.name

    @property
    def inputs(self) -> Dict[str, Tuple[DataType, Optional[Tuple[int, ...]]]]:
        """Declared inputs: name -> (dtype, shape with -1 for sizes bound at run time, or None
        without a shape), in order."""
        return {vi.name: (DataType(vi.dtype), tuple(vi.dims) if vi.has_shape else None)
                for vi in self._g.inputs}

    @property
    def outputs(self) -> List[str]:
        """Names of the graph outputs, in the order the job returns them."""
        return [vo.name for vo in self._g.outputs]

    def __len__(self) -> int:
        """The number of nodes."""
        return len(self._g.nodes)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self._g.inputs)} inputs, "
                f"{len(self._g.initializers)} initializers, {len(self._g.nodes)} nodes, "
                f"outputs {self.outputs})")

    # --- building

    def _define(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: a value name must be a non-empty string, not {name!r}")
        if name in self._defined:
            raise ValueError(f"{what}: value '{name}' is already defined by "
                             f"{self._defined[name]}")
        self._defined[name] = what

    def input(self, name: str, dtype: DTypeLike, shape: Shape = None) -> str:
        """Declares a graph input: its dtype and shape (None or -1 for a size bound when the
        job runs; shape None: any shape). Returns `name`."""
        what = f"input '{name}'"
        dt = data_type(dtype)
        dims = _dims(shape, what) if shape is not None else None
        self._define(name, "an input")
        vi = self._g.inputs.add(name=name, dtype=proto_dtype(dt))
        if dims is not None:
            vi.dims.extend(dims)
            vi.has_shape = True
        return name

    def initializer(self, name: str, value: Union[Tensor, Any],
                    dtype: Optional[DTypeLike] = None) -> str:
        """Adds a named constant (a weight) from an array, as its own dtype or as `dtype`
        (rtxd.dtypes: float64 is refused, bf16 rounds). Returns `name`."""
        t = encode(name, value, dtype, what=f"initializer '{name}'")
        self._define(name, "an initializer")
        self._g.initializers.append(t)
        return name

    @overload
    def node(self, op: str, inputs: Sequence[Optional[str]], outputs: Union[str, None] = None,
             *, name: Optional[str] = None, **attrs: AttrValue) -> str: ...

    @overload
    def node(self, op: str, inputs: Sequence[Optional[str]],
             outputs: Union[List[str], Tuple[str, ...]],
             *, name: Optional[str] = None, **attrs: AttrValue) -> List[str]: ...

    def node(self, op: str, inputs: Sequence[Optional[str]],
             outputs: Union[str, Sequence[str], None] = None, *, name: Optional[str] = None,
             **attrs: AttrValue) -> Union[str, List[str]]:
        """Adds a node: `op` (docs/ops.md) on `inputs` (value names; None or "" for an
        omitted optional input), producing `outputs` (one name, or a list for several; None:
        one output named after the node), attributes as keyword arguments. The node's name is
        `name`, else "<op>_<n>" (n counts the nodes). Returns the output's name, or the list
        of names when `outputs` is a list."""
        node_name = name if name is not None else f"{op}_{self._count + 1}"
        what = f"node '{node_name}'"
        if not isinstance(op, str) or not op:
            raise ValueError(f"{what}: op must be a non-empty string, not {op!r}")
        if isinstance(inputs, str):
            raise TypeError(f"{what}: inputs must be a list of value names, not the string "
                            f"{inputs!r}")
        ins = ["" if i is None else i for i in inputs]
        for i in ins:
            if not isinstance(i, str):
                raise TypeError(f"{what}: input {i!r} is not a value name")
        if not isinstance(node_name, str) or not node_name:
            raise ValueError(f"node name must be a non-empty string, not {node_name!r}")
        if node_name in self._node_names:
            raise ValueError(f"{what}: a node of that name already exists")
        outs = [node_name] if outputs is None else [outputs] if isinstance(outputs, str) \
            else list(outputs)
        if not outs:
            raise ValueError(f"{what}: a node has at least one output")
        msg = graph_pb2.Node(name=node_name, op=op, inputs=ins, outputs=outs)
        for k, v in attrs.items():
            _fill_attr(msg.attrs.add(), k, v)
        if len(set(outs)) != len(outs):
            raise ValueError(f"{what}: an output name repeats in {outs}")
        for o in outs:  # checked last: nothing is defined unless the whole node is good
            if not isinstance(o, str) or not o:
                raise ValueError(f"{what}: an output name must be a non-empty string, not {o!r}")
            if o in self._defined:
                raise ValueError(f"{what}: value '{o}' is already defined by {self._defined[o]}")
        for o in outs:
            self._defined[o] = what
        self._count += 1
        self._node_names[node_name] = len(self._g.nodes)
        self._g.nodes.append(msg)
        return outs if outputs is not None and not isinstance(outputs, str) else outs[0]

    def output(self, name: str, dtype: Optional[DTypeLike] = None, shape: Shape = None) -> str:
        """Makes value `name` a graph output (outputs come back in the order they are
        declared). dtype and shape are informative only. Returns `name`."""
        what = f"output '{name}'"
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: a value name must be a non-empty string")
        if name in self.outputs:
            raise ValueError(f"{what}: already an output")
        vo = self._g.outputs.add(name=name)
        if dtype is not None:
            vo.dtype = proto_dtype(dtype)
        if shape is not None:
            vo.dims.extend(_dims(shape, what))
            vo.has_shape = True
        return name

    def check(self) -> None:
        """Raises ValueError naming the first reference to a value nothing defines (a node
        input, a graph output), or a graph without outputs; the rest is the daemon's to
        judge."""
        if not self._g.outputs:
            raise ValueError(f"graph '{self.name}' has no outputs (Graph.output)")
        defined = set(self._defined)
        for n in self._g.nodes:
            for i in n.inputs:
                if i and i not in defined:
                    raise ValueError(f"node '{n.name}': input '{i}' is not an input, an "
                                     "initializer or a node output of the graph")
        for vo in self._g.outputs:
            if vo.name not in defined:
                raise ValueError(f"output '{vo.name}' is not an input, an initializer or a "
                                 "node output of the graph")


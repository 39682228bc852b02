"""
rtxd's protobuf text parser (formats/pbtext.c, through the rtx-pbtext-encode filter) against
Python's google.protobuf.text_format on the same texts: Triton ModelConfig texts (the examples
of Triton's model_configuration.md and every corner of the syntax), KServe tensor contents
(every repeated scalar type, bytes) and ONNX AttributeProto / ModelProto (proto2: optional
fields, bytes with any byte, nested messages). Both parse each text; rtxd's binary encoding
must decode to a message equal to Python's and, where the text has no map field, equal its
encoding byte for byte. Texts that protobuf refuses are refused by rtxd too, with
"stdin:LINE:COL:" on the line protobuf names.

The Python classes come from proto/inference/*.proto compiled here into a private descriptor
pool (so they never meet tritonclient's copy of model_config.proto in the default pool), and
from the onnx package for ONNX.
"""

import math
import re
import subprocess

import onnx
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

import serving_harness as sh
from serving_harness import harness

ENCODE = "rtx-pbtext-encode"


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("pbtext") / "inference.desc"
    rc = protoc.main(["protoc", f"--proto_path={sh.REPO / 'proto'}", "--include_imports",
                      f"--descriptor_set_out={out}", "inference/model_config.proto",
                      "inference/grpc_service.proto"])
    assert rc == 0
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(f)
    cls = {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n))
           for n in ("inference.ModelConfig", "inference.InferTensorContents")}
    cls["onnx.AttributeProto"] = onnx.AttributeProto
    cls["onnx.ModelProto"] = onnx.ModelProto
    return cls


def rtx_encode(type_name, text):
    harness.need_binary(ENCODE)
    p = subprocess.run([str(harness.bin_path(ENCODE)), type_name], input=text.encode(),
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def has_nan(m):
    return "nan" in text_format.MessageToString(m)


def has_map(m):
    """Whether m or a message in it holds a map entry (encodings may order those freely)."""
    for f, v in m.ListFields():
        if f.message_type is None:
            continue
        if f.message_type.GetOptions().map_entry:
            return True
        if any(has_map(x) for x in (v if f.is_repeated else [v])):
            return True
    return False


def check_same(classes, type_name, text, byte_exact=True):
    """Parses text with both; the messages must be equal (and, without maps, the bytes)."""
    want = text_format.Parse(text, classes[type_name]())
    rc, out, err = rtx_encode(type_name, text)
    assert rc == 0, f"rtxd refused what protobuf reads:\n{text}\n{err}"
    got = classes[type_name].FromString(out)
    if has_nan(want):  # NaN != NaN: compare the text forms
        assert text_format.MessageToString(got) == text_format.MessageToString(want)
    else:
        assert got == want, f"{text}\nrtxd: {got}\nprotobuf: {want}"
    if byte_exact and not has_map(want):
        assert out == want.SerializeToString(deterministic=True), text
    return got


# Triton's documented configurations (docs/user_guide/model_configuration.md) and the
# ONNX Runtime backend's README, as written there.
TRITON_DOCS = [
    """
  platform: "tensorrt_plan"
  max_batch_size: 8
  input [
    {
      name: "input0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    },
    {
      name: "input1"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  output [
    {
      name: "output0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  version_policy: { all { }}
""",
    """
  input [
    {
      name: "in"
      dims: [ 1 ]
      reshape: { shape: [ ] }
    }
  ]
""",
    """
  instance_group [
    {
      count: 1
      kind: KIND_GPU
      gpus: [ 0 ]
    },
    {
      count: 2
      kind: KIND_GPU
      gpus: [ 1, 2 ]
    }
  ]
""",
    """
  instance_group [
    {
      count: 1
      kind: KIND_GPU
      gpus: [ 0, 1, 2 ]
      rate_limiter {
        resources [
          {
            name: "R1"
            count: 4
          },
          {
            name: "R2"
            global: True
            count: 2
          }
        ]
        priority: 2
      }
    }
  ]
""",
    """
cc_model_filenames [
  {
    key: "7.5"
    value: "resnet50_T4.plan"
  },
  {
    key: "8.0"
    value: "resnet50_A100.plan"
  }
]
""",
    """
  dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 100
    priority_levels: 2
    default_priority_level: 2
    default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 500
                           allow_timeout_override: true max_queue_size: 16 }
    priority_queue_policy { key: 1 value { max_queue_size: 4 } }
  }
""",
    """
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }}
  ]
}}
""",
    """
parameters { key: "cudnn_conv_algo_search" value: { string_value: "0" } }
parameters { key: "gpu_mem_limit" value: { string_value: "4294967200" } }
optimization {
  graph : {
    level : 1
}}
""",
    """
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    {
      name: "START"
      control [
        {
          kind: CONTROL_SEQUENCE_START
          fp32_false_true: [ 0, 1 ]
        }
      ]
    },
    {
      name: "CORRID"
      control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ]
    }
  ]
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ] }
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32
            dims: [ -1 ] initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true
            name: "initial state" } } ]
}
""",
    """
name: "ensemble_model"
platform: "ensemble"
max_batch_size: 1
ensemble_scheduling {
  step [
    {
      model_name: "image_preprocess_model"
      model_version: -1
      input_map {
        key: "RAW_IMAGE"
        value: "IMAGE"
      }
      output_map {
        key: "PREPROCESSED_OUTPUT"
        value: "preprocessed_image"
      }
    }
  ]
}
""",
    """
model_warmup [{
  name: "warmup sample"
  batch_size: 8
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "raw" } }
  count: 2
}]
response_cache { enable: true }
model_transaction_policy { decoupled: true }
model_repository_agents { agents [ { name: "checksum"
  parameters { key: "MD5:model.onnx" value: "b6f3..." } } ] }
""",
]

# Every corner of the syntax that protobuf accepts.
SYNTAX = [
    "",
    "# only a comment\n",
    'name: "a" "b" \'c\'  # adjacent strings are one\n',
    r'name: "\x41\101\u00e9\U0001F600\n\t\\\"\'\a\b\f\v"',
    r"name: 'it\'s'",
    "max_batch_size: 0x10",
    "max_batch_size: 010",
    "max_batch_size: -0x10",
    "max_batch_size: +5",
    "max_batch_size: 00",
    "max_batch_size: -2147483648",
    "max_batch_size:1",
    'name:"a"max_batch_size:1',
    'name: "x"; max_batch_size: 1,',
    'name: "x" max_batch_size: 1, input {name: "a",};',
    'input [{name: "a"}, {name: "b"}]',
    'input: [{name: "a"}, <name: "b">]',
    "input <name: 'a'> input: <name: 'b'>",
    "input {dims: [1,2] dims: 3 dims: [] dims: -1}",
    "input: [ ]",
    "input { data_type: 11 optional: t } input { data_type: TYPE_BF16 optional: True }",
    "input { optional: 1 format: FORMAT_NCHW }",
    "dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }",
    "version_policy { specific { versions: [1, 3, 9223372036854775807] } }",
    "version_policy: { latest: { num_versions: 4294967295 } }",
    "sequence_batching { direct { minimum_slot_utilization: 1.5f } }",
    "sequence_batching { direct { minimum_slot_utilization: .5 } }",
    "sequence_batching { direct { minimum_slot_utilization: 1.e2 } }",
    "sequence_batching { direct { minimum_slot_utilization: 5 } }",
    "sequence_batching { direct { minimum_slot_utilization: -5F } }",
    "sequence_batching { direct { minimum_slot_utilization: 2.5e-3 } }",
    "sequence_batching { direct { minimum_slot_utilization: inf } }",
    "sequence_batching { direct { minimum_slot_utilization: -Infinity } }",
    "sequence_batching { direct { minimum_slot_utilization: nan } }",
    "sequence_batching { direct { minimum_slot_utilization: 1e-50 } }",
    'metric_tags { key: "team" value: "search" } metric_tags [{key: "tier" value: "1"}]',
    'parameters { key: "a" value { string_value: "x" } } parameters [{key: "b"}]',
    "instance_group [ { count: 2 kind: 2 gpus: [0x1, 02] secondary_devices "
    "{ kind: KIND_NVDLA device_id: -3 } profile: ['0', \"1\"] passive: false "
    "host_policy: \"policy_0\" } ]",
]

# Map fields: a repeated key's last value wins (encodings may order entries differently).
MAPS = [
    'parameters { key: "a" value { string_value: "x" } } '
    'parameters { key: "a" value { string_value: "y" } }',
    'metric_tags [{key: "k" value: "1"}, {key: "j" value: "2"}, {key: "k" value: "3"}]',
    "dynamic_batching { priority_queue_policy { key: 2 value { max_queue_size: 1 } } "
    "priority_queue_policy { key: 2 value { max_queue_size: 7 } } }",
]

TENSOR_CONTENTS = [
    "bool_contents: [true, false, t, f, 1, 0] int_contents: [-2147483648, 2147483647, 0x7f]"
    " int64_contents: [-9223372036854775808, 9223372036854775807] uint_contents: 4294967295"
    " uint64_contents: [0, 18446744073709551615, 0xffffffffffffffff]"
    " fp32_contents: [1, -0.5, 3.4028234e38, 1.4e-45, -inf]"
    " fp64_contents: [1e-300, 1.7976931348623157e308, -0.0, 3]",
    r'bytes_contents: ["\000\001\377\x80", "\xff\xfe", "", "plain" "joined"]',
]

ONNX = [
    ("onnx.AttributeProto",
     r'name: "alpha" type: FLOAT f: 0.25 doc_string: "\303\251t\303\251"'),
    ("onnx.AttributeProto",
     r'name: "s" type: STRING s: "\000\377\x80 any bytes" i: 0 f: 0'),
    ("onnx.AttributeProto",
     "name: \"shape\" type: INTS ints: [1, -1, 9223372036854775807] floats: [0.5, 2]"
     " strings: ['a', \"\\x01\"]"),
    ("onnx.AttributeProto",
     r't { dims: [2, 2] data_type: 1 raw_data: "\000\000\200?\000\000\000@\000\000@@\000\000\200@"'
     ' name: "w" } type: TENSOR name: "value"'),
    ("onnx.ModelProto",
     'ir_version: 9 producer_name: "rtxd" opset_import { domain: "" version: 18 } '
     'graph { name: "g" node { op_type: "Relu" input: "x" output: "y" name: "r" } '
     'input { name: "x" type { tensor_type { elem_type: 1 shape { dim { dim_param: "N" } '
     'dim { dim_value: 4 } } } } } '
     'output { name: "y" type { tensor_type { elem_type: 1 } } } }'),
]


@pytest.mark.parametrize("text", TRITON_DOCS + SYNTAX, ids=lambda t: t.strip()[:40])
def test_model_config_same_as_protobuf(classes, text):
    check_same(classes, "inference.ModelConfig", text)


@pytest.mark.parametrize("text", MAPS, ids=lambda t: t[:40])
def test_map_last_value_wins(classes, text):
    got = check_same(classes, "inference.ModelConfig", text, byte_exact=False)
    for m in (got.parameters, got.metric_tags, got.dynamic_batching.priority_queue_policy):
        assert len(m) in (0, 1, 2)


@pytest.mark.parametrize("text", TENSOR_CONTENTS, ids=lambda t: t[:40])
def test_tensor_contents_same_as_protobuf(classes, text):
    got = check_same(classes, "inference.InferTensorContents", text)
    if got.fp32_contents:
        assert math.isinf(got.fp32_contents[-1])


@pytest.mark.parametrize("type_name,text", ONNX, ids=lambda t: t[:40])
def test_onnx_proto2_same_as_protobuf(classes, type_name, text):
    check_same(classes, type_name, text)


# Texts protobuf refuses: rtxd refuses them too, naming the line protobuf names.
BAD = [
    "max_batch_size: 8 max_batch_size: 9",
    'input { name: "a" name: "b" }',
    "Name: \"x\"",
    "input {\n  nope: 1\n}",
    "input {dims [1,2]}",
    "input { dims: [1 2] }",
    "input { dims: [1,2,] }",
    "name: [\"a\"]",
    "input: 5",
    "max_batch_size {}",
    "max_batch_size: - 5",
    "max_batch_size: 1.0",
    "max_batch_size: 2147483648",
    "max_batch_size: -2147483649",
    "max_batch_size: 09",
    "max_batch_size: 0x",
    "max_batch_size: 1e3",
    "max_batch_size: inf",
    "dynamic_batching { max_queue_delay_microseconds: 18446744073709551616 }",
    "dynamic_batching { max_queue_delay_microseconds: -1 }",
    "version_policy { latest {} all {} }",
    "dynamic_batching {} sequence_batching {}",
    "input { data_type: TYPE_NOPE }",
    "input { optional: 2 }",
    "input { optional: FALSE }",
    "sequence_batching { direct { minimum_slot_utilization: 1e } }",
    "sequence_batching { direct { minimum_slot_utilization: 0x10 } }",
    'name: "\\xff"',
    'input { name: "a\nb" }',
    'name: "\\u00"',
    'name: "\\ud800"',
    'name: "\\U00110000"',
    'name: x',
    'name "x"',
    "\n\ninput {name: \"a\" ",
    "input {name: \"a\" }}",
    "input {name: \"a\" >",
    "[foo.bar]: 1",
    'name: "x";; max_batch_size: 1',
    "input { reshape: { shape: [ 1, ] } }",
    "@",
]


@pytest.mark.parametrize("text", BAD, ids=lambda t: t.strip()[:40])
def test_refused_like_protobuf(classes, text):
    with pytest.raises(text_format.ParseError) as e:
        text_format.Parse(text, classes["inference.ModelConfig"]())
    rc, out, err = rtx_encode("inference.ModelConfig", text)
    assert rc == 1, f"rtxd read what protobuf refuses ({e.value}):\n{text}"
    m = re.match(r"stdin:(\d+):(\d+): ", err)
    assert m, err
    want_line = re.match(r"(\d+):(\d+)", str(e.value))
    if want_line:
        assert int(m.group(1)) == int(want_line.group(1)), (err, str(e.value))


# Stricter than protobuf, on purpose (docs/serving.md): each refusal names the problem.
STRICT = [
    ("input { data_type: 99 }", "has no value numbered 99"),
    (r'name: "\q"', "unknown escape '\\q'"),
    ("max_batch_size: 1_000", "expected an integer"),
    ("sequence_batching { direct { minimum_slot_utilization: 1e40 } }", "out of range"),
    ('name: "\\000"', "NUL byte"),
]


@pytest.mark.parametrize("text,why", STRICT, ids=lambda t: str(t)[:40])
def test_stricter_than_protobuf(text, why):
    rc, out, err = rtx_encode("inference.ModelConfig", text)
    assert rc == 1 and why in err, err


def test_error_names_file_position_and_path():
    text = 'name: "m"\ninput [\n  { name: "a" dims: [ 4, 99999999999999999999 ] }\n]\n'
    rc, out, err = rtx_encode("inference.ModelConfig", text)
    assert rc == 1
    assert err.startswith("stdin:3:26: input[0].dims[1]: 99999999999999999999 is out of range"), err


def test_deep_nesting_is_bounded():
    deep = "graph { " + "node { attribute { g { " * 21 + "} } } " * 21 + "}"
    assert rtx_encode("onnx.ModelProto", deep)[0] == 0  # 64 levels
    deep = "graph { " + "node { attribute { g { " * 22 + "} } } " * 22 + "}"
    rc, out, err = rtx_encode("onnx.ModelProto", deep)
    assert rc == 1 and "nested deeper than 64" in err, err

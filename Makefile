# rtxd - one entry point. `make` builds everything into build/ (binaries in build/bin).
# Targets: all, run, test, test-unit, test-py, test-asan, bench, examples, clean, deps,
# gpu-bundle, gpu-pack, test-gpu, bench-gpu, bench-generate, bench-onnx, bench-onnx-gpu,
# bench-onnx-served (see docs/gpu.md). Set BUILD and SAN=1 for a sanitizer build
# (test-asan does this into build-asan/). CUDA_HOME: the CUDA toolkit (nvcc, cudart), not
# installed by deploy/install-deps.sh.

BUILD    ?= build
SAN      ?= 0
CC       ?= cc
PYTHON   ?= python3
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(CUDA_HOME)/bin/nvcc

# Goals that build nothing (test-gpu runs on the GPU machine, where nothing can be installed):
# no dependency check for them.
NOBUILD_GOALS := test-gpu bench-gpu bench-generate bench-onnx-gpu bench-onnx-served clean
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(NOBUILD_GOALS),$(MAKECMDGOALS)),)
NOBUILD := yes
endif
endif

ifneq ($(NOBUILD),yes)
ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
$(error rtxd: nvcc not found at $(NVCC): install the CUDA toolkit or set CUDA_HOME=/path/to/cuda \
  (every build compiles kernels/cuda/*.cu; no GPU is needed))
endif
# onnx.proto of Debian's libonnx-dev, compiled with protoc-c for onnx/ (the ONNX importer)
ONNX_PROTO := /usr/include/onnx/onnx.proto
# (protoc-c names the file relative to --proto_path: /usr/include + onnx/onnx.proto)
PKGS      := libprotobuf-c check grpc sqlite3 openssl inih libuv jansson libh2o libpcre2-8 libutf8proc
DEPS_OK   := $(shell pkg-config --exists $(PKGS) 2>/dev/null && command -v protoc-c >/dev/null \
                && [ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h -o \
                     -e /usr/include/cblas.h ] && [ -e $(ONNX_PROTO) ] && echo yes)
ifneq ($(DEPS_OK),yes)
$(info rtxd: build dependencies missing; running deploy/install-deps.sh)
$(shell bash deploy/install-deps.sh >&2)
endif
endif

OPENBLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
OPENBLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wstrict-prototypes
CFLAGS   := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC $(WARN) -I. -I$(BUILD)/gen \
            $(shell pkg-config --cflags libprotobuf-c 2>/dev/null) $(OPENBLAS_CFLAGS) -pthread \
            -MMD -MP
LDLIBS   := $(shell pkg-config --libs libprotobuf-c 2>/dev/null) $(OPENBLAS_LIBS) -lm -pthread
ifeq ($(SAN),1)
CFLAGS   += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=address,undefined
endif

PROTOS     := proto/rtx/v1/graph.proto proto/rtx/v1/jobs.proto proto/rtx/v1/admin.proto
# The KServe v2 inference service (Triton's package `inference`): C code for rtxd and librtx
# only (Python tests use tritonclient's own copy; two copies in one process would clash).
INFER_PROTOS := proto/inference/model_config.proto proto/inference/grpc_service.proto
PROTO_C    := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS) $(INFER_PROTOS))
PROTO_H    := $(PROTO_C:.c=.h)
PROTO_OBJ  := $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
GRAPH_PB_OBJ := $(BUILD)/obj/gen/rtx/v1/graph.pb-c.o
SVC_PB_OBJ   := $(filter-out $(GRAPH_PB_OBJ),$(PROTO_OBJ))

GRPC_LIBS   := $(shell pkg-config --libs grpc 2>/dev/null) -lgpr
STORE_LIBS  := $(shell pkg-config --libs sqlite3 openssl 2>/dev/null)
DAEMON_LIBS := $(GRPC_LIBS) $(STORE_LIBS) $(shell pkg-config --libs inih libuv 2>/dev/null)
# the HTTP server (daemon/http.c): libh2o on libuv (H2O_USE_LIBUV), its TLS dependency, jansson
DAEMON_LIBS += $(shell pkg-config --libs libh2o jansson 2>/dev/null) -lssl -lcrypto

# CUDA: .cu files through nvcc for Hopper (sm_90 code plus compute_90 PTX for newer parts),
# kernels/cuda/*.c through cc with the toolkit's headers; cudart linked dynamically, found at
# run time through the rpath (or LD_LIBRARY_PATH on the GPU machine). nvcc's host code needs
# libstdc++ (thread-safe statics in the kernel registration).
CUDA_ARCH   := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS   := -std=c++17 -O3 -g $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Wextra,-Werror \
               -Werror all-warnings -I. -MMD -MP
CUDA_CFLAGS := -isystem $(CUDA_HOME)/include
# attention-flash.cu's wgmma kernels are sm_90a instructions: that file's native code is sm_90a
# (H100/H200; the kernels are compiled out of its compute_90 PTX, and the launcher picks them on
# compute capability 9.0 only).
CUDA_ARCH_90A := -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
$(BUILD)/obj/kernels/cuda/attention-flash.cu.o: NVCCFLAGS := \
  $(subst $(CUDA_ARCH),$(CUDA_ARCH_90A),$(NVCCFLAGS))
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcublasLt -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ -ldl

CUDA_SRC    := $(wildcard kernels/cuda/*.cu)
CUDA_OBJ    := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CUDA_SRC))
CPU_VARIANT_ONLY := kernels/cpu/conv-direct.c kernels/cpu/conv-winograd.c kernels/cpu/gemm-packed.c
RUNTIME_SRC := $(wildcard runtime/*.c) $(wildcard kernels/*.c) \
               $(filter-out $(CPU_VARIANT_ONLY),$(wildcard kernels/cpu/*.c)) \
               $(wildcard kernels/cuda/*.c)
RUNTIME_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(RUNTIME_SRC)) $(CUDA_OBJ) $(GRAPH_PB_OBJ)
# The CPU op files the compiler vectorizes, built a second time for AVX2 + FMA + F16C on x86-64
# (kernels/cpu/cpu-impl.h, ISA variants): backend-cpu.c picks the build at run time.
# conv-direct.c, conv-winograd.c and gemm-packed.c exist in that build only (their generic
# fallbacks are ops-conv.c's im2col and OpenBLAS).
CPU_VARIANT_SRC := kernels/cpu/ops-elementwise.c kernels/cpu/ops-reduce.c \
                   kernels/cpu/ops-linalg.c kernels/cpu/ops-conv.c $(CPU_VARIANT_ONLY)
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
CPU_AVX2_OBJ := $(patsubst %.c,$(BUILD)/obj/%-avx2.o,$(CPU_VARIANT_SRC)) \
                $(BUILD)/obj/kernels/cpu/gemm-packed-avx512.o \
                $(BUILD)/obj/kernels/cpu/conv-direct-avx512.o \
                $(BUILD)/obj/kernels/cpu/conv-winograd-avx512.o
RUNTIME_OBJ  += $(CPU_AVX2_OBJ)
$(BUILD)/obj/kernels/cpu/backend-cpu.o: CFLAGS += -DRTX_CPU_HAVE_AVX2
endif
LIBRT       := $(BUILD)/lib/librtxrt.a

STORE_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard store/*.c))
LIBSTORE    := $(BUILD)/lib/librtxstore.a
# serving/: the inference serving core (model repository, versions, instances, batching),
# linked into rtxd and the unit tests
SERVING_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard serving/*.c))
LIBSERVING   := $(BUILD)/lib/librtxserving.a
SERVING_LIBS := $(shell pkg-config --libs jansson 2>/dev/null)
# formats/: model file formats (safetensors, tokenizer.json), read by serving/ (jansson; PCRE2
# for the tokenizers' pre-tokenizer patterns, utf8proc for their NFC normalizer)
FORMATS_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard formats/*.c))
LIBFORMATS   := $(BUILD)/lib/librtxformats.a
FORMATS_LIBS := $(shell pkg-config --libs jansson libpcre2-8 libutf8proc 2>/dev/null)
# scheduler/: SLA lanes, admission control, brownout (linked into rtxd and the unit tests)
SCHED_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard scheduler/*.c))
LIBSCHED    := $(BUILD)/lib/librtxsched.a
# device/: one owner per device (budget, backends, health, plan cache, placement, learned
# costs), shared by the job manager and serving; linked into every binary that links either,
# before librtxstore (the book of learned costs persists there) (libcrypto: the plan key's
# SHA-256)
DEVICE_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard device/*.c))
LIBDEVICE   := $(BUILD)/lib/librtxdevice.a
DEVICE_LIBS := $(shell pkg-config --libs openssl 2>/dev/null)
# onnx/: ONNX models as rtx graphs (onnx.proto from libonnx-dev through protoc-c), used by the
# job manager (jobs given as ONNX), serving (model.onnx) and rtxrun
ONNX_PB_C   := $(BUILD)/gen/onnx/onnx.pb-c.c
ONNX_PB_OBJ := $(BUILD)/obj/gen/onnx/onnx.pb-c.o
ONNX_OBJ    := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard onnx/*.c)) $(ONNX_PB_OBJ)
LIBONNX     := $(BUILD)/lib/librtxonnx.a
# generation/: text generation (decoder checkpoints as rtx graphs, paged KV cache, sampling,
# the iteration scheduler), used by serving/ for generative models
GEN_OBJ     := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard generation/*.c))
LIBGEN      := $(BUILD)/lib/librtxgen.a
DAEMON_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard daemon/*.c))
# the job manager (daemon/jobs-*.c), linked on its own into rtx-gpu-jobs-tests
JOBS_OBJ    := $(filter $(BUILD)/obj/daemon/jobs-%.o,$(DAEMON_OBJ))
# daemon objects without main(), linked into the unit tests
DAEMON_LIB_OBJ := $(filter-out $(BUILD)/obj/daemon/main.o,$(DAEMON_OBJ))
CLIENT_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard client/*.c))
# client/rtxctl/: the operator CLI, one file per command family
RTXCTL_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard client/rtxctl/*.c))
LIBCLIENT   := $(BUILD)/lib/librtx.a
LIBCLIENT_SO := $(BUILD)/lib/librtx.so

TEST_SRC   := $(wildcard tests/unit/*.c)
TEST_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRC))
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

# tests/gpu: plain C programs (no Check: they must not fork around a CUDA context).
# gpu-linalg-tests.c is its own program (rtx-gpu-linalg-tests), so is gpu-jobs-tests.c (the job
# manager on real devices: rtx-gpu-jobs-tests); the rest make rtx-gpu-tests. gpu-util.c (the
# check counter) goes into all three.
GPU_LINALG_TEST_OBJ := $(BUILD)/obj/tests/gpu/gpu-linalg-tests.o
GPU_JOBS_TEST_OBJ := $(BUILD)/obj/tests/gpu/gpu-jobs-tests.o
# the device layer on a real device: rtx-gpu-device-tests
GPU_DEVICE_TEST_OBJ := $(BUILD)/obj/tests/gpu/gpu-device-tests.o
GPU_UTIL_OBJ := $(BUILD)/obj/tests/gpu/gpu-util.o
GPU_TEST_OBJ := $(filter-out $(GPU_LINALG_TEST_OBJ) $(GPU_JOBS_TEST_OBJ) $(GPU_DEVICE_TEST_OBJ), \
                  $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/gpu/*.c)))

BINS := $(BUILD)/bin/rtxrun $(BUILD)/bin/rtxtok $(BUILD)/bin/rtx-unit-tests $(BUILD)/bin/make-examples \
        $(BUILD)/bin/rtxgen $(BUILD)/bin/rtxd $(BUILD)/bin/rtxctl $(LIBCLIENT) $(LIBCLIENT_SO) \
        $(BUILD)/lib/pkgconfig/rtx.pc $(BUILD)/bin/rtx-client-check $(BUILD)/bin/client-example \
        $(BUILD)/bin/rtx-gpu-tests $(BUILD)/bin/rtx-gpu-linalg-tests \
        $(BUILD)/bin/rtx-gpu-jobs-tests $(BUILD)/bin/rtx-gpu-device-tests \
        $(BUILD)/bin/rtx-bench-gpu $(BUILD)/bin/rtx-bench-cpu \
        $(BUILD)/bin/rtx-bench-sched $(BUILD)/bin/rtx-bench-mem-pool $(BUILD)/bin/rtx-pbtext-encode
EXAMPLES := $(BUILD)/examples/mlp.rtxg $(BUILD)/examples/transformer_block.rtxg \
            $(foreach m,simple mlp mlp_nobatch transformer_block mlp_wide mlp_wide_nobatch \
              tiny-chat,$(BUILD)/examples/models/$(m)/config.json)

.PHONY: all run run-examples test test-unit test-py test-integration test-serving test-asan \
        test-py-only \
        bench examples clean deps gpu-bundle gpu-pack test-gpu bench-gpu bench-generate \
        bench-onnx bench-onnx-gpu bench-onnx-served
all: $(BINS) $(EXAMPLES)

deps:
	bash deploy/install-deps.sh

# Generated code is kept: make would otherwise delete the headers as intermediate files.
.SECONDARY: $(PROTO_C) $(PROTO_H) $(ONNX_PB_C) $(ONNX_PB_C:.c=.h)
$(ONNX_PB_C) $(ONNX_PB_C:.c=.h): $(ONNX_PROTO)
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=/usr/include --c_out=$(BUILD)/gen onnx/onnx.proto

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-shadow -c $< -o $@

$(BUILD)/obj/daemon/%.o: CFLAGS += -DRTX_BUILD_ID='"$(shell git describe --always --dirty 2>/dev/null || echo dev)"'
$(BUILD)/obj/%.o: %.c | $(PROTO_H) $(ONNX_PB_C:.c=.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/kernels/cuda/%.o: CFLAGS += $(CUDA_CFLAGS)
# the CPU elementwise kernels are written as fixed blocks of 8 for the vectorizer: -O3 with
# -fno-trapping-math (rtxd never enables floating-point traps; results are unchanged) lets it
# vectorize the selects and divisions of erf and GELU, which otherwise stay scalar branches
# (and the NaN-keeping max of max pooling in ops-conv.c, attention's masks in ops-linalg.c)
$(BUILD)/obj/kernels/cpu/ops-elementwise.o $(BUILD)/obj/kernels/cpu/ops-elementwise-avx2.o \
$(BUILD)/obj/kernels/cpu/ops-conv.o $(BUILD)/obj/kernels/cpu/ops-conv-avx2.o \
$(BUILD)/obj/kernels/cpu/ops-linalg.o $(BUILD)/obj/kernels/cpu/ops-linalg-avx2.o: \
  CFLAGS += -O3 -fno-trapping-math
$(BUILD)/obj/kernels/cpu/conv-direct-avx2.o $(BUILD)/obj/kernels/cpu/gemm-packed-avx2.o \
$(BUILD)/obj/kernels/cpu/conv-winograd-avx2.o: CFLAGS += -O3 -ffp-contract=fast
$(BUILD)/obj/kernels/cpu/%-avx2.o: kernels/cpu/%.c | $(PROTO_H) $(ONNX_PB_C:.c=.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mavx2 -mfma -mf16c -DRTX_CPU_VARIANT=avx2 -c $< -o $@
# gemm-packed.c, conv-direct.c and conv-winograd.c once more with 512-bit vectors, in the
# AVX2 build (RTX_CPU_ISA=avx512)
$(BUILD)/obj/kernels/cpu/gemm-packed-avx512.o: kernels/cpu/gemm-packed.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O3 -ffp-contract=fast -mavx2 -mfma -mf16c -mavx512f \
	  -DRTX_CPU_VARIANT=avx2 -DRTX_GEMM_WIDE -c $< -o $@
$(BUILD)/obj/kernels/cpu/conv-direct-avx512.o $(BUILD)/obj/kernels/cpu/conv-winograd-avx512.o: \
$(BUILD)/obj/kernels/cpu/%-avx512.o: kernels/cpu/%.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O3 -ffp-contract=fast -mavx2 -mfma -mf16c -mavx512f \
	  -DRTX_CPU_VARIANT=avx2 -DRTX_CONV_WIDE -c $< -o $@
$(BUILD)/obj/tests/unit/test-cuda-flash.o: CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIBRT): $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSTORE): $(STORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSERVING): $(SERVING_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBFORMATS): $(FORMATS_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSCHED): $(SCHED_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBDEVICE): $(DEVICE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBONNX): $(ONNX_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBGEN): $(GEN_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/rtxd: $(DAEMON_OBJ) $(SVC_PB_OBJ) $(LIBSERVING) $(LIBGEN) $(LIBONNX) $(LIBFORMATS) $(LIBSCHED) \
                  $(LIBDEVICE) $(LIBSTORE) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(DAEMON_LIBS) $(SERVING_LIBS) $(FORMATS_LIBS) $(DEVICE_LIBS) \
	  $(LDLIBS) $(CUDA_LIBS)

# librtx: the client library (depends only on the protocol), static and shared
$(LIBCLIENT): $(CLIENT_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# librtx.so exports only rtx_client_* (client/librtx.map); librtx.so.0 is the soname link.
$(LIBCLIENT_SO): $(CLIENT_OBJ) $(PROTO_OBJ) client/librtx.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,librtx.so.0 -Wl,--version-script=client/librtx.map \
	  -Wl,--no-undefined -o $@ $(CLIENT_OBJ) $(PROTO_OBJ) $(GRPC_LIBS) \
	  $(shell pkg-config --libs libprotobuf-c) -pthread
	ln -sf librtx.so $@.0

$(BUILD)/lib/pkgconfig/rtx.pc: client/rtx.pc.in
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(abspath $(BUILD))|' -e 's|@INCLUDEDIR@|$(abspath client)|' $< > $@

# rtxctl: librtx for the daemon, rtxd's runtime for .npy files and random inputs, onnx/ for
# the inputs an ONNX model declares (submit MODEL.onnx), jansson for --json.
$(BUILD)/bin/rtxctl: $(RTXCTL_OBJ) $(LIBCLIENT) $(LIBONNX) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GRPC_LIBS) $(shell pkg-config --libs jansson 2>/dev/null) $(LDLIBS)

# The C driver of librtx that tests/integration runs against a live rtxd.
$(BUILD)/bin/rtx-client-check: $(BUILD)/obj/tests/integration/client-check.o $(LIBCLIENT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GRPC_LIBS) $(shell pkg-config --libs libprotobuf-c) -pthread

# The protobuf text parser as a filter (text in, binary encoding out), which
# tests/serving/test_triton_repo_pbtext.py compares with Python's text_format.
$(BUILD)/bin/rtx-pbtext-encode: $(BUILD)/obj/tests/serving/pbtext-encode.o \
                                $(BUILD)/obj/gen/inference/grpc_service.pb-c.o \
                                $(BUILD)/obj/gen/inference/model_config.pb-c.o $(ONNX_PB_OBJ) \
                                $(LIBFORMATS) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(FORMATS_LIBS) $(LDLIBS) $(CUDA_LIBS)

# The docs/client.md example, built as a user would: only client/ on the include path and
# librtx.so, no pkg-config and none of the build's generated headers.
$(BUILD)/bin/client-example: examples/client-example.c client/rtx.h $(LIBCLIENT_SO)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -O2 -g $(LDFLAGS) -Iclient -o $@ $< -L$(BUILD)/lib -lrtx \
	  -Wl,-rpath,$(abspath $(BUILD)/lib)

$(BUILD)/bin/rtxrun: $(BUILD)/obj/tools/rtxrun.o $(LIBONNX) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# rtxtok: tokenizer.json encode/decode from the command line (docs/tokenizer.md)
$(BUILD)/bin/rtxtok: $(BUILD)/obj/tools/rtxtok.o $(LIBFORMATS) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(FORMATS_LIBS) $(LDLIBS) $(CUDA_LIBS)

# rtxgen: a decoder checkpoint's info, prompt encoding and step-graph logits (docs/generation.md)
$(BUILD)/bin/rtxgen: $(BUILD)/obj/tools/rtxgen.o $(LIBGEN) $(LIBFORMATS) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(FORMATS_LIBS) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/bin/make-examples: $(BUILD)/obj/examples/make-examples.o $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/rtx-unit-tests: $(TEST_OBJ) $(DAEMON_LIB_OBJ) $(SVC_PB_OBJ) $(LIBSERVING) \
                            $(LIBGEN) $(LIBONNX) $(LIBFORMATS) $(LIBSCHED) $(LIBDEVICE) $(LIBSTORE) \
                            $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(DAEMON_LIBS) $(SERVING_LIBS) $(FORMATS_LIBS) \
	  $(DEVICE_LIBS) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/bin/rtx-gpu-tests: $(GPU_TEST_OBJ) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/bin/rtx-gpu-linalg-tests: $(GPU_LINALG_TEST_OBJ) $(GPU_UTIL_OBJ) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

$(GPU_JOBS_TEST_OBJ): CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/bin/rtx-gpu-jobs-tests: $(GPU_JOBS_TEST_OBJ) $(GPU_UTIL_OBJ) $(JOBS_OBJ) \
                                 $(BUILD)/obj/daemon/log.o $(SVC_PB_OBJ) $(LIBONNX) $(LIBSCHED) \
                                 $(LIBDEVICE) $(LIBSTORE) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(STORE_LIBS) $(shell pkg-config --libs inih 2>/dev/null) \
	  $(DEVICE_LIBS) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/bin/rtx-gpu-device-tests: $(GPU_DEVICE_TEST_OBJ) $(GPU_UTIL_OBJ) $(LIBDEVICE) $(LIBSTORE) \
                                   $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(STORE_LIBS) $(DEVICE_LIBS) $(LDLIBS) $(CUDA_LIBS)

examples: $(EXAMPLES)
$(EXAMPLES) &: $(BUILD)/bin/make-examples $(wildcard examples/tiny-chat/*.json)
	@mkdir -p $(BUILD)/examples
	$(BUILD)/bin/make-examples $(BUILD)/examples

# The README's first command: build, then run rtxd in the foreground on its embedded defaults
# (gRPC on 127.0.0.1:8001, store under ./var, CPU backend), serving the example model
# repository (docs/serving.md). Submit from another terminal:
#   build/bin/rtxctl submit build/examples/mlp.rtxg --random-inputs --wait
run: all
	$(BUILD)/bin/rtxd --models.repository=$(BUILD)/examples/models

# The example graphs through rtxrun, without the daemon.
run-examples: all
	$(BUILD)/bin/rtxrun $(BUILD)/examples/mlp.rtxg --random-inputs --seed 1
	$(BUILD)/bin/rtxrun $(BUILD)/examples/transformer_block.rtxg --random-inputs --seed 1

# The Python side: a venv of tests/requirements.txt with the Python client installed in it
# (client/python: pip builds it, generating its protocol code from proto/; without build
# isolation, so with the venv's own grpcio-tools and setuptools: the generated code fits the
# venv's protobuf and nothing is fetched), and the generated rtx.v1 code (defined before the
# targets that depend on them: make expands prerequisites as it reads them).
VENV := $(BUILD)/venv
PY_CLIENT := $(wildcard client/python/pyproject.toml client/python/setup.py \
                        client/python/rtxd/*.py client/python/rtxd/_proto/*.py)
$(VENV)/.ok: tests/requirements.txt $(PY_CLIENT) $(PROTOS)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
	  ./client/python
	touch $@

PY_GEN := $(BUILD)/py/rtx/v1/graph_pb2.py
$(PY_GEN): $(PROTOS) $(VENV)/.ok
	@mkdir -p $(BUILD)/py
	$(VENV)/bin/python -m grpc_tools.protoc --proto_path=proto --python_out=$(BUILD)/py \
	  --grpc_python_out=$(BUILD)/py $(PROTOS)

# A check that cannot run for a missing dependency fails the run unless RTX_ALLOW_SKIP names
# the dependency as meant to be absent (README, "Checks that cannot run"; tests/skips.py).
test: test-unit test-py test-integration test-serving

# tests/serving: the KServe v2 protocol over gRPC and HTTP with Triton's own clients
# (tritonclient, perf_analyzer) against rtxd serving the example model repository
test-serving: all $(PY_GEN)
	RTX_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -q -n 2 tests/serving

test-integration: all $(PY_GEN)
	RTX_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -q -n 2 tests/integration

# the CPU kernel suites run a second time on the generic build (the default is the best build
# the CPU runs: kernels/cpu/cpu-impl.h, ISA variants), and a third on the AVX2 build's 256-bit
# kernels where the CPU has AVX-512 (whose 512-bit kernels are then the default)
CPU_SUITES := cpu_elementwise cpu_reduce cpu_linalg cpu_shape cpu_conv cpu_generation cpu_fused \
              onnx
test-unit: $(BUILD)/bin/rtx-unit-tests $(EXAMPLES)
	CK_FORK=yes RTX_TEST_GEN_MODEL=$(BUILD)/examples/models/tiny-chat/1 $(BUILD)/bin/rtx-unit-tests
	CK_FORK=yes RTX_CPU_ISA=generic $(BUILD)/bin/rtx-unit-tests $(CPU_SUITES)
	if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	  CK_FORK=yes RTX_CPU_ISA=avx2 $(BUILD)/bin/rtx-unit-tests $(CPU_SUITES); fi

test-py: all $(PY_GEN)
	RTX_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -q -n 2 tests/interop

test-asan:
	$(MAKE) BUILD=build-asan SAN=1 all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  CK_FORK=no RTX_TEST_GEN_MODEL=build-asan/examples/models/tiny-chat/1 \
	  build-asan/bin/rtx-unit-tests
	$(MAKE) BUILD=build build/py/rtx/v1/graph_pb2.py
	$(MAKE) BUILD=build-asan SAN=1 VENV=build/venv PY_GEN=build/py/rtx/v1/graph_pb2.py \
	  test-py-only

# Python suites against an already built $(BUILD); generated Python code from build/py.
test-py-only:
	ASAN_OPTIONS=detect_leaks=1 RTX_BUILD=$(abspath $(BUILD)) RTX_PY=$(abspath build/py) \
	  $(VENV)/bin/python -m pytest -q -n 2 tests/interop tests/integration tests/serving

# make bench: every benchmark runs, even after one misses its target or fails to run, and the
# target fails at the end if any did (one miss does not hide the figures after it). Each
# prints the route or kernel that ran and its verdicts (docs/benchmarks.md).
# `make bench RTX_BENCH_REPORT=1` passes RTX_BENCH_REPORT=1 on: each benchmark then reports
# without judging (the C programs' and scripts' --report), and only a failed run fails.
#   bench/bench_cpu.py      the CPU backend against NumPy
#   bench/bench_jobs.sh     rtxd's job round trip against a bare gRPC echo server, on loopback
#   bench/bench_serving.py  perf_analyzer, dynamic batching off and on
#   rtx-bench-sched all     the scheduler's goodput against FIFO and strict priority, and its
#                           cost per request under callgrind
#   rtx-bench-mem-pool      the caching allocator over malloc against malloc
RTX_BENCH_REPORT ?=
BENCH_BINS := $(BUILD)/bin/rtx-echo-server $(BUILD)/bin/rtx-bench-jobs \
              $(BUILD)/bin/rtx-bench-sched $(BUILD)/bin/rtx-bench-mem-pool

bench: all $(PY_GEN) $(BENCH_BINS)
	@failed=; for b in "$(VENV)/bin/python bench/bench_cpu.py" "bash bench/bench_jobs.sh" \
	    "$(VENV)/bin/python bench/bench_serving.py" "$(BUILD)/bin/rtx-bench-sched all" \
	    "$(BUILD)/bin/rtx-bench-mem-pool"; do \
	  echo "make bench: $$b"; \
	  RTX_BUILD=$(abspath $(BUILD)) RTX_BENCH_REPORT=$(RTX_BENCH_REPORT) $$b || \
	    failed="$$failed, $$b (exit $$?)"; \
	  echo; \
	done; \
	if [ -n "$$failed" ]; then \
	  echo "make bench: a target was MISSED or a run FAILED in: $${failed#, }" >&2; exit 1; fi; \
	case "$(RTX_BENCH_REPORT)" in ""|0) echo "make bench: every judged target met";; \
	  *) echo "make bench: every benchmark ran (RTX_BENCH_REPORT: reported, not judged)";; esac

$(BUILD)/bin/rtx-echo-server: $(BUILD)/obj/bench/echo-server.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GRPC_LIBS) -pthread

$(BUILD)/bin/rtx-bench-jobs: $(BUILD)/obj/bench/bench-jobs.o $(BUILD)/obj/bench/bench-util.o $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GRPC_LIBS) $(shell pkg-config --libs libprotobuf-c) -lm -pthread

# bench/bench-sched.c: the scheduler's cost per enqueue + dispatch under callgrind (valgrind)
# and its goodput under 2x overload against FIFO and strict-priority queues, on a simulated
# clock. In `all` (tests/interop/test_bench_verdicts.py runs it).
.PHONY: bench-sched bench-sched-callgrind
$(BUILD)/bin/rtx-bench-sched: $(BUILD)/obj/bench/bench-sched.o $(BUILD)/obj/bench/bench-util.o $(LIBSCHED) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs inih 2>/dev/null) $(LDLIBS)
bench-sched: $(BUILD)/bin/rtx-bench-sched
	$(BUILD)/bin/rtx-bench-sched goodput
bench-sched-callgrind: $(BUILD)/bin/rtx-bench-sched
	$(BUILD)/bin/rtx-bench-sched callgrind

# bench/bench-mem-pool.c: the caching allocator against the raw (malloc) allocator it caches,
# both warm. In `all` (tests/interop/test_bench_verdicts.py runs it).
.PHONY: bench-mem-pool
$(BUILD)/bin/rtx-bench-mem-pool: $(BUILD)/obj/bench/bench-mem-pool.o $(BUILD)/obj/bench/bench-util.o $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
bench-mem-pool: $(BUILD)/bin/rtx-bench-mem-pool
	$(BUILD)/bin/rtx-bench-mem-pool

# bench/bench-cpu.c: rtxd's side of bench/bench_cpu.py (graphs through the plan and executor on
# the CPU backend, steered by bench/bench_harness.py through bench/bench-driver.c). In `all`: the
# harness's tests (tests/interop/test_bench_harness.py) run it.
$(BUILD)/bin/rtx-bench-cpu: $(BUILD)/obj/bench/bench-cpu.o $(BUILD)/obj/bench/bench-driver.o \
                            $(BUILD)/obj/bench/bench-util.o \
                            $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# bench/bench-gpu.c: the CUDA backend's ops on device-resident data, the transformer block and
# the caching allocator (it calls CUDA directly for the allocator's raw baseline).
$(BUILD)/obj/bench/bench-gpu.o: CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/bin/rtx-bench-gpu: $(BUILD)/obj/bench/bench-gpu.o $(BUILD)/obj/bench/bench-driver.o \
                            $(BUILD)/obj/bench/bench-util.o $(BUILD)/obj/tests/gpu/block-graph.o $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# The shared libraries the GPU machine lacks, into .gpu/lib (docs/gpu.md).
GPU_BUNDLE_BINS := $(BUILD)/bin/rtxd $(BUILD)/bin/rtx-unit-tests $(BUILD)/bin/rtxrun \
                   $(BUILD)/bin/rtxctl $(BUILD)/bin/rtx-gpu-tests \
                   $(BUILD)/bin/rtx-gpu-linalg-tests $(BUILD)/bin/rtx-gpu-jobs-tests \
                   $(BUILD)/bin/rtx-gpu-device-tests $(BUILD)/bin/rtx-bench-gpu \
                   $(BUILD)/bin/rtxgen $(BUILD)/bin/rtxtok
gpu-bundle: $(GPU_BUNDLE_BINS)
	bash deploy/gpu-bundle.sh .gpu/lib $(GPU_BUNDLE_BINS)

# The same, packed with the binaries (stripped) into one archive of about 12 MiB for links that
# limit what travels; unpack it in the working tree on the GPU machine (docs/gpu.md).
GPU_PACK ?= gpuc/pack.tar.xz
gpu-pack: gpu-bundle $(BUILD)/bin/make-examples
	BUILD=$(BUILD) VENV=$(VENV) bash deploy/gpu-pack.sh $(GPU_PACK) $(GPU_BUNDLE_BINS) \
	  $(BUILD)/bin/make-examples

# On the GPU machine, after `make all gpu-bundle` elsewhere and with LD_LIBRARY_PATH set to
# .gpu/lib and the CUDA libraries: runs what is built, builds nothing. A GPU and cuDNN are
# expected: without a CUDA device every step fails, and without libcudnn.so.9 rtx-gpu-tests
# does, unless RTX_ALLOW_SKIP names what this machine is meant to lack (RTX_ALLOW_SKIP=gpu,
# RTX_ALLOW_SKIP=cudnn; tests/skips.py, docs/gpu.md); the steps then say they skipped.
# tests/gpu/test_ops_torch.py: every op through one rtxrun process against PyTorch (python3
# with torch; it encodes its graphs itself, so $(BUILD)/py is not needed there).
# tests/gpu/test_onnx_torch.py: a ResNet, a BERT-style encoder and a GPT-2-style decoder
# exported by torch.onnx.export (dynamic batch), run by one rtxrun process against PyTorch on
# the same GPU and onnxruntime where importable (python3 with torch, onnx and onnxscript).
# tests/interop/np_decoder.py --against-transformers: the NumPy decoder that the generation
# tests compare rtxd's logits with, against transformers on genfixtures.py's checkpoints.
# tests/gpu/test_generate_torch.py: rtxgen's bf16 logits against transformers' for the
# GPT-2-small, Llama-3.2-1B and Qwen2.5-0.5B configurations (random weights, made on first use
# by tests/gpu/make_checkpoints.py into $(BUILD)/gen-checkpoints and kept).
# rtxd loads libcudnn.so.9 at run time (kernels/cuda/attention-cudnn.c). Where the machine's
# python3 has PyTorch's cuDNN wheel, its library directory goes first on LD_LIBRARY_PATH for the
# GPU targets, so that rtxd and the PyTorch reference run the same cuDNN (docs/gpu.md).
GPU_CUDNN_LIB = $(shell $(PYTHON) -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
GPU_ENV = $(if $(GPU_CUDNN_LIB),LD_LIBRARY_PATH=$(GPU_CUDNN_LIB):$$LD_LIBRARY_PATH)

test-gpu:
	@for b in rtx-gpu-tests rtx-gpu-linalg-tests rtx-gpu-jobs-tests rtx-gpu-device-tests rtxd \
	    rtxctl rtxrun; do \
	  [ -x $(BUILD)/bin/$$b ] || { echo "test-gpu: $(BUILD)/bin/$$b is missing: build with" \
	    "'make all gpu-bundle' first (test-gpu never builds)" >&2; exit 2; }; done
	$(GPU_ENV) $(BUILD)/bin/rtx-gpu-tests
	$(GPU_ENV) $(BUILD)/bin/rtx-gpu-linalg-tests
	$(GPU_ENV) $(BUILD)/bin/rtx-gpu-jobs-tests
	$(GPU_ENV) $(BUILD)/bin/rtx-gpu-device-tests
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) bash tests/gpu/daemon-devices.sh
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) bash tests/gpu/daemon-jobs.sh
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) bash tests/gpu/daemon-serving.sh
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) tests/gpu/test_ops_torch.py --device cuda
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) tests/gpu/test_onnx_torch.py --device cuda
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) tests/gpu/test_generate_torch.py
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/bench_gpu.py --harness-check
	$(PYTHON) tests/interop/np_decoder.py --against-transformers

# On the GPU machine, like test-gpu: bench/bench_gpu.py drives rtx-bench-gpu and times the same
# cases in PyTorch (the machine's python3) window by window (bench/bench_harness.py), prints the
# ratios and exits 1 on a failed case or a missed target (RTX_BENCH_REPORT=1: report only).
# Builds nothing.
bench-gpu:
	@[ -x $(BUILD)/bin/rtx-bench-gpu ] || { echo "bench-gpu: $(BUILD)/bin/rtx-bench-gpu is" \
	  "missing: build with 'make all gpu-bundle' first (bench-gpu never builds)" >&2; exit 2; }
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/bench_gpu.py

# bench/bench_onnx.py: ONNX models end to end, rtxrun against onnxruntime on the same file
# (docs/benchmarks.md). bench-onnx: the CPU, the models of tests/interop/test_onnx_models.py
# at CI-sized shapes against onnxruntime's CPU provider with the same thread count, judged
# (>= 1.0x; RTX_BENCH_REPORT=1: report only). bench-onnx-gpu (on the GPU machine, like
# bench-gpu; builds nothing): torch.onnx.export'ed models at batch 32 on the GPU against
# PyTorch eager and onnxruntime's CUDA provider where it has one, reported.
# RTX_BENCH_ONNX_ARGS passes options (--quick, --case NAME, --threads N, --device cuda:N).
RTX_BENCH_ONNX_ARGS ?=
bench-onnx: all $(PY_GEN)
	RTX_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python bench/bench_onnx.py $(RTX_BENCH_ONNX_ARGS)

# bench/bench_onnx_served.py: issue 14's GPU target - the encoder and the decoder exported by
# torch.onnx.export, served from a Triton repository and driven by perf_analyzer at batch 32
# (from .gpu/tools, which make gpu-pack fills), against PyTorch eager on the same GPU.
# On the GPU machine; builds nothing; judged (>= 1.2x) unless RTX_BENCH_REPORT=1.
bench-onnx-served:
	@[ -x $(BUILD)/bin/rtxd ] || { echo "bench-onnx-served: $(BUILD)/bin/rtxd is missing: build" \
	  "with 'make all gpu-bundle' first (bench-onnx-served never builds)" >&2; exit 2; }
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/bench_onnx_served.py \
	  $(RTX_BENCH_ONNX_SERVED_ARGS)

bench-onnx-gpu:
	@[ -x $(BUILD)/bin/rtxrun ] || { echo "bench-onnx-gpu: $(BUILD)/bin/rtxrun is missing:" \
	  "build with 'make all gpu-bundle' first (bench-onnx-gpu never builds)" >&2; exit 2; }
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/bench_onnx.py --device cuda \
	  $(RTX_BENCH_ONNX_ARGS)

# On the GPU machine, like bench-gpu: bench/bench_generate.py starts rtxd on a repository with
# the Llama-3.2-1B-configuration checkpoint (tests/gpu/make_checkpoints.py, made on first use),
# drives /v1/completions with an open-loop Poisson client, then runs transformers' generate
# with static batching on the same GPU; about 6 minutes. The figures go to
# $(BUILD)/bench-generate.json; exit 1 on a failed run or a missed target (RTX_BENCH_REPORT=1:
# report only). RTX_BENCH_GENERATE_ARGS passes options (--duration S, --only LIST, --device
# cuda:N, --kv-cache-gib G, --max-batch-tokens N, --max-seqs N; docs/benchmarks.md). Separate
# from bench-gpu (each runs for minutes). Builds nothing.
RTX_BENCH_GENERATE_ARGS ?=
bench-generate:
	@[ -x $(BUILD)/bin/rtxd ] || { echo "bench-generate: $(BUILD)/bin/rtxd is missing: build" \
	  "with 'make all gpu-bundle' first (bench-generate never builds)" >&2; exit 2; }
	$(GPU_ENV) RTX_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/bench_generate.py \
	  --out $(BUILD)/bench-generate.json $(RTX_BENCH_GENERATE_ARGS)

clean:
	rm -rf build build-asan

# Every object's header dependencies (-MMD), found on disk rather than listed: an object left
# out of a list (tools/rtxrun.o was) kept an old struct layout after a header changed.
-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

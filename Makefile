# rtxd - one entry point. `make` builds everything into build/ (binaries in build/bin).
# Targets: all, run, test, test-unit, test-py, test-asan, bench, examples, clean, deps.
# Set BUILD and SAN=1 for a sanitizer build (test-asan does this into build-asan/).

BUILD    ?= build
SAN      ?= 0
CC       ?= cc
PYTHON   ?= python3

PKGS      := libprotobuf-c check
DEPS_OK   := $(shell pkg-config --exists $(PKGS) 2>/dev/null && command -v protoc-c >/dev/null \
                && [ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h -o \
                     -e /usr/include/cblas.h ] && echo yes)
ifneq ($(DEPS_OK),yes)
$(info rtxd: build dependencies missing; running deploy/install-deps.sh)
$(shell bash deploy/install-deps.sh >&2)
endif

OPENBLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
OPENBLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wstrict-prototypes
CFLAGS   := -std=c11 -D_GNU_SOURCE -O2 -g $(WARN) -I. -I$(BUILD)/gen \
            $(shell pkg-config --cflags libprotobuf-c) $(OPENBLAS_CFLAGS) -pthread -MMD -MP
LDLIBS   := $(shell pkg-config --libs libprotobuf-c) $(OPENBLAS_LIBS) -lm -pthread
ifeq ($(SAN),1)
CFLAGS   += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=address,undefined
endif

PROTOS     := proto/rtx/v1/graph.proto
PROTO_C    := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_H    := $(PROTO_C:.c=.h)

RUNTIME_SRC := $(wildcard runtime/*.c) $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c)
RUNTIME_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(RUNTIME_SRC)) \
               $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
LIBRT       := $(BUILD)/lib/librtxrt.a

TEST_SRC   := $(wildcard tests/unit/*.c)
TEST_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRC))
CHECK_LIBS := $(shell pkg-config --libs check)

BINS := $(BUILD)/bin/rtxrun $(BUILD)/bin/rtx-unit-tests $(BUILD)/bin/make-examples
EXAMPLES := $(BUILD)/examples/mlp.rtxg $(BUILD)/examples/transformer_block.rtxg

.PHONY: all run test test-unit test-py test-asan bench examples clean deps
all: $(BINS) $(EXAMPLES)

deps:
	bash deploy/install-deps.sh

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-shadow -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIBRT): $(RUNTIME_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/rtxrun: $(BUILD)/obj/tools/rtxrun.o $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/make-examples: $(BUILD)/obj/examples/make-examples.o $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/rtx-unit-tests: $(TEST_OBJ) $(LIBRT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

examples: $(EXAMPLES)
$(EXAMPLES) &: $(BUILD)/bin/make-examples
	@mkdir -p $(BUILD)/examples
	$(BUILD)/bin/make-examples $(BUILD)/examples

# The README's first command: build, then run both example graphs through rtxrun.
run: all
	$(BUILD)/bin/rtxrun $(BUILD)/examples/mlp.rtxg --random-inputs --seed 1
	$(BUILD)/bin/rtxrun $(BUILD)/examples/transformer_block.rtxg --random-inputs --seed 1

test: test-unit test-py

test-unit: $(BUILD)/bin/rtx-unit-tests
	CK_FORK=yes $(BUILD)/bin/rtx-unit-tests

VENV := $(BUILD)/venv
$(VENV)/.ok: tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	touch $@

PY_GEN := $(BUILD)/py/rtx/v1/graph_pb2.py
$(PY_GEN): proto/rtx/v1/graph.proto $(VENV)/.ok
	@mkdir -p $(BUILD)/py
	$(VENV)/bin/python -m grpc_tools.protoc --proto_path=proto --python_out=$(BUILD)/py $<

test-py: all $(PY_GEN)
	RTX_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -q -n 2 tests/interop

test-asan:
	$(MAKE) BUILD=build-asan SAN=1 all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  CK_FORK=no build-asan/bin/rtx-unit-tests
	$(MAKE) BUILD=build-asan SAN=1 VENV=build/venv test-py-only

test-py-only: $(PY_GEN)
	ASAN_OPTIONS=detect_leaks=1 RTX_BUILD=$(abspath $(BUILD)) \
	  $(VENV)/bin/python -m pytest -q -n 2 tests/interop

bench: all $(PY_GEN)
	RTX_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python bench/bench_cpu.py

clean:
	rm -rf build build-asan

-include $(RUNTIME_OBJ:.o=.d) $(TEST_OBJ:.o=.d)

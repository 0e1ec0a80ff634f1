# Fuzz targets (libFuzzer). Run from the repository root: `make fuzz` calls
#   $(MAKE) -f tests/fuzz/fuzz.mk
# Everything is built with clang into build/fuzz/, apart from the gcc objects in build/obj.
#   build/fuzz/fuzz_envelope  libFuzzer + ASan + UBSan, project code instrumented for coverage
#   build/fuzz/fuzz_batch     same, plus daemon/node*.c: the write path over a real RocksDB
#   build/fuzz/fuzz_q1        same, over Q1 statements (common/q1.c, common/q1_plan.c); its
#                             seeds are checked in (tests/fuzz/corpus-q1/)
#   build/fuzz/seedgen        writes the two binary seed corpora (tests/fuzz/run.sh runs it)
# common/rpc.c and common/metrics_http.c are left out: they are transport (nng's sockets and
# HTTP server), not decoding, and no target calls them.

FUZZ_CC    := clang
FUZZ_DIR   := build/fuzz
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -I. -Ibuild/gen $(FUZZ_SAN)
FUZZ_LIBS  := -lrocksdb -luv -lsodium -lprotobuf-c -ljansson -lpthread -lm

FUZZ_PROTOS := $(wildcard proto/keyload/v1/*.proto)
FUZZ_GEN_C  := $(patsubst proto/%.proto,build/gen/%.pb-c.c,$(FUZZ_PROTOS))
FUZZ_GEN_H  := $(FUZZ_GEN_C:.c=.h)
FUZZ_PROJ   := $(FUZZ_GEN_C) $(filter-out common/rpc.c common/metrics_http.c,$(wildcard common/*.c)) \
               $(wildcard daemon/engine/*.c) $(wildcard daemon/store/*.c)
FUZZ_OBJ    := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_PROJ) tests/fuzz/fuzz_envelope.c)
FUZZ_BATCH_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_PROJ) $(wildcard daemon/node*.c) daemon/entry_clock.c daemon/park.c tests/fuzz/fuzz_batch.c)
FUZZ_Q1_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_PROJ) tests/fuzz/fuzz_q1.c)

.PHONY: fuzz-all
fuzz-all: $(FUZZ_DIR)/fuzz_envelope $(FUZZ_DIR)/fuzz_batch $(FUZZ_DIR)/fuzz_q1 $(FUZZ_DIR)/seedgen

build/gen/%.pb-c.c build/gen/%.pb-c.h: proto/%.proto
	@mkdir -p build/gen
	protoc-c --c_out=build/gen -Iproto $<

$(FUZZ_DIR)/obj/%.o: %.c $(FUZZ_GEN_H)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/fuzz_envelope: $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)

$(FUZZ_DIR)/fuzz_batch: $(FUZZ_BATCH_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)

$(FUZZ_DIR)/fuzz_q1: $(FUZZ_Q1_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)

# Plain build (no instrumentation): it only encodes a few messages.
$(FUZZ_DIR)/seedgen: tests/fuzz/seedgen.c $(FUZZ_GEN_C) $(FUZZ_GEN_H)
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -I. -Ibuild/gen \
	    -o $@ tests/fuzz/seedgen.c $(FUZZ_GEN_C) -lprotobuf-c

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)

# KeyLoad build. `make` builds bin/ and lib/; `make test` is the test command (README).
# Protobuf C code is generated into build/gen by protoc-c and never committed.

CC       ?= gcc
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -I. -Ibuild/gen
CFLAGS   ?= -O2
LIBS     := -lnng -lrocksdb -luv -lsodium -lprotobuf-c -ljansson -lpthread -lm
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

PROTOS   := $(wildcard proto/keyload/v1/*.proto)
GEN_C    := $(patsubst proto/%.proto,build/gen/%.pb-c.c,$(PROTOS))
GEN_H    := $(GEN_C:.c=.h)

COMMON_SRC := $(wildcard common/*.c)
DAEMON_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c daemon/*/*.c))
SDK_SRC    := $(wildcard client/sdk/*.c)
CLI_SRC    := $(wildcard client/cli/*.c)
# The CLI without main.c: linked into the unit tests (argument parsing).
CLI_LIB_SRC := $(filter-out client/cli/main.c,$(CLI_SRC))
MCP_SRC    := $(wildcard client/mcp/*.c)
COORD_SRC  := $(wildcard coordinator/*.c)
# The coordinator without main.c: linked into the unit tests (config, command ids, buffers).
COORD_LIB_SRC := $(filter-out coordinator/main.c,$(COORD_SRC))
BENCH_SRC  := $(wildcard tests/bench/*.c)
UNIT_SRC   := $(wildcard tests/unit/*.c)

obj = $(patsubst %.c,build/obj/%.o,$(1))
san = $(patsubst %.c,build/san/%.o,$(1))

CORE_OBJ   := $(call obj,$(GEN_C) $(COMMON_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
SDK_OBJ    := $(call obj,$(SDK_SRC))

BINS := bin/keyloadd bin/keyload bin/keyload-coordinator bin/keyload-mcp bin/keyload-bench
# The C SDK's example programs (client/examples): only client/keyload.h and lib/libkeyload.a.
EXAMPLE_SRC := $(wildcard client/examples/*.c)
EXAMPLES    := $(patsubst client/examples/%.c,bin/examples/%,$(EXAMPLE_SRC))

.PHONY: all install deps test golden-test unit-test process-test mcp-test examples-test fuzz fuzz-run bench peers run clean nemesis nemesis-test
all: $(BINS) lib/libkeyload.a $(EXAMPLES)

# make install [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc/keyload] [STATEDIR=/var/lib/keyload]
# [UNITDIR=PREFIX/lib/systemd/system]: programs, systemd units, sysusers entry, man pages.
install: $(BINS)
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" SYSCONFDIR="$(SYSCONFDIR)" STATEDIR="$(STATEDIR)" UNITDIR="$(UNITDIR)" bash deploy/install.sh

# client/keyload.h includes the generated protobuf-c headers: keep them after a build (not
# intermediates to delete), so that programs outside this Makefile compile against the SDK.
.SECONDARY: $(GEN_C) $(GEN_H)

build/gen/%.pb-c.c build/gen/%.pb-c.h: proto/%.proto
	@mkdir -p build/gen
	protoc-c --c_out=build/gen -Iproto $<

build/obj/%.o: %.c $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c $< -o $@

build/san/%.o: %.c $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -O1 $(SAN) -MMD -MP -c $< -o $@

lib/libkeyload.a: $(CORE_OBJ) $(SDK_OBJ)
	@mkdir -p lib
	rm -f $@ && ar rcs $@ $^

bin/keyloadd: $(call obj,daemon/main.c) $(DAEMON_OBJ) $(CORE_OBJ)
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

bin/keyload: $(call obj,$(CLI_SRC)) lib/libkeyload.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $(call obj,$(CLI_SRC)) lib/libkeyload.a $(LIBS)

bin/keyload-coordinator: $(call obj,$(COORD_SRC)) lib/libkeyload.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $(call obj,$(COORD_SRC)) lib/libkeyload.a $(LIBS)

bin/keyload-mcp: $(call obj,$(MCP_SRC)) lib/libkeyload.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $(call obj,$(MCP_SRC)) lib/libkeyload.a $(LIBS)

# Each example is one file, compiled as an SDK user would (README "Using the C SDK").
bin/examples/%: client/examples/%.c client/keyload.h lib/libkeyload.a $(GEN_H)
	@mkdir -p bin/examples
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< lib/libkeyload.a -lnng -luv -lsodium -lprotobuf-c -ljansson -lpthread

# The staged RF3 scenario's C SDK route (tests/mcp/staged.test.mjs): one operation per
# invocation, compiled like the examples, from client/keyload.h and lib/libkeyload.a only.
build/scenario-sdk: tests/scenario/sdk_route.c client/keyload.h lib/libkeyload.a $(GEN_H)
	@mkdir -p build
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< lib/libkeyload.a -lnng -luv -lsodium -lprotobuf-c -ljansson -lpthread

bin/keyload-bench: $(call obj,$(BENCH_SRC)) lib/libkeyload.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $(call obj,$(BENCH_SRC)) lib/libkeyload.a $(LIBS)

# What a stopped member's store holds, by key tag (tests/bench/retain_disk.sh).
build/store-census: $(call obj,tests/bench/census/store_census.c daemon/store/store.c daemon/store/journal.c daemon/store/crc32c.c daemon/store/keys.c daemon/store/last_write.c) $(CORE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

# Process tests: a driver that starts real keyloadd processes.
build/proc-test: $(call obj,$(wildcard tests/cluster/*.c) daemon/store/store.c daemon/store/journal.c daemon/store/crc32c.c daemon/store/keys.c daemon/store/last_write.c) $(SDK_OBJ) $(CORE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

# The nemesis harness (tests/nemesis): a driver linked with the SDK, run by tests/nemesis/run.sh
# in network namespaces (root). `make nemesis SECONDS=N [SEED=S] [SCHEDULE=test]` soaks;
# nemesis-test is make test's bounded run in which every fault kind runs at least 3 times.
# build/nemesis-clockshim.so offsets one member's wall clock (the clock-step fault).
NEMESIS_SRC := $(filter-out tests/nemesis/lossyfs.c tests/nemesis/clockshim.c,$(wildcard tests/nemesis/*.c))
build/nemesis: $(call obj,$(NEMESIS_SRC)) lib/libkeyload.a build/nemesis-clockshim.so
	$(CC) $(CFLAGS) -o $@ $(call obj,$(NEMESIS_SRC)) lib/libkeyload.a $(LIBS)

build/nemesis-clockshim.so: tests/nemesis/clockshim.c
	@mkdir -p build
	$(CC) -std=c11 -Wall -Wextra -Werror -O2 -shared -fPIC -o $@ $< -ldl

SECONDS ?= 120
SCHEDULE ?= soak
nemesis: all build/nemesis build/lossyfs
	@bash tests/nemesis/run.sh $(SECONDS) "$(SEED)" $(SCHEDULE)

nemesis-test: all build/nemesis build/lossyfs
	@bash tests/support/suite.sh "nemesis (faults on real processes)" 480 bash tests/nemesis/run.sh 60 "$(SEED)" test

# Golden vectors (tests/golden): canonical encodings, digests, stored records and receipts
# of a fixed workload, and the replay of a store written by an older binary, byte for byte.
build/golden: $(call obj,$(wildcard tests/golden/*.c)) $(DAEMON_OBJ) $(CORE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

# Snapshot production and install of a generated state: time and peak RSS per phase
# (tests/bench/snapshot/snap_bench.c; not part of `make test`).
build/snap-bench: $(call obj,tests/bench/snapshot/snap_bench.c) $(DAEMON_OBJ) $(CORE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

golden-test: build/golden bin/keyloadd
	@bash tests/support/suite.sh "golden (byte-for-byte vectors, old store replay)" 60 bash tests/golden/check.sh

# Unit tests: one Check runner, everything built with AddressSanitizer + UBSan.
build/unit-tests: $(call san,$(UNIT_SRC) $(GEN_C) $(COMMON_SRC) $(DAEMON_SRC) $(SDK_SRC) $(CLI_LIB_SRC) $(COORD_LIB_SRC))
	$(CC) $(SAN) -o $@ $^ $(LIBS) $(CHECK_LIBS)

deps:
	@bash tests/support/deps.sh

unit-test: build/unit-tests
	@bash tests/support/suite.sh "unit (Check, ASan+UBSan)" 420 env ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/unit/lsan.supp:print_suppressions=1 ./build/unit-tests

process-test: all build/proc-test
	@bash tests/support/suite.sh "process (real keyloadd, kill -9)" 840 bash tests/cluster/run.sh

# The MCP server through the official MCP TypeScript SDK client (tests/mcp; npm ci installs
# the pinned SDK from tests/mcp/package-lock.json), then the staged RF3 transfer scenario
# over the C SDK, the official MCP client and both Q1 routes (tests/mcp/staged.test.mjs).
mcp-test: all build/scenario-sdk
	@bash tests/support/suite.sh "mcp (official client)" 240 bash tests/mcp/run.sh

# The C SDK examples against a real RF3 cluster (tests/examples/run.sh), also once under
# ASan+LSan.
examples-test: all
	@bash tests/support/suite.sh "examples (C SDK)" 120 bash tests/examples/run.sh

# The module structure (tests/structure/check.sh, after its self-test): include and call
# cycles, functions over 120 lines, edges outside the allowed graph; strict except for the
# findings that tests/structure/exceptions.txt still lists. Then the limits in one header
# (tests/structure/limits.sh).
.PHONY: structure-test bench-summary-test
structure-test: all
	@bash tests/support/suite.sh "structure (cycles, function length, allowed graph, limits)" 60 sh -c 'bash tests/structure/selftest.sh && bash tests/structure/check.sh --strict && bash tests/structure/limits.sh && python3 tests/structure/test_design_cites.py && python3 tests/structure/design_cites.py --check'

# The peers summary of `make bench` (medians, ratios against the peers, PASS/MISS,
# summary.json, the plot) on made-up run lines: a wrong figure shows up without a bench run.
bench-summary-test:
	@bash tests/support/suite.sh "bench summary (peer medians and targets)" 30 bash tests/bench/peers/summary_test.sh

fuzz-run: fuzz
	@bash tests/support/suite.sh "fuzz (libFuzzer, bounded)" 150 bash tests/fuzz/run.sh 60

fuzz:
	@$(MAKE) --no-print-directory -f tests/fuzz/fuzz.mk

test: deps
	@$(MAKE) --no-print-directory all build/golden build/unit-tests build/proc-test build/scenario-sdk build/nemesis build/lossyfs
	@bash tests/support/test-all.sh

bench: deps
	@$(MAKE) --no-print-directory all build/store-census
	@bash tests/bench/run.sh

# The peers alone (NATS JetStream R3, a PostgreSQL outbox) against the KeyLoad cells they
# are compared with; `make bench` runs them too (BENCH_PARTS=peers of tests/bench/run.sh).
peers: deps
	@$(MAKE) --no-print-directory all
	@BENCH_PARTS=peers bash tests/bench/run.sh

run: deps
	@$(MAKE) --no-print-directory all
	@bash deploy/demo.sh

clean:
	rm -rf build bin lib

-include $(shell find build -name '*.d' 2>/dev/null)

# Replication simulator soak (not part of make test): tests/sim/soak.c runs the deterministic
# cluster simulator over many seeds at -O2 in parallel workers and prints seeds/s and every
# failing seed with its replay command. SOAK_ARGS, e.g. "--seconds 600" or "--seeds 100000".
SOAK_ARGS ?= --seconds 300
RAFT_SRC  := daemon/repl/raft.c daemon/repl/raft_log.c daemon/repl/raft_conf.c  # the pure core: the simulator is its driver
build/raft-soak: tests/sim/soak.c tests/sim/raft_sim.c $(RAFT_SRC) common/status.c \
                 $(wildcard tests/sim/*.h daemon/repl/*.h) common/status.h
	@mkdir -p build
	$(CC) $(CFLAGS_BASE) -O2 -o $@ tests/sim/soak.c tests/sim/raft_sim.c $(RAFT_SRC) common/status.c

.PHONY: soak
soak: build/raft-soak
	./build/raft-soak $(SOAK_ARGS)

# lossyfs (tests/nemesis/lossyfs.c): a FUSE passthrough filesystem that drops unsynced
# writes on SIGUSR1 (power loss), for fault tests; tests/nemesis/lossyfs_test.sh tests it.
LOSSYFS_CFLAGS := $(shell pkg-config --cflags fuse3 2>/dev/null)
LOSSYFS_LIBS   := $(shell pkg-config --libs fuse3 2>/dev/null || echo -lfuse3 -lpthread)
build/lossyfs: tests/nemesis/lossyfs.c
	@mkdir -p build
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LOSSYFS_CFLAGS) -o $@ $< $(LOSSYFS_LIBS)

.PHONY: lossyfs-test
lossyfs-test: all build/lossyfs
	@bash tests/support/suite.sh "lossyfs (FUSE power loss)" 120 bash tests/nemesis/lossyfs_test.sh

# A one-member keyloadd whose wall clock steps +-1 h under libfaketime (Debian faketime).
.PHONY: clockstep-test
clockstep-test: all
	@bash tests/support/suite.sh "clock steps (libfaketime)" 120 bash tests/nemesis/clockstep_test.sh

# A data partition's leader an hour ahead while its catalog tail fails, then corrected: it
# serves again within seconds (the tail's retry pauses are timed on CLOCK_MONOTONIC).
.PHONY: tailclock-test
tailclock-test: all build/nemesis-clockshim.so
	@bash tests/support/suite.sh "catalog tail over a clock step" 60 bash tests/nemesis/tailclock_test.sh

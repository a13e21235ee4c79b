GO ?= go
BIN := bin/agentrun
TEST_USER ?= artest
STATICCHECK_VERSION := v0.8.2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
ROOTLESS_DIR := /tmp/agentrun-rootless-bin
# Static, so exec stays cheap; cgo for libseccomp and the C init.
BUILD_FLAGS := -tags netgo,osusergo -ldflags '-linkmode external -extldflags "-static"'
# Linked against musl where musl-gcc is installed (make setup installs it):
# a static glibc binary spends about 0.4 ms of every start probing the CPU
# (cpuid, which traps to the hypervisor in a VM) and applying relocations
# before agentrun's constructor runs; musl does neither. Debian's
# libseccomp.a is linked from a directory of its own, so that no other
# glibc library is found (nsinit/internal/cinit/compat.c). Without
# musl-gcc the build is the glibc one.
TRIPLE := $(shell gcc -dumpmachine 2>/dev/null)
# Extra C flags for the C init (integration-noloader sets one).
CINIT_CFLAGS ?=
BUILD_ENV := CGO_CFLAGS="-O2 -g $(CINIT_CFLAGS)"
MUSL_CC := $(shell command -v musl-gcc 2>/dev/null)
MUSL_LIBS := $(CURDIR)/bin/.musl-libs
# musl's threads get 128 KiB stacks unless the binary asks for more; the C
# init starts on the stack of the Go thread that clones it.
ifneq ($(MUSL_CC),)
BUILD_ENV := CC=musl-gcc CGO_CFLAGS="-O2 -g $(CINIT_CFLAGS) -idirafter /usr/include -idirafter /usr/include/$(TRIPLE)" CGO_LDFLAGS="-L$(MUSL_LIBS)"
BUILD_FLAGS := -tags netgo,osusergo -ldflags '-linkmode external -extldflags "-static -Wl,-z,stack-size=2097152"'
endif

.PHONY: setup build test unit integration integration-rootless integration-noloader integration-session lint clean bench bench-quick bench-go bench-deps vmtest vmtest-deps

# Installs build and test dependencies and the unprivileged test user.
setup:
	$(SUDO) bash .ci/setup.sh

build:
ifneq ($(MUSL_CC),)
	@mkdir -p $(MUSL_LIBS) && ln -sf /usr/lib/$(TRIPLE)/libseccomp.a $(MUSL_LIBS)/libseccomp.a
endif
	$(BUILD_ENV) CGO_ENABLED=1 $(GO) build $(BUILD_FLAGS) -o $(BIN) ./cmd/agentrun

# The whole suite: lint, unit tests, the integration suite as the caller
# and, when the caller is root, as $(TEST_USER), once more without the
# init's loader thread (integration-noloader), once more through sessions
# (integration-session), and the same suites again in a pure cgroup v2 VM
# on an older kernel.
test: build lint unit integration integration-noloader integration-session vmtest

unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /integration)

integration: build
	@echo "== integration, as $$(id -un)"
	AGENTRUN_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 ./integration/
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory integration-rootless; \
	else echo "note: not root, so the root-mode half of the integration suite did not run (sudo make integration)"; fi

# The C init without its loader thread, as it is built for architectures
# other than x86_64 (LOADER_THREAD 0 in nsinit/internal/cinit/cinit.c):
# the integration suite as the caller, on this x86_64 host.
# Named agentrun like the others: tests tell the CLI's processes by name.
integration-noloader:
	@mkdir -p bin/noloader
	$(MAKE) --no-print-directory build BIN=bin/noloader/agentrun CINIT_CFLAGS=-DAR_NO_LOADER_THREAD
	@echo "== integration, the init without its loader thread, as $$(id -un)"
	AGENTRUN_BIN=$(CURDIR)/bin/noloader/agentrun $(GO) test -count=1 ./integration/

# The integration suite through sessions (AGENTRUN_IT_VIA=session): every
# sandbox the harness starts is agentrun create with the spawn's policy
# flags, exec of the command and delete, and what only spawns have is
# skipped with its reason (integration/via_session_test.go). As the caller
# and, when the caller is root, as $(TEST_USER), from a private directory
# of its own (not integration-rootless's, which may run at the same time).
integration-session: build
	@echo "== integration through sessions, as $$(id -un)"
	AGENTRUN_IT_VIA=session AGENTRUN_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 ./integration/
	@if [ "$$(id -u)" != 0 ]; then \
		echo "note: not root, so the root-mode half of the session run did not run (sudo make integration-session)"; exit 0; fi; \
	set -e; dir=$$(mktemp -d /tmp/agentrun-session-bin.XXXXXX); trap 'rm -rf "$$dir"' EXIT; \
	chmod 755 "$$dir"; \
	install -m 0755 $(BIN) "$$dir/agentrun"; \
	CGO_ENABLED=0 $(GO) build -o "$$dir/attacker" ./integration/internal/attacker; \
	chown -R $(TEST_USER) "$$dir"; \
	echo "== integration through sessions, as $(TEST_USER)"; \
	AGENTRUN_IT_VIA=session AGENTRUN_TEST_USER=$(TEST_USER) AGENTRUN_BIN="$$dir/agentrun" \
		AGENTRUN_ATTACKER="$$dir/attacker" \
		$(GO) test -count=1 -exec $(CURDIR)/.ci/as-user ./integration/

# Runs the integration suite, and the lifecycle's tests of real sandboxes,
# as the unprivileged $(TEST_USER) (root only).
integration-rootless: build
	rm -rf $(ROOTLESS_DIR) && mkdir -m 755 $(ROOTLESS_DIR)
	install -m 0755 $(BIN) $(ROOTLESS_DIR)/agentrun
	CGO_ENABLED=0 $(GO) build -o $(ROOTLESS_DIR)/attacker ./integration/internal/attacker
	chown -R $(TEST_USER) $(ROOTLESS_DIR)
	@echo "== integration, as $(TEST_USER)"
	AGENTRUN_TEST_USER=$(TEST_USER) AGENTRUN_BIN=$(ROOTLESS_DIR)/agentrun \
		AGENTRUN_ATTACKER=$(ROOTLESS_DIR)/attacker \
		$(GO) test -count=1 -exec $(CURDIR)/.ci/as-user ./integration/
	@# Not beside the integration suite: its orphan checks take any init
	@# whose parent is not an agentrun CLI for a leak.
	AGENTRUN_TEST_USER=$(TEST_USER) $(GO) test -count=1 -exec $(CURDIR)/.ci/as-user ./lifecycle/
	rm -rf $(ROOTLESS_DIR)

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=darwin $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The cgroup v2 path and an older kernel: Debian's cloud kernel (6.1) under
# qemu (TCG) with cgroup_no_v1=all, running the cgroup and integration
# suites as root and as an unprivileged user with and without delegation.
VMWORK := vmtest/work
vmtest-deps:
	$(SUDO) bash vmtest/deps.sh

vmtest: build
	mkdir -p $(VMWORK)
	cp $(BIN) $(VMWORK)/agentrun
	$(GO) test -c -o $(VMWORK)/selftest.test ./vmtest/selftest
	$(GO) test -c -o $(VMWORK)/cgroups.test ./cgroups
	CGO_ENABLED=0 $(GO) test -c -o $(VMWORK)/integration.test ./integration
	CGO_ENABLED=0 $(GO) build -o $(VMWORK)/agentrun-attacker ./integration/internal/attacker
	vmtest/run.sh --agentrun $(VMWORK)/agentrun --modes root,user,user-nodeleg \
		--host-bin $(VMWORK)/agentrun-attacker:/usr/local/bin/agentrun-attacker \
		--env AGENTRUN_ATTACKER=/usr/local/bin/agentrun-attacker \
		--host-bin /usr/bin/git --host-dir /usr/lib/git-core --host-bin /usr/bin/getent \
		--host-bin /usr/bin/python3 --host-dir /usr/lib/python3.11 \
		$(VMWORK)/selftest.test $(VMWORK)/cgroups.test $(VMWORK)/integration.test@root,user
	vmtest/run.sh --systemd --agentrun $(VMWORK)/agentrun --modes user-systemd \
		--host-bin $(VMWORK)/agentrun-attacker:/usr/local/bin/agentrun-attacker \
		--env AGENTRUN_ATTACKER=/usr/local/bin/agentrun-attacker \
		--bin-run 'integration.test=^(TestLimits|TestExitStatus|TestResultFile|TestTimeoutKillsTree|TestKilledRuntimeTakesSandboxDown|TestSignalsReachCommand)$$' \
		$(VMWORK)/selftest.test $(VMWORK)/cgroups.test $(VMWORK)/integration.test

# Side-by-side spawn latency against fork+exec, unshare, bwrap and runc
# (interleaved rounds, ratios, chart in bench/results/). Not a test.
bench-deps:
	$(SUDO) bash bench/deps.sh

bench: build
	$(GO) run ./bench/cmd/spawnbench -agentrun $(CURDIR)/$(BIN) $(BENCHFLAGS)

bench-quick: build
	$(GO) run ./bench/cmd/spawnbench -quick -agentrun $(CURDIR)/$(BIN) $(BENCHFLAGS)

# Go benchmarks of the spawn path, one per setup step, in the package that
# owns the step (table in bench/README.md). Root or user namespaces needed;
# what this host cannot run is skipped with the reason. Not a test.
BENCHTIME ?= 500ms
BENCH_GO_PKGS := . ./nsinit ./nsinit/internal/cinit ./seccomp ./cgroups
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count 1 $(BENCHGOFLAGS) $(BENCH_GO_PKGS)

clean:
	rm -rf bin

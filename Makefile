GO ?= go
BIN := bin/agentrun
TEST_USER ?= artest
STATICCHECK_VERSION := v0.8.2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup build test unit lint clean

# Installs build and test dependencies and the unprivileged test user.
setup:
	$(SUDO) bash .ci/setup.sh

build:
	CGO_ENABLED=1 $(GO) build -tags netgo,osusergo -ldflags '-linkmode external -extldflags "-static"' -o $(BIN) ./cmd/agentrun

test: build lint unit

unit:
	$(GO) test -count=1 ./...

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=darwin $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

clean:
	rm -rf bin

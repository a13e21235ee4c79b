GO ?= go
BIN := bin/agentrun

.PHONY: build test unit integration lint clean

build:
	$(GO) build -o $(BIN) ./cmd/agentrun

test: build
	$(GO) test -count=1 ./...

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=darwin $(GO) vet ./...

clean:
	rm -rf bin

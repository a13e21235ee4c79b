#!/usr/bin/env bash
# Installs everything agentrun's build and test suite need on a fresh Debian
# machine, and creates the unprivileged user the rootless tests run as.
# Idempotent; needs root.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (sudo make setup)" >&2
	exit 1
fi

TEST_USER=${AGENTRUN_TEST_USER:-artest}

export DEBIAN_FRONTEND=noninteractive
pkgs=(
	build-essential pkg-config libseccomp-dev   # cgo + libseccomp for seccomp/
	musl-tools                                  # the CLI links against musl (Makefile)
	git python3 iproute2 util-linux procps sudo # tools the sandbox tests run inside
	ca-certificates
	media-types                                 # /etc/mime.types (72 KiB): a root template copies it (template_test.go)
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Go: use the installed toolchain; on a machine without one, Debian's go
# fetches the version go.mod names through the module proxy (GOTOOLCHAIN=auto).
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
	apt-get install -y -qq --no-install-recommends golang-go >/dev/null
fi

# The pure cgroup v2 VM test (make vmtest): qemu, cpio, busybox-static.
bash "$(dirname "$0")/../vmtest/deps.sh"

if ! id "$TEST_USER" >/dev/null 2>&1; then
	useradd --create-home --shell /bin/bash "$TEST_USER"
fi
echo "setup: ok (test user $TEST_USER)"

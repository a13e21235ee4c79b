#!/usr/bin/env bash
# bench/deps.sh installs the peers that bench/ measures agentrun against, from
# Debian packages. It is idempotent: packages already installed are left
# alone and apt is not touched at all when nothing is missing.
#
#   bubblewrap      bwrap, the closest peer (same default isolation)
#   runc            the OCI reference runtime (`runc run` on a busybox bundle)
#   busybox-static  the statically linked busybox that becomes the bundle's rootfs
#                   (it replaces the dynamic `busybox` package if that is installed)
#   util-linux      unshare(1)
#   time            GNU time, for the peak RSS of one spawn
#   hyperfine       optional, for ad-hoc cross-checks of single contenders
set -euo pipefail

required=(bubblewrap runc busybox-static util-linux time)
optional=(hyperfine)

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing_req=()
missing_opt=()
for p in "${required[@]}"; do installed "$p" || missing_req+=("$p"); done
for p in "${optional[@]}"; do installed "$p" || missing_opt+=("$p"); done

if ((${#missing_req[@]} == 0 && ${#missing_opt[@]} == 0)); then
	echo "bench-deps: all present (${required[*]} ${optional[*]})"
	exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || { echo "bench-deps: need root or sudo to install: ${missing_req[*]} ${missing_opt[*]}" >&2; exit 1; }
	sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
if ((${#missing_req[@]} > 0)); then
	echo "bench-deps: installing ${missing_req[*]}"
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing_req[@]}"
fi
if ((${#missing_opt[@]} > 0)); then
	# Optional tools must not fail the target: the driver does not need them.
	echo "bench-deps: installing optional ${missing_opt[*]}"
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing_opt[@]}" ||
		echo "bench-deps: optional ${missing_opt[*]} not installed (not needed by the driver)" >&2
fi
echo "bench-deps: done"

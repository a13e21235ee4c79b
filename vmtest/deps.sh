#!/usr/bin/env bash
# Installs what vmtest/run.sh needs, from Debian's package registry only.
# Idempotent: packages already present are not reinstalled and apt is not
# touched at all when everything is there.
set -euo pipefail

pkgs=(qemu-system-x86 cpio busybox-static debootstrap)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)); then
	echo "vmtest/deps.sh: all present: ${pkgs[*]}"
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "vmtest/deps.sh: need root to install: ${missing[*]}" >&2
	exit 1
fi

echo "vmtest/deps.sh: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

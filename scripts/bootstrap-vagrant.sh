#!/usr/bin/env bash
# Idempotent setup for the Vagrant targets (make vagrant-box, make test-vagrant), on top of
# scripts/bootstrap.sh: Vagrant's libvirt provider, libvirt and QEMU, and what builds the box.
# On a ready machine it only asks dpkg (well under a second).
set -euo pipefail

debian_packages=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86
                 qemu-utils dnsmasq-base debootstrap fdisk)
missing=()
for pkg in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "vagrant bootstrap: missing Debian packages: ${missing[*]}; run as root or install them" >&2
        exit 1
    fi
    echo "vagrant bootstrap: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    nice -n 19 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -e /dev/kvm ]; then
    echo "vagrant bootstrap: /dev/kvm is missing: no KVM on this machine" >&2
    exit 1
fi

# Wheels of the build backend and of the broker's dependencies (at this venv's versions),
# so the harness builds a node's wheels inside the libvirt namespace, where no package
# index is reachable (harness/control/provision.py: OFFLINE_WHEELS).
wheels=.cache/offline-wheels
requirements=$(.venv/bin/python -c 'from importlib.metadata import version as v
print(" ".join(f"{r}=={v(r)}" for r in ("kazoo", "kafka-python", "crc32c")), "setuptools>=77")')
if [ "$(cat "$wheels/.requirements" 2>/dev/null)" != "$requirements" ]; then
    rm -rf "$wheels"
    # shellcheck disable=SC2086 # one word per requirement
    .venv/bin/pip download -q --no-deps --only-binary :all: -d "$wheels" $requirements
    echo "$requirements" > "$wheels/.requirements"
    echo "vagrant bootstrap: wheels for offline builds in $wheels"
fi

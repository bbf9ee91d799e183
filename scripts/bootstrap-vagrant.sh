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

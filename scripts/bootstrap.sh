#!/usr/bin/env bash
# Idempotent setup on Debian 12 as root: system packages, then .venv with pinned dependencies.
# On a ready machine it only compares a stamp and returns (well under 5 s).
set -euo pipefail
cd "$(dirname "$0")/.."

# Everything `make test` needs, from what a fresh Debian 12 has (a minbase root, say).
# python3-venv: Debian's python3 makes no venv without it. git: a night records the kchaos
# commit it ran (harness/provenance.py). libvirt-daemon-system,
# libvirt-clients, dnsmasq-base and qemu-system-x86 (libvirtd answers no client until it
# finds an emulator): the libvirt-in-a-namespace smoke test
# (tests/harness/test_libvirt_namespace.py); `make vagrant-bootstrap` adds Vagrant's.
# gcc and libc6-dev: the clock library of the clock faults (harness/control/offset_clock.c).
debian_packages=(python3 python3-venv make git maven zookeeper iptables nftables openssh-server iproute2
                 chromium sudo vagrant docker.io debootstrap busybox-static kcat
                 libvirt-daemon-system libvirt-clients dnsmasq-base qemu-system-x86
                 gcc libc6-dev)
missing=()
for pkg in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: missing Debian packages: ${missing[*]}; run as root or install them" >&2
        exit 1
    fi
    echo "bootstrap: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=.venv/.kchaos-bootstrap
# The editable install maps top-level packages when it runs: a new package needs it again.
want=$( (cat pyproject.toml; ls -d -- */__init__.py) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "bootstrap: preparing .venv"
    [ -x .venv/bin/pip ] || python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    # A failed install stops here: the stamp is written only after a complete one.
    log=$(.venv/bin/pip install -q -e ".[dev]" 2>&1) || { echo "$log" >&2; exit 1; }
    grep -v -e "^WARNING: Location" -e "^\s*$" <<<"$log" || true
    echo "$want" > "$stamp"
    echo "bootstrap: .venv ready"
fi

# Apache Kafka's jars for `--db kafka`, from Maven Central (Maven verifies checksums);
# a complete cache folder is used as it is, offline:
# 3.9.1 (the default, ZooKeeper mode), 4.1.1 (KRaft, the smoke of `make test`) and 4.2.0
# (whose metadata log the decoder's tests read with its own jars).
for version in 3.9.1 4.1.1 4.2.0; do
    if [ ! -f ".cache/kafka/$version/.complete" ]; then
        .venv/bin/python -m harness.db.kafka.distribution "$version" >/dev/null
        echo "bootstrap: Apache Kafka $version cached in .cache/kafka/$version/libs"
    fi
done

# The Java client of `--client java` (workloads/kafka/java/KchaosClient.java), compiled
# against each cached Kafka's jars only when its source changed (a sha256 stamp per version).
.venv/bin/python -m workloads.kafka.java.build 3.9.1 .cache/kafka/3.9.1/libs \
    4.1.1 .cache/kafka/4.1.1/libs 4.2.0 .cache/kafka/4.2.0/libs >/dev/null

# The clock library the clock faults preload into node processes, compiled once per source.
.venv/bin/python -m harness.control.clocks >/dev/null

# The Java clients of the tests (tests/support/group_clients/GroupConsumer.java and
# tests/support/txn_clients/TxnDriver.java), compiled against the cached kafka-clients only
# when their sources changed (a sha256 stamp).
java_sources=(tests/support/group_clients/GroupConsumer.java tests/support/txn_clients/TxnDriver.java)
java_classes=.cache/java-clients/classes
java_stamp=.cache/java-clients/.stamp
java_want=$(cat "${java_sources[@]}" | sha256sum | cut -d' ' -f1)
if [ ! -f "$java_stamp" ] || [ "$(cat "$java_stamp")" != "$java_want" ] \
        || [ ! -f "$java_classes/GroupConsumer.class" ] || [ ! -f "$java_classes/TxnDriver.class" ]; then
    rm -rf "$java_classes"
    mkdir -p "$java_classes"
    javac -nowarn -cp '.cache/kafka/3.9.1/libs/*' -d "$java_classes" "${java_sources[@]}"
    echo "$java_want" > "$java_stamp"
    echo "bootstrap: Java test clients compiled into $java_classes"
fi

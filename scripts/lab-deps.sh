#!/usr/bin/env bash
# Installs what the lab needs when it is missing: a real OpenSSH sshd and
# client, iproute2 (ip, ss), util-linux (unshare, nsenter, flock, prlimit)
# procps (sysctl), sudo (a lab test logs in as a non-root user), and systemd
# and dbus for the systemd lab hosts (systemd only runs inside them; the
# machine's PID 1 stays what it is), and openssl (the host agent hashes
# releases with it when a host has it, sha256sum otherwise; tests cover both),
# and zstd (the lab's hosts decode relayctl's compressed uploads and patches
# with the machine's zstd; a test hides it from a host for gzip), and
# busybox-static (the userland of the lab's busybox hosts; Debian's dynamic
# busybox, which it replaces, is another build), and iptables (a test drops
# one lab host's traffic: internal/lab/partition.go). Debian packages;
# needs root to install.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have sshd || need+=(openssh-server)
have ssh || need+=(openssh-client)
have ip || need+=(iproute2)
have ss || need+=(iproute2)
have nsenter || need+=(util-linux)
have flock || need+=(util-linux)
have prlimit || need+=(util-linux)
have sysctl || need+=(procps)
have sudo || need+=(sudo)
have setpriv || need+=(util-linux)
[ -x /lib/systemd/systemd ] || need+=(systemd)
have dbus-daemon || need+=(dbus)
have openssl || need+=(openssl)
have zstd || need+=(zstd)
have gzip || need+=(gzip)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
have iptables || need+=(iptables)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "lab-deps: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
	exit 1
fi
echo "lab-deps: installing ${need[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null

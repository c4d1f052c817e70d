#!/bin/sh
# systemd-boot.sh: boots a lab host with a real systemd (docs/lab.md, "A lab
# host with a real systemd"). internal/lab runs it as
#
#   unshare --pid --fork --kill-child --mount --uts --ipc --propagation private \
#       /bin/sh systemd-boot.sh cgroup DIR CGROUP
#
# so it starts as PID 1 of a new PID namespace, in new mount, UTS and IPC
# namespaces whose mounts propagate nowhere.
#
#   cgroup DIR CGROUP  move into CGROUP (a cgroup2 directory made for this
#                      host), then re-run as "boot" in a new cgroup namespace
#                      rooted there, so systemd sees a pure cgroup2 tree of
#                      its own (this machine has a mixed v1/v2 layout)
#   boot DIR           build the root, pivot into it, exec systemd
#
# DIR holds seed/ (files laid over the root: unit files, sshd_config, keys,
# masks), and the mountpoints fs/ (a tmpfs for the overlay's upper layer) and
# root/ (the overlay). Nothing here writes to the machine: every mount below
# happens in this host's own mount namespace, and every write inside the host
# goes to RAM.
set -eu

case $1 in
cgroup)
	# $$ is 1 here; the kernel reads it in the writer's PID namespace.
	echo $$ >"$3/cgroup.procs"
	exec unshare --cgroup /bin/sh "$0" boot "$2"
	;;
boot) ;;
*)
	echo "systemd-boot: unknown stage $1" >&2
	exit 2
	;;
esac

dir=$2
root=$dir/root
fs=$dir/fs

# The root: an overlay of the machine's root file system (read-only in use)
# under a tmpfs that takes every write.
mount -t tmpfs -o mode=0755 relaylab-upper "$fs"
mkdir "$fs/upper" "$fs/work"
mount -t overlay -o "lowerdir=/,upperdir=$fs/upper,workdir=$fs/work" relaylab-root "$root"

# Private, empty trees. /tmp above all: systemd-tmpfiles empties /tmp at
# boot, and the overlay's lower /tmp is the machine's. /root: the machine's
# .bashrc costs 0.5 s per SSH command.
for d in run tmp root opt/relay etc/relay var/lib/relayctl; do
	mkdir -p "$root/$d"
	mode=0755
	case $d in tmp) mode=1777 ;; root) mode=0700 ;; esac
	mount -t tmpfs -o "mode=$mode,nosuid,nodev" "relaylab-$(echo "$d" | tr / -)" "$root/$d"
done

# The machine's enabled units (databases, timers, gettys) are not this
# host's: only what seed/ enables starts.
rm -rf "$root"/etc/systemd/system/*.wants
cp -a "$dir/seed/." "$root/"

# /proc of this PID namespace. Read-only where a write would reach the
# machine, except /proc/sys/net/core: relayctl writes net.core.rmem_max
# there, as on a real host (it is global to the machine).
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
for p in sys sysrq-trigger irq bus fs; do
	[ -e "$root/proc/$p" ] || continue
	mount --bind "$root/proc/$p" "$root/proc/$p"
	mount -o remount,bind,ro "$root/proc/$p"
done
mount --bind "$root/proc/sys/net/core" "$root/proc/sys/net/core"
mount -o remount,bind,rw "$root/proc/sys/net/core"

# /sys read-only (so udev and friends skip themselves), with a cgroup2 tree
# rooted at this host's cgroup.
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$root/sys/fs/cgroup"

# A /dev of a few harmless devices and a pty instance of its own.
mount -t tmpfs -o mode=0755,nosuid relaylab-dev "$root/dev"
for d in null zero full random urandom tty; do
	: >"$root/dev/$d"
	mount --bind "/dev/$d" "$root/dev/$d"
done
mkdir "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5,nosuid,noexec devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev relaylab-shm "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
# systemd writes its status lines to the console; nobody reads them here.
: >"$root/dev/console"
mount --bind /dev/null "$root/dev/console"

# Into the new root; the machine's tree is dropped.
mkdir "$root/run/.oldroot"
cd "$root"
pivot_root . run/.oldroot
cd /
umount -l /run/.oldroot
rmdir /run/.oldroot

# No module loading and no clock setting, even by accident.
exec setpriv --bounding-set -sys_module,-sys_time \
	env -i container=relaylab /lib/systemd/systemd --system --show-status=no

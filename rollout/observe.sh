# relayctl observe: read-only. Prints every fact relayctl needs as framed
# sections, so one SSH round trip gathers a host:
#   BOUNDARY NAME\n  output  \nBOUNDARY end STATUS\n
# BOUNDARY is random for each run (chosen by relayctl), so no output can
# fake a frame; STATUS is the exit status of the command behind the section.
# Each section costs one process at most: this runs on every host at once.
# Arguments (validated and quoted by relayctl):
#   BOUNDARY PORT CURRENT_LINK RELEASES_DIR RELAY_CONFIG STATE_DIR MANAGER UNIT KEYS CONTROL [PID_ARGV...]
# KEYS is a comma-separated list of sysctl keys; PID_ARGV (manager
# "command") prints the relay's main PID. CONTROL is the relay's control
# address (host:port, in the relay's network namespace), "" for none.
set -u
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
b=$1
shift
port=$1 current=$2 releases=$3 config=$4 state=$5 manager=$6 unit=$7 keys=$8 control=$9
shift 9

emit() { # emit NAME CMD [ARGS...]
	printf '%s %s\n' "$b" "$1"
	shift
	"$@" 2>/dev/null </dev/null
	printf '\n%s end %d\n' "$b" "$?"
}

emit_all() { # emit_all NAME CMD [ARGS...]: stderr too, where it is the explanation
	printf '%s %s\n' "$b" "$1"
	shift
	"$@" 2>&1 </dev/null
	printf '\n%s end %d\n' "$b" "$?"
}

value() { # value NAME STATUS TEXT
	printf '%s %s\n%s\n%s end %d\n' "$b" "$1" "$3" "$b" "$2"
}

# status PID HOST PORT: GET /status from the relay's control plane, inside
# its network namespace, with whichever client the host has (bash's
# /dev/tcp first: it starts in a few milliseconds, curl in thirty).
status() {
	if command -v bash >/dev/null 2>&1; then
		nsenter -t "$1" -n timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
printf "GET /status HTTP/1.0\r\n\r\n" >&3
cat <&3' "$2" "$3"
		return
	fi
	if command -v curl >/dev/null 2>&1; then
		nsenter -t "$1" -n curl -fsS --max-time 3 "http://$2:$3/status"
		return
	fi
	echo "no HTTP client (curl or bash) on the host to read the relay's /status"
	return 127
}

writable() { if [ -w "$1" ]; then echo yes; else echo no; fi; }
absent() { echo "absent"; return 2; }

emit clock date +%s%N
emit kernel uname -r
emit hostname cat /proc/sys/kernel/hostname
emit uid id -u
emit netns-self readlink /proc/self/ns/net
# Global net.core values are mode 0444 in any network namespace but the
# initial one (DESIGN.md), which tells where this session runs even where
# /proc/1/ns is not readable.
emit netns-probe stat -c %a /proc/sys/net/core/rmem_max

old_ifs=$IFS
IFS=,
for key in $keys; do
	IFS=$old_ifs
	f=/proc/sys/$(printf '%s' "$key" | tr . /)
	if [ -e "$f" ]; then
		emit "sysctl $key" cat "$f"
		emit "sysctl-writable $key" writable "$f"
	else
		emit "sysctl $key" absent
	fi
done
IFS=$old_ifs

# sysctl.d, in the order of DESIGN.md; a folder that is another's alias
# (/lib -> /usr/lib on merged-usr systems) is read once, under its first name.
seen=
for d in /etc/sysctl.d /run/sysctl.d /usr/local/lib/sysctl.d /usr/lib/sysctl.d /lib/sysctl.d; do
	[ -d "$d" ] || continue
	real=$(cd "$d" && pwd -P)
	case " $seen " in *" $real "*) continue ;; esac
	seen="$seen $real"
	for f in "$d"/*.conf; do
		[ -f "$f" ] || continue
		emit "file $f" cat "$f"
	done
done
[ -f /etc/sysctl.conf ] && emit "file /etc/sysctl.conf" cat /etc/sysctl.conf

if [ -L "$current" ]; then emit current-link readlink "$current"; else emit current-link absent; fi
if [ -d "$releases" ]; then emit releases ls -1 "$releases"; else emit releases absent; fi
if [ -e "$config" ]; then emit relay-config cat "$config"; else emit relay-config absent; fi
# An apply that did not finish leaves its journal and lock owner behind.
[ -f "$state/journal" ] && emit journal cat "$state/journal"
[ -s "$state/lock.owner" ] && emit lock-owner cat "$state/lock.owner"

pid=
case $manager in
systemd)
	pid=$(systemctl show -p MainPID --value "$unit" 2>&1 </dev/null)
	value service $? "$pid"
	;;
command)
	pid=$("$@" 2>&1 </dev/null)
	value service $? "$pid"
	;;
esac
pid=$(printf '%s' "$pid" | tr -d ' \n')
case $pid in '' | 0 | *[!0-9]*) pid= ;; esac

filter="sport = :$port"
if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
	emit relay-exe readlink "/proc/$pid/exe"
	emit relay-netns readlink "/proc/$pid/ns/net"
	emit ss nsenter -t "$pid" -n ss -H -O -u -l -n -m "$filter"
	emit proc-net-udp cat "/proc/$pid/net/udp"
	emit proc-net-snmp cat "/proc/$pid/net/snmp"
	if [ -n "$control" ]; then
		emit_all relay-status status "$pid" "${control%:*}" "${control##*:}"
	fi
else
	emit ss ss -H -O -u -l -n -m "$filter"
	emit proc-net-udp cat /proc/net/udp
	emit proc-net-snmp cat /proc/net/snmp
fi

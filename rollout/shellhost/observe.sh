# shellcheck shell=sh
# relayctl observe: read-only. Prints every fact relayctl needs as framed
# sections, so one SSH round trip gathers a host:
#   BOUNDARY NAME\n  output  \nBOUNDARY end STATUS\n
# BOUNDARY is random for each run and arrives as the first line of stdin,
# never on the command line (any local user can read /proc/PID/cmdline), so
# nothing on the host can print a frame of its own; relayctl also refuses a
# frame name seen twice and output holding the boundary. STATUS is the exit
# status of the command behind the section. Content read from files is
# bounded (head -c), so a huge file cannot flood relayctl.
# Each section costs one process at most: this runs on every host at once.
# Arguments (validated and quoted by relayctl):
#   PORT CURRENT_LINK RELEASES_DIR RELAY_CONFIG STATE_DIR MANAGER UNIT PID_FILE KEYS CONTROL MAXFILE UNIT_DROPIN PROGRAM FILES RECEIPT SYSCTL_DIR...
# KEYS is a comma-separated list of sysctl keys. MANAGER is systemd,
# command or none (nothing names the process: it is looked for by its socket). CONTROL is the relay's control address (host:port, in
# the relay's network namespace), "" for none. MAXFILE bounds each file read.
# PROGRAM is the installed program a service of release kind none runs
# (a process is read back only if it runs it), - for a release relayctl
# ships (its process must run from RELEASES_DIR). FILES is a comma-separated
# list of the other files a plan writes (its templates'), - for none.
# RECEIPT is last-apply to read the newest receipt with a read-back in it
# (verify's baseline of the drop rate), undo:HEX the newest receipt of the
# plan with checksum sha256:HEX that records what its window changed, and
# the backups kept beside it (a rollback of that plan), - for none.
# Nothing here runs a command named by a spec: the relay is found through
# systemd or a pid file, and trusted only if its executable is a release.
set -u
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
IFS= read -r b || exit 3
case $b in @@relayctl-*) ;; *) exit 3 ;; esac
port=$1 current=$2 releases=$3 config=$4 state=$5 manager=$6 unit=$7 pidfile=$8 keys=$9
shift 9
control=$1 maxfile=$2 unitdropin=$3 program=$4 files=$5 receipt=$6
shift 6

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

# file_of PATH: a regular file's first MAXFILE+1 bytes (one more tells
# relayctl it was cut).
file_of() { [ -f "$1" ] && head -c "$((maxfile + 1))" -- "$1"; }

# status PID HOST PORT: GET /status from the relay's control plane, inside
# its network namespace, with whichever client the host has (bash's
# /dev/tcp first: it starts in a few milliseconds, curl in thirty). The
# answer is the relay's to write: bounded, and framed like any output.
status() {
	if command -v bash >/dev/null 2>&1; then
		nsenter -t "$1" -n timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
printf "GET /status HTTP/1.0\r\n\r\n" >&3
head -c 65536 <&3' "$2" "$3"
		return
	fi
	if command -v curl >/dev/null 2>&1; then
		nsenter -t "$1" -n curl -fsS --max-time 3 --max-filesize 65536 "http://$2:$3/status"
		return
	fi
	echo "no HTTP client (curl or bash) on the host to read the relay's /status"
	return 127
}

writable() { if [ -w "$1" ]; then echo yes; else echo no; fi; }
absent() { echo "absent"; return 2; }

emit clock date +%s%N
# The kernel's short values are read with the shell's own read (no process).
if IFS= read -r v </proc/sys/kernel/osrelease; then value kernel 0 "$v"; else emit kernel uname -r; fi
if IFS= read -r v </proc/sys/kernel/hostname; then value hostname 0 "$v"; else emit hostname head -c 256 /proc/sys/kernel/hostname; fi
emit uid id -u
emit netns-self readlink /proc/self/ns/net
# Global net.core values are mode 0444 in any network namespace but the
# initial one (docs/kernel.md), which tells where this session runs even where
# /proc/1/ns is not readable.
emit netns-probe stat -c %a /proc/sys/net/core/rmem_max

old_ifs=$IFS
IFS=,
for key in $keys; do
	IFS=$old_ifs
	f=/proc/sys rest=$key
	while :; do
		f=$f/${rest%%.*}
		case $rest in *.*) rest=${rest#*.} ;; *) break ;; esac
	done
	if [ -e "$f" ]; then
		emit "sysctl $key" head -c 4096 "$f"
		emit "sysctl-writable $key" writable "$f"
	else
		emit "sysctl $key" absent
	fi
done
IFS=$old_ifs

# sysctl.d, in the order relayctl gives (tune.SysctlDirs); a folder that is
# another's alias (/lib -> /usr/lib on merged-usr systems) is read once,
# under its first name. A name with characters relayctl does not pass
# through is reported, not read.
seen=
for d in "$@"; do
	[ -d "$d" ] || continue
	real=$(cd "$d" && pwd -P)
	case " $seen " in *" $real "*) continue ;; esac
	seen="$seen $real"
	for f in "$d"/*.conf; do
		[ -f "$f" ] || continue
		case ${f##*/} in
		*[!A-Za-z0-9._+@:-]*) value "skipped $d" 0 "a file name with unusual characters" ;;
		*) emit "file $f" file_of "$f" ;;
		esac
	done
done
[ -f /etc/sysctl.conf ] && emit "file /etc/sysctl.conf" file_of /etc/sysctl.conf

if [ "$program" = - ]; then
	if [ -L "$current" ]; then emit current-link readlink "$current"; else emit current-link absent; fi
	# The releases by name, from the shell's own glob (no ls): one a line,
	# dot names left out, as ls -1 lists them.
	if [ -d "$releases" ]; then
		rl=
		for f in "$releases"/*; do
			[ -e "$f" ] || [ -L "$f" ] || continue
			rl="$rl${f##*/}
"
		done
		value releases 0 "${rl%
}"
	else emit releases absent; fi
	# the release store, most recently stored first (store.go)
	[ -d "$releases/.sha256" ] && emit store ls -1t "$releases/.sha256"
	# What an upload may be packed in (package wire): gzip, and zstd with
	# its version (a patch needs --patch-from: zstd 1.4.5 and later). The
	# shell finds them without a process; zstd -V is the only one.
	command -v gzip >/dev/null 2>&1 && value gzip 0 found
	command -v zstd >/dev/null 2>&1 && emit zstd zstd -V
fi
# A file relayctl writes may hold secrets (the relay config above all): it
# is read only where root alone could have put it, never through a symlink
# (whose target could be any file). read_owned NAME PATH.
read_owned() {
	if [ -L "$2" ]; then
		value "$1-unsafe" 0 "$2 is a symlink"
	elif [ -e "$2" ]; then
		cdir=${2%/*}
		own=$(stat -c '%u %a' -- "${cdir:-/}")
		case $own in
		"0 "[0-7][0145][0145] | "0 "[0145][0145] | "0 "[0-7][0-7][0145][0145]) emit "$1" file_of "$2" ;;
		*) value "$1-unsafe" 0 "${cdir:-/} (the folder of $2) is owned by uid ${own% *} with mode ${own#* }: others can write it" ;;
		esac
	else emit "$1" absent; fi
}
read_owned relay-config "$config"
if [ "$files" != - ]; then
	old_ifs=$IFS
	IFS=,
	for f in $files; do
		IFS=$old_ifs
		read_owned "written $f" "$f"
	done
	IFS=$old_ifs
fi
# An apply that did not finish leaves its journal and lock owner behind.
[ -f "$state/journal" ] && emit journal tail -c 1048576 "$state/journal"
[ -s "$state/lock.owner" ] && emit lock-owner head -c 4096 "$state/lock.owner"
# The newest receipt that read the relay back after a window (receipt
# names start with their UTC time, so the glob's order is theirs; a
# staged run's has no drops_after). Its name travels as a section of its
# own: relayctl's own names are plain, and anything else is not read.
# Newest first, and the first that has one is read: one file, usually.
# ("$@", the sysctl.d folders, is read above and free here.)
if [ "$receipt" = last-apply ] && [ -d "$state/receipts" ]; then
	set -- "$state"/receipts/*.json
	i=$#
	while [ "$i" -gt 0 ]; do
		eval "f=\${$i}"
		i=$((i - 1))
		[ -f "$f" ] && [ ! -L "$f" ] || continue
		case ${f##*/} in *[!A-Za-z0-9._-]*) continue ;; esac
		case $(file_of "$f") in *'"drops_after"'*) ;; *) continue ;; esac
		value last-apply-name 0 "${f##*/}"
		emit last-apply file_of "$f"
		break
	done
fi

# The newest receipt of a plan (by its checksum) that records what its
# window changed: what relayctl rollback of that plan goes back to. Read
# as any file relayctl writes (read_owned: where root alone could have
# put it), with the names of the backups kept beside it.
case $receipt in undo:*)
	if [ -d "$state/receipts" ]; then
		sum=${receipt#undo:}
		case $sum in *[!0-9a-f]* | '') sum=none ;; esac
		set -- "$state"/receipts/*.json
		i=$#
		while [ "$i" -gt 0 ]; do
			eval "f=\${$i}"
			i=$((i - 1))
			[ -f "$f" ] && [ ! -L "$f" ] || continue
			case ${f##*/} in *[!A-Za-z0-9._-]*) continue ;; esac
			case $(file_of "$f") in *"\"plan_checksum\": \"sha256:$sum\""*'"undo": {'*) ;; *) continue ;; esac
			n=${f##*/}
			n=${n%.json}
			value undo-name 0 "$n"
			read_owned undo-receipt "$f"
			[ -d "$state/receipts/$n.backups" ] && [ ! -L "$state/receipts/$n.backups" ] && emit undo-backups ls -1 "$state/receipts/$n.backups"
			break
		done
	fi
	;;
esac

# runs_program EXE: EXE is what the service runs: the spec's installed
# program (kind none), or anything in a release folder.
if [ "$program" = - ]; then
	what="a release in $releases"
else
	realprog=$(readlink -f -- "$program" 2>/dev/null) || realprog=$program
	what=$program
fi
runs_program() {
	if [ "$program" = - ]; then
		case $1 in "$releases"/*) return 0 ;; esac
		return 1
	fi
	[ "$1" = "$realprog" ]
}

pid=
case $manager in
systemd)
	if [ -e "$unitdropin" ]; then emit unit-dropin file_of "$unitdropin"; else emit unit-dropin absent; fi
	emit_all systemd systemctl show --property=MainPID,LoadState,ActiveState,SubState,NRestarts,InvocationID,FileDescriptorStoreMax,NFileDescriptorStore -- "$unit"
	pid=$(systemctl show --property=MainPID --value -- "$unit" 2>/dev/null </dev/null)
	# Every process of the unit (workers beside the main one): its sockets
	# are the service's. cgroup v2, else v1's systemd hierarchy.
	cg=$(systemctl show --property=ControlGroup --value -- "$unit" 2>/dev/null </dev/null)
	case $cg in
	/*[!A-Za-z0-9@._:/\-]* | '' | *..*) ;;
	/*)
		for procs in "/sys/fs/cgroup$cg/cgroup.procs" "/sys/fs/cgroup/systemd$cg/cgroup.procs"; do
			if [ -f "$procs" ]; then
				emit service-pids head -c 65536 "$procs"
				break
			fi
		done
		;;
	esac
	;;
command)
	# The pid file is trusted only if nobody but root can write it.
	if [ -f "$pidfile" ] && [ ! -L "$pidfile" ]; then
		own=$(stat -c '%u %a' -- "$pidfile")
		case $own in
		"0 "[0-7][0145][0145] | "0 "[0145][0145]) pid=$(head -c 32 -- "$pidfile") ;;
		*) value pidfile-untrusted 0 "$pidfile is owned by uid ${own% *} with mode ${own#* }: only root may write it" ;;
		esac
	fi
	;;
none)
	# Nothing names the relay's process (facts without --pid-file or
	# --systemd-unit): find one that runs a release and has a UDP socket
	# bound to the port, from the kernel's own tables. It is read back only
	# as a pid file's would be: it must run a release (checked below).
	hex=$(printf '%04X' "$port")
	found=
	for d in /proc/[0-9]*; do
		e=$(readlink "$d/exe" 2>/dev/null) || continue
		runs_program "$e" || continue
		if grep -q "^ *[0-9]*: [0-9A-F]*:$hex " "$d/net/udp" "$d/net/udp6" 2>/dev/null; then
			found="$found ${d#/proc/}"
		fi
	done
	set -- $found
	case $# in
	1)
		pid=$1
		value found-by 0 "its socket: the one process running $what with udp/$port"
		;;
	0) value found-by 1 "no process running $what has udp/$port" ;;
	*) value found-by 1 "$# processes running $what have udp/$port:$found" ;;
	esac
	;;
esac
set -f
p=
for w in $pid; do p=$p$w; done # the pid file's words, without blanks or newlines
set +f
pid=$p
case $pid in '' | 0 | *[!0-9]*) pid= ;; esac

# The process is the relay only if it runs a release: a pid file or unit
# pointing elsewhere (pid 1, a copy in another namespace) is not read back.
exe=
if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null)
	if ! runs_program "$exe"; then
		value untrusted-pid 0 "$pid $exe"
		pid=
	fi
else
	pid=
fi
value service 0 "$pid"

filter="sport = :$port"
if [ -n "$pid" ]; then
	value relay-exe 0 "$exe"
	emit relay-netns readlink "/proc/$pid/ns/net"
	emit ss nsenter -t "$pid" -n ss -H -O -u -a -n -m -e -p "$filter"
	emit proc-net-udp cat "/proc/$pid/net/udp"
	emit proc-net-snmp cat "/proc/$pid/net/snmp"
	if [ -n "$control" ]; then
		emit_all relay-status status "$pid" "${control%:*}" "${control##*:}"
	fi
else
	emit ss ss -H -O -u -a -n -m -e "$filter"
	emit proc-net-udp cat /proc/net/udp
	emit proc-net-snmp cat /proc/net/snmp
fi

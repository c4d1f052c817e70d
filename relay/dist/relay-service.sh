#!/bin/sh
# relay-service: runs relayd for a service manager that runs commands (OpenRC,
# sysvinit, runit, a container, a hand-written script: relayctl's
# `relay.service.manager: command`), with the zero-loss handoff between two
# releases. Install it as /opt/relay/bin/relay-service (docs/relay-service.md);
# relayctl runs it as argv, e.g. [/opt/relay/bin/relay-service, handoff].
# Under systemd use relay/dist/relayd.service instead.
#
#   start    start /opt/relay/current/relayd --config /etc/relay/relayd.env
#            detached (own session, output appended to the log), in the relay's
#            network namespace; wait up to RELAY_WAIT seconds until it listens
#            on its UDP port. If it exits or never listens, print why (the
#            log's tail) on stderr, leave nothing running, exit 1.
#   stop     SIGTERM, wait up to RELAY_WAIT seconds, then SIGKILL. Exit 0 if
#            the relay was not running.
#   restart  stop, then start.
#   handoff  start the release (/opt/relay/current/relayd, already switched)
#            beside the running relayd, which hands it its UDP socket and
#            lobby table over RELAYD_HANDOFF_SOCKET (docs/relayd.md,
#            "Handoff"); wait up to RELAY_WAIT seconds until the old one has
#            exited and the new one listens, then update the pid file. If
#            the new one fails, stop it if it still runs, print the log's
#            tail and whether the old one still serves, exit 1 (the pid file
#            still names the old one). Not running: start instead.
#   run      start, then stay in the foreground while a relayd serves, the
#            one a handoff started included, for a supervisor that watches
#            its child (runit's ./run, a container's entrypoint). SIGTERM or
#            SIGINT stops the relay and exits 0; exit 1 if the relay ended
#            without being asked to.
#   pid      print the relay's PID and exit 0; exit 3 printing nothing if it
#            is not running.
#   status   human-readable state; exit 0 if running, 3 if not.
#
# Exit codes: 0 ok, 1 failure, 2 usage, 3 not running (pid, status).
#
# Settings come from /etc/relay/service.env (KEY=VALUE, sourced as shell, so
# it must be owned by the user running this, or root, and writable by no one
# else) if present, or from the file named by $RELAY_SERVICE_ENV:
#   RELAY_NETNS    network namespace to start the relay in (ip netns exec);
#                  empty: the caller's own
#   RELAY_USER     user to run relayd as (setpriv, or busybox's and su;
#                  it then has no capabilities, so no SO_RCVBUFFORCE);
#                  empty: the caller
#   RELAY_WAIT     seconds that start and stop wait (default 5)
#   RELAY_ROOT     default /opt/relay (binary: $RELAY_ROOT/current/relayd)
#   RELAY_CONFIG   default /etc/relay/relayd.env; its RELAYD_LISTEN=HOST:PORT
#                  names the UDP port that start waits for (any UDP socket of
#                  the process if unset)
#   RELAY_PIDFILE  default $RELAY_ROOT/run/relayd.pid
#   RELAY_LOG      default $RELAY_ROOT/log/relayd.log
# The folders of the pid file and the log must be the caller's and writable
# by no one else, and so must every folder above them and above the
# settings file (a sticky one such as /tmp excepted): the caller (root,
# usually) writes there.
#
# Needs, in PATH: sh, setsid, sed, awk, grep, readlink, stat, id, rm,
# mkdir, mv, sleep, wc, tail, and mkfifo and timeout for a relayd that
# says when it is ready (util-linux, coreutils or busybox 1.35); ip for
# RELAY_NETNS; for RELAY_USER util-linux's setpriv, or busybox's setpriv
# and su. Nothing else: not nohup, not bash, not ss, not nsenter.

set -u

RELAY_ROOT=/opt/relay
RELAY_CONFIG=/etc/relay/relayd.env
RELAY_NETNS=
RELAY_WAIT=5
RELAY_PIDFILE=
RELAY_LOG=
RELAY_USER=
conf=${RELAY_SERVICE_ENV:-/etc/relay/service.env}

err() { printf 'relay-service: %s\n' "$*" >&2; }
me=$(id -u)

# private PATH WHAT: PATH is owned by the caller (or root) and writable by
# no one else, and not a symlink; else say why on stderr and fail. Whoever
# could write there could run commands as the caller, or make it write
# where they choose.
private() {
	if [ -L "$1" ]; then
		err "$2 $1 is a symlink: use the real path"
		return 1
	fi
	st=$(stat -c '%u %a' "$1" 2>/dev/null) || { err "$2 $1: cannot stat it"; return 1; }
	owner=${st% *}
	mode=${st#* }
	if [ "$owner" != "$me" ] && [ "$owner" != 0 ]; then
		err "$2 $1 is owned by uid $owner, not by uid $me that runs relay-service (or root): chown it"
		return 1
	fi
	case $mode in
	*[2367]? | *[2367]) err "$2 $1 is group- or world-writable (mode $mode): chmod go-w it"; return 1 ;;
	esac
	return 0
}

# prefixes PATH: "/" and every folder from it down to PATH (absolute), one
# a line.
prefixes() {
	printf '/\n'
	p_=
	rest_=${1#/}
	while [ -n "$rest_" ]; do
		p_=$p_/${rest_%%/*}
		case $rest_ in */*) rest_=${rest_#*/} ;; *) rest_= ;; esac
		printf '%s\n' "$p_"
	done
}

# above_both PATH REAL: the folders above PATH as written (if absolute)
# and as resolved (REAL), one a line.
above_both() {
	case $1 in /*) prefixes "${1%/*}" ;; esac
	prefixes "${2%/*}"
}

# folder_fault STAT: what is wrong with a folder above a path, by its
# `stat -c '%u %a %F'` line, in fault_ (false if nothing): it must be the
# caller's or root's, and writable by no one else unless it is sticky or
# a symlink (what a symlink points to is checked as resolved).
folder_fault() {
	ff_o=${1%% *} ff_m=${1#* }
	ff_m=${ff_m%% *}
	if [ "$ff_o" != "$me" ] && [ "$ff_o" != 0 ]; then
		fault_="is owned by uid $ff_o, not by uid $me that runs relay-service (or root): chown it"
		return 0
	fi
	case $1 in *" symbolic link") return 1 ;; esac
	case $ff_m in
	[1357]???) return 1 ;;
	*[2367]? | *[2367])
		fault_="is group- or world-writable (mode $ff_m): chmod go-w it"
		return 0
		;;
	esac
	return 1
}

# private_above PATH WHAT: every folder above PATH, as written and as
# resolved, is the caller's (or root's) and writable by no one else, unless
# it is sticky (/tmp: nobody renames what is not theirs there). Whoever
# could write one could put a file, folder or symlink of their own in
# PATH's place once private has looked: a settings file root then sources,
# a folder root then writes the pid file or the log in. One stat asks of
# every folder at once (a stat a folder was most of what relay-service
# started); a folder it cannot stat is then found one by one.
private_above() {
	pa_path=$1 pa_what=$2
	real_=$(readlink -f -- "$1") || { err "$2 $1: cannot resolve it"; return 1; }
	pa_list=$(above_both "$1" "$real_")
	ifs_=$IFS
	IFS='
'
	set -f
	# shellcheck disable=SC2086 # one folder a line, globbing off
	set -- $pa_list
	if ! pa_st=$(stat -c '%u %a %F' -- "$@" 2>/dev/null); then
		pa_st=
		for pa_p; do
			pa_l=$(stat -c '%u %a %F' -- "$pa_p" 2>/dev/null) || {
				IFS=$ifs_
				set +f
				err "$pa_what $pa_path: cannot stat $pa_p above it"
				return 1
			}
			pa_st="$pa_st
$pa_l"
		done
	fi
	pa_bad=
	for pa_l in $pa_st; do
		if [ -z "$pa_bad" ] && folder_fault "$pa_l"; then pa_bad="$1 above it $fault_"; fi
		shift
	done
	IFS=$ifs_
	set +f
	[ -z "$pa_bad" ] && return 0
	err "$pa_what $pa_path: $pa_bad"
	return 1
}

if [ -e "$conf" ]; then
	private "$conf" "settings file" || exit 1
	private_above "$conf" "settings file" || exit 1
	# shellcheck disable=SC1090 # the settings file is named at run time
	. "$conf" || { err "read $conf failed"; exit 1; }
fi
if [ -n "$RELAY_USER" ] && ! id -u "$RELAY_USER" >/dev/null 2>&1; then
	err "RELAY_USER=$RELAY_USER in $conf: no such user"
	exit 1
fi
[ -n "$RELAY_PIDFILE" ] || RELAY_PIDFILE=$RELAY_ROOT/run/relayd.pid
[ -n "$RELAY_LOG" ] || RELAY_LOG=$RELAY_ROOT/log/relayd.log
case $RELAY_WAIT in '' | *[!0-9]*) RELAY_WAIT=5 ;; esac
bin=$RELAY_ROOT/current/relayd

# only_line FILE: FILE's one line in ol_ (false if it cannot be read, is
# empty or has a second line): $(cat FILE) without a process, for the small
# files read here in every wait (a pid file, /proc/PID/stat and comm). Not
# for /proc/sys: the shell reads a byte at a time, and an integer sysctl
# ends its value at the first read that does not start at offset 0.
only_line() {
	{ { IFS= read -r ol_ || [ -n "$ol_" ]; } && ! { IFS= read -r ol_x || [ -n "$ol_x" ]; }; } 2>/dev/null <"$1"
}

# rm_stale FILE: rm -f FILE, where there is one: a file a stop or an
# earlier start removed is usually gone, and rm is a program.
rm_stale() { if [ -e "$1" ] || [ -L "$1" ]; then rm -f "$1"; fi; }

# alive PID: the process exists and has not exited. A zombie has exited: it
# only waits for its parent (PID 1 here reaps orphans late) to collect it.
# The state follows the last ") " of /proc/PID/stat (the name before it may
# hold one); a name holding a newline makes it two lines, which sed reads.
alive() {
	if only_line "/proc/$1/stat"; then
		case $ol_ in *") "*) st=${ol_##*) } ;; *) return 1 ;; esac
		st=${st%"${st#?}"}
	else
		st=$(sed -n 's/^.*) \(.\).*$/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
	fi
	case $st in '' | Z | X | x) return 1 ;; esac
	return 0
}

# is_relayd PID: the process is a live relayd, not a reused pid.
is_relayd() {
	alive "$1" && only_line "/proc/$1/comm" && [ "$ol_" = relayd ]
}

# running_pid prints the pid from the pid file if that process is a live relayd.
running_pid() {
	only_line "$RELAY_PIDFILE" || return 1
	p=$ol_
	case $p in '' | *[!0-9]*) return 1 ;; esac
	is_relayd "$p" || return 1
	printf '%s\n' "$p"
}

# listen_port prints the port of RELAYD_LISTEN in the config, or nothing.
listen_port() {
	v=$(sed -n 's/^[[:space:]]*RELAYD_LISTEN[[:space:]]*=[[:space:]]*//p' "$RELAY_CONFIG" 2>/dev/null | tail -n 1)
	v=${v%%[[:space:]]*}
	v=${v#[\"\']}
	v=${v%[\"\']}
	v=${v##*:}
	case $v in '' | *[!0-9]*) return 0 ;; esac
	printf '%s\n' "$v"
}

# handoff_socket prints RELAYD_HANDOFF_SOCKET of the config, or nothing.
handoff_socket() {
	v=$(sed -n 's/^[[:space:]]*RELAYD_HANDOFF_SOCKET[[:space:]]*=[[:space:]]*//p' "$RELAY_CONFIG" 2>/dev/null | tail -n 1)
	v=${v%%[[:space:]]*}
	v=${v#[\"\']}
	v=${v%[\"\']}
	printf '%s\n' "$v"
}

# listening PID PORT: PID has a UDP socket bound to PORT (any port if
# empty). /proc/PID/net/udp lists the sockets of PID's network namespace;
# one whose inode is among PID's descriptors is PID's. (No ss, no nsenter:
# a minimal container has neither.)
listening() {
	inodes=
	# The type and inode of what each descriptor is (stat -L, one call for
	# all): a socket's inode as /proc/net/udp lists it. Nothing of a name
	# reaches the list, so no file name can pass for a socket.
	kinds=$(stat -L -c '%F %i' -- /proc/"$1"/fd/* 2>/dev/null)
	ifs_=$IFS
	IFS='
'
	set -f
	for l in $kinds; do
		case $l in "socket "*) inodes="$inodes ${l#socket }" ;; esac
	done
	IFS=$ifs_
	set +f
	[ -n "$inodes" ] || return 1
	hex=
	[ -z "$2" ] || hex=$(printf '%04X' "$2")
	awk -v port="$hex" -v inodes="$inodes" '
		BEGIN { n = split(inodes, a, " "); for (i = 1; i <= n; i++) mine[a[i]] = 1 }
		NR > 1 { split($2, local, ":"); if ((port == "" || local[2] == port) && ($10 in mine)) found = 1 }
		END { exit !found }' "/proc/$1/net/udp" 2>/dev/null
}

# wait_gone PID HUNDREDTHS: wait up to HUNDREDTHS hundredths of a second
# for PID to exit (a relay stops in a few milliseconds: finer steps keep
# the restart window short).
wait_gone() {
	n=0
	while alive "$1"; do
		[ "$n" -lt "$2" ] || return 1
		sleep 0.01
		n=$((n + 1))
	done
	return 0
}

# kill_pid PID: SIGTERM, wait, SIGKILL.
kill_pid() {
	kill -TERM "$1" 2>/dev/null
	wait_gone "$1" "$((RELAY_WAIT * 100))" && return 0
	err "stop: relayd (pid $1) still running ${RELAY_WAIT}s after SIGTERM, sending SIGKILL"
	kill -KILL "$1" 2>/dev/null
	wait_gone "$1" 500 && return 0
	err "stop: relayd (pid $1) survived SIGKILL"
	return 1
}

# log_tail OFFSET: what the relay wrote to its log after byte OFFSET.
log_tail() {
	err "last lines of $RELAY_LOG:"
	tail -c "+$(($1 + 1))" "$RELAY_LOG" 2>/dev/null | tail -n 20 | sed 's/^/  /' >&2
}

do_start() {
	if p=$(running_pid); then
		echo "relayd already running (pid $p)"
		return 0
	fi
	if [ ! -x "$bin" ]; then
		err "start: $bin: no executable release installed"
		return 1
	fi
	dirs_ok || return 1
	find_tools || return 1
	rm_stale "$RELAY_PIDFILE"
	port=$(listen_port)
	log_offset
	what="listening on udp port $port"
	[ -n "$port" ] || what="listening on udp"
	# A relayd that says when it is ready (capability ready=fd/1) is waited
	# on, not polled: it writes READY to a FIFO when it relays, and the FIFO
	# ends when it exits first.
	if grep -qa "relayd-capabilities: .*ready=fd/1" "$bin"; then
		start_ready && return 0
		return 1
	fi
	spawn "$RELAY_PIDFILE"
	n=0
	while :; do
		if ! alive "$job"; then
			wait "$job"
			err "start: relayd exited (status $?) before $what"
			log_tail "$offset"
			rm -f "$RELAY_PIDFILE"
			return 1
		fi
		if is_relayd "$job" && listening "$job" "$port"; then
			echo "relayd started (pid $job, $what)"
			return 0
		fi
		if [ "$n" -ge "$((RELAY_WAIT * 10))" ]; then
			err "start: relayd (pid $job) not $what after ${RELAY_WAIT}s, stopping it"
			kill_pid "$job"
			log_tail "$offset"
			rm -f "$RELAY_PIDFILE"
			return 1
		fi
		sleep 0.1
		n=$((n + 1))
	done
}

# start_ready: start relayd with --ready-fd on a FIFO and wait for its
# READY line: it arrives the moment relayd relays. One blocking read, for
# at most RELAY_WAIT seconds of wall time: relayd holds the FIFO's only
# write end, so the read ends at once, empty, if relayd exits first. (A
# loop of short timed reads lost the line on a busy machine: a reader
# killed by its timeout before it ran counted as a wait of 0.2 s.)
start_ready() {
	fifo=${RELAY_PIDFILE%/*}/ready.$$
	rm_stale "$fifo"
	mkfifo -m 0600 "$fifo" || return 1
	READY_FIFO=$fifo spawn "$RELAY_PIDFILE"
	# The open is inside the timeout too: it waits for the writer's.
	line=$(timeout "$RELAY_WAIT" sh -c 'exec 3<"$0" && IFS= read -r l <&3; printf %s "$l"' "$fifo" 2>/dev/null)
	rm -f "$fifo"
	ok=
	[ "$line" = READY ] && ok=1
	# An end of file can come while relayd is still exiting.
	[ -n "$ok" ] || wait_gone "$job" 50 || :
	if [ -n "$ok" ] && is_relayd "$job" && listening "$job" "$port"; then
		echo "relayd started (pid $job, $what)"
		return 0
	fi
	if ! alive "$job"; then
		wait "$job"
		err "start: relayd exited (status $?) before $what"
	else
		err "start: relayd (pid $job) not $what after ${RELAY_WAIT}s, stopping it"
		kill_pid "$job"
	fi
	log_tail "$offset"
	rm -f "$RELAY_PIDFILE"
	return 1
}

# dirs_ok makes the folders of the pid file and the log (mode 0755) if
# missing, and checks that they, and every folder above them, are private
# to the caller.
dirs_ok() {
	for d in "${RELAY_PIDFILE%/*}" "${RELAY_LOG%/*}"; do
		[ -d "$d" ] || (umask 022 && mkdir -p "$d") || return 1
		private "$d" "folder" || return 1
		private_above "$d" "folder" || return 1
	done
	return 0
}

# in_path NAME: the first executable NAME in PATH, in path_. Not command
# -v: Debian's busybox-static sh runs its own applet of a name before
# PATH's program of that name, and command -v says only the name.
in_path() {
	path_=
	ifs_=$IFS
	IFS=:
	set -f
	for pd_ in $PATH; do
		if [ -f "${pd_:-.}/$1" ] && [ -x "${pd_:-.}/$1" ]; then
			path_=${pd_:-.}/$1
			break
		fi
	done
	IFS=$ifs_
	set +f
	[ -n "$path_" ]
}

# find_tools finds, in PATH, what spawn runs that busybox also has as a
# weaker applet: ip for RELAY_NETNS (busybox's has no netns) in ip_, and
# for RELAY_USER setpriv in setpriv_, and su in su_ where that setpriv
# cannot change the user (busybox's; util-linux's has --reuid).
find_tools() {
	if [ -n "$RELAY_NETNS" ]; then
		in_path ip || { err "RELAY_NETNS=$RELAY_NETNS: no ip (iproute2) in PATH"; return 1; }
		ip_=$path_
	fi
	su_=
	[ -n "$RELAY_USER" ] || return 0
	in_path setpriv || { err "RELAY_USER=$RELAY_USER: no setpriv in PATH"; return 1; }
	setpriv_=$path_
	"$setpriv_" --help 2>&1 | grep -q -e --reuid && return 0
	if ! in_path su; then
		err "RELAY_USER=$RELAY_USER: $setpriv_ cannot change the user (busybox's) and there is no su in PATH: install util-linux's setpriv"
		return 1
	fi
	su_=$path_
}

# log_offset sets offset to the log's length, so log_tail shows only what
# the relay about to start writes.
log_offset() {
	offset=0
	if [ -f "$RELAY_LOG" ]; then offset=$(wc -c <"$RELAY_LOG") || offset=0; fi
}

# spawn PIDFILE: start the release detached, its pid in PIDFILE and in job.
spawn() {
	pf=$1
	shift
	if [ -n "$RELAY_NETNS" ]; then
		set -- "$ip_" netns exec "$RELAY_NETNS"
	fi
	# After ip netns exec, which needs root; no capabilities left.
	if [ -n "$RELAY_USER" ] && [ -z "$su_" ]; then
		set -- "$@" "$setpriv_" --reuid="$RELAY_USER" --regid="$(id -g "$RELAY_USER")" --init-groups \
			--inh-caps=-all --bounding-set=-all --no-new-privs
	elif [ -n "$RELAY_USER" ]; then
		# busybox: its setpriv only sets no_new_privs; su (root needs no
		# password) sets the uid, gid and groups, which empties the
		# permitted and effective sets, and execs without forking. The
		# bounding set stays: no_new_privs keeps anything from raising
		# the empty ones again. "--": su would take relayd's flags.
		set -- "$@" "$setpriv_" --nnp "$su_" -p -s /bin/sh -c 'exec "$0" "$@"' -- "$RELAY_USER"
	fi
	# setsid: a session of its own, so the relay outlives the SSH session that
	# started it; the inner sh writes its own pid, which every exec after it
	# (ip netns exec, setpriv, relayd) keeps, and ignores SIGHUP as nohup
	# would (busybox has no nohup): an ignored signal stays ignored across
	# exec, until relayd sets its own handler. All three descriptors leave
	# the session, or the SSH channel would stay open until the relay exits.
	if [ -n "${READY_FIFO:-}" ]; then
		setsid sh -c 'trap "" HUP && echo "$$" >"$0" && exec "$@"' "$pf" \
			"$@" "$bin" --config "$RELAY_CONFIG" --ready-fd 4 \
			</dev/null >>"$RELAY_LOG" 2>&1 4>"$READY_FIFO" 3<&- &
	else
		setsid sh -c 'trap "" HUP && echo "$$" >"$0" && exec "$@"' "$pf" \
			"$@" "$bin" --config "$RELAY_CONFIG" \
			</dev/null >>"$RELAY_LOG" 2>&1 &
	fi
	job=$!
}

# old_state OLD: say on stderr whether the relayd that was to hand over
# still serves.
old_state() {
	if is_relayd "$1"; then
		err "handoff: the old relayd (pid $1) still serves"
	else
		err "handoff: the old relayd (pid $1) is gone too: nothing serves; run start"
		rm -f "$RELAY_PIDFILE"
	fi
}

# handed_over NEW: the old relayd logged that it handed over to NEW (after
# byte offset of the log): NEW reads the socket, whatever the old one does.
handed_over() {
	tail -c "+$((offset + 1))" "$RELAY_LOG" 2>/dev/null | grep -q "msg=\"handed over\" to_pid=$1 "
}

do_handoff() {
	if ! old=$(running_pid); then
		echo "relayd not running: starting it instead of a handoff"
		do_start
		return
	fi
	if [ ! -x "$bin" ]; then
		err "handoff: $bin: no executable release installed"
		return 1
	fi
	if [ -z "$(handoff_socket)" ]; then
		err "handoff: RELAYD_HANDOFF_SOCKET is not set in $RELAY_CONFIG, so relayd (pid $old) cannot hand over: use restart, or set it and restart once"
		return 1
	fi
	dirs_ok || return 1
	find_tools || return 1
	port=$(listen_port)
	newpid=$RELAY_PIDFILE.new
	rm -f "$newpid"
	log_offset
	spawn "$newpid"
	what="listening on udp port $port"
	[ -n "$port" ] || what="listening on udp"
	n=0
	while :; do
		if ! alive "$job"; then
			wait "$job"
			err "handoff: the new relayd exited (status $?) before it took over"
			log_tail "$offset"
			rm -f "$newpid"
			old_state "$old"
			return 1
		fi
		# The new one holds the socket as soon as it has received it; it
		# serves once the old one, having handed over, has exited.
		if ! alive "$old" && is_relayd "$job" && listening "$job" "$port"; then
			mv -f "$newpid" "$RELAY_PIDFILE"
			echo "relayd handed over (pid $old -> $job, $what)"
			return 0
		fi
		if [ "$n" -ge "$((RELAY_WAIT * 10))" ] && handed_over "$job"; then
			# The new one reads the socket; the old one has only to exit.
			err "handoff: relayd (pid $old) handed over to relayd (pid $job) but is still running after ${RELAY_WAIT}s, stopping it"
			kill_pid "$old" || return 1
			continue
		fi
		if [ "$n" -ge "$((RELAY_WAIT * 10))" ]; then
			err "handoff: relayd (pid $old) has not handed over to relayd (pid $job) after ${RELAY_WAIT}s, stopping the new one"
			kill_pid "$job"
			log_tail "$offset"
			rm -f "$newpid"
			old_state "$old"
			return 1
		fi
		sleep 0.1
		n=$((n + 1))
	done
}

# do_run is start, then the foreground while a relayd serves: it follows
# the pid file, which a handoff points at the new relayd.
do_run() {
	do_start || return 1
	trap 'stopping=1' TERM INT
	stopping=
	while [ -z "$stopping" ] && running_pid >/dev/null; do
		# In the background, so that a signal ends the wait at once.
		sleep 1 &
		wait $! 2>/dev/null
	done
	trap - TERM INT
	if [ -n "$stopping" ]; then
		do_stop
		return
	fi
	err "run: relayd is not running any more (see $RELAY_LOG)"
	return 1
}

do_stop() {
	if ! p=$(running_pid); then
		rm -f "$RELAY_PIDFILE"
		echo "relayd not running"
		return 0
	fi
	kill_pid "$p" || return 1
	rm -f "$RELAY_PIDFILE"
	echo "relayd stopped (pid $p)"
}

do_status() {
	if ! p=$(running_pid); then
		echo "relayd not running"
		return 3
	fi
	release=$(readlink "$RELAY_ROOT/current" 2>/dev/null)
	echo "relayd running"
	echo "  pid:     $p"
	echo "  release: $RELAY_ROOT/current -> ${release:-?}"
	echo "  config:  $RELAY_CONFIG"
	echo "  netns:   ${RELAY_NETNS:-none, so that of the caller}"
	echo "  log:     $RELAY_LOG"
	nsenter -t "$p" -n ss -H -u -a -n -p 2>/dev/null | grep -F "pid=$p," | sed 's/^/  udp:     /'
	return 0
}

case ${1-} in
start) do_start ;;
stop) do_stop ;;
restart) do_stop && do_start ;;
handoff) do_handoff ;;
run) do_run ;;
pid) p=$(running_pid) || exit 3; printf '%s\n' "$p" ;;
status) do_status ;;
*)
	echo "usage: relay-service start|stop|restart|handoff|run|pid|status" >&2
	exit 2
	;;
esac

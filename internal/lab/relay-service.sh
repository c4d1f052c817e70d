#!/bin/sh
# relay-service: the generic service manager for the relay on a lab host.
# There is no systemd on these machines; relayctl calls this script as argv,
# e.g. `/opt/relay/bin/relay-service start`.
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
#   pid      print the relay's PID and exit 0; exit 3 printing nothing if it
#            is not running.
#   status   human-readable state; exit 0 if running, 3 if not.
#
# Exit codes: 0 ok, 1 failure, 2 usage, 3 not running (pid, status).
#
# Settings come from /etc/relay/service.env (KEY=VALUE, sourced) if present,
# or from the file named by $RELAY_SERVICE_ENV:
#   RELAY_NETNS    network namespace to start the relay in (ip netns exec);
#                  empty: the caller's own
#   RELAY_WAIT     seconds that start and stop wait (default 5)
#   RELAY_ROOT     default /opt/relay (binary: $RELAY_ROOT/current/relayd)
#   RELAY_CONFIG   default /etc/relay/relayd.env; its RELAYD_LISTEN=HOST:PORT
#                  names the UDP port that start waits for (any UDP socket of
#                  the process if unset)
#   RELAY_PIDFILE  default $RELAY_ROOT/run/relayd.pid
#   RELAY_LOG      default $RELAY_ROOT/log/relayd.log

set -u

RELAY_ROOT=/opt/relay
RELAY_CONFIG=/etc/relay/relayd.env
RELAY_NETNS=
RELAY_WAIT=5
RELAY_PIDFILE=
RELAY_LOG=
conf=${RELAY_SERVICE_ENV:-/etc/relay/service.env}
if [ -r "$conf" ]; then
	# shellcheck disable=SC1090 # the settings file is named at run time
	. "$conf" || { printf 'relay-service: read %s failed\n' "$conf" >&2; exit 1; }
fi
[ -n "$RELAY_PIDFILE" ] || RELAY_PIDFILE=$RELAY_ROOT/run/relayd.pid
[ -n "$RELAY_LOG" ] || RELAY_LOG=$RELAY_ROOT/log/relayd.log
case $RELAY_WAIT in '' | *[!0-9]*) RELAY_WAIT=5 ;; esac
bin=$RELAY_ROOT/current/relayd

err() { printf 'relay-service: %s\n' "$*" >&2; }

# alive PID: the process exists and has not exited. A zombie has exited: it
# only waits for its parent (PID 1 here reaps orphans late) to collect it.
alive() {
	st=$(sed -n 's/^.*) \(.\).*$/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
	case $st in '' | Z | X | x) return 1 ;; esac
	return 0
}

# is_relayd PID: the process is a live relayd, not a reused pid.
is_relayd() {
	alive "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = relayd ]
}

# running_pid prints the pid from the pid file if that process is a live relayd.
running_pid() {
	p=$(cat "$RELAY_PIDFILE" 2>/dev/null) || return 1
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

# listening PID PORT: PID owns a UDP socket bound to PORT (any port if
# empty), seen from inside the process's own network namespace.
listening() {
	if [ -n "$2" ]; then
		out=$(nsenter -t "$1" -n ss -H -u -l -n -p "sport = :$2" 2>/dev/null) || return 1
	else
		out=$(nsenter -t "$1" -n ss -H -u -l -n -p 2>/dev/null) || return 1
	fi
	case $out in *"pid=$1,"*) return 0 ;; esac
	return 1
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
	mkdir -p "${RELAY_PIDFILE%/*}" "${RELAY_LOG%/*}" || return 1
	rm -f "$RELAY_PIDFILE"
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
	rm -f "$fifo"
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

# log_offset sets offset to the log's length, so log_tail shows only what
# the relay about to start writes.
log_offset() {
	offset=0
	if [ -f "$RELAY_LOG" ]; then offset=$(wc -c <"$RELAY_LOG") || offset=0; fi
}

# spawn PIDFILE: start the release detached, its pid in PIDFILE and in job.
spawn() {
	if [ -n "$RELAY_NETNS" ]; then
		set -- "$1" ip netns exec "$RELAY_NETNS"
	fi
	pf=$1
	shift
	# setsid: a session of its own, so the relay outlives the SSH session that
	# started it; the inner sh writes its own pid, which every exec after it
	# (nohup, ip netns exec, relayd) keeps. All three descriptors leave the
	# session, or the SSH channel would stay open until the relay exits.
	if [ -n "${READY_FIFO:-}" ]; then
		setsid sh -c 'echo "$$" >"$0" && exec "$@"' "$pf" \
			nohup "$@" "$bin" --config "$RELAY_CONFIG" --ready-fd 4 \
			</dev/null >>"$RELAY_LOG" 2>&1 4>"$READY_FIFO" 3<&- &
	else
		setsid sh -c 'echo "$$" >"$0" && exec "$@"' "$pf" \
			nohup "$@" "$bin" --config "$RELAY_CONFIG" \
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
pid) p=$(running_pid) || exit 3; printf '%s\n' "$p" ;;
status) do_status ;;
*)
	echo "usage: relay-service start|stop|restart|handoff|pid|status" >&2
	exit 2
	;;
esac

# shellcheck shell=sh
# relayctl agent: runs on a host for the length of one apply, as
#   sh -c 'eval "$1"' relayctl-agent AGENT STATE_DIR OBSERVE_SCRIPT
# (AGENT is this script: the window's process, below, is this script too)
# and carries out the primitives relayctl sends on stdin. It is a constant
# of relayctl: everything from a plan reaches it as data, validated first,
# never as code. The primitives, their arguments and which of them change
# the host are listed once, in rollout/primitive.go; each is a function
# here, p_KIND (a - in KIND is a _), and nothing else can be called.
#
# A request is one line of tab-separated fields:
#   KIND  JOURNAL  NDATA  NARGV  ARG...
# JOURNAL is 1 when the journal notes the primitive once done (a change on
# the host), and the primitive fails if it cannot; 2 for an undo, noted if
# it can be; NDATA the number of bytes that follow the line, NARGV the
# number of lines that follow them (a command's words, one a line). The
# loop below reads what a primitive leaves of its payload, so the next line
# read is always the next request. Each request is answered with one line:
#   OK | VAL <text> | ERR <text> | DATA <n> followed by n bytes | NEED | SKIP
# where <text> is one line, cleaned of control characters.
#
# relayctl sends a whole batch at once, ended by "sync", and then reads the
# answers (one network round trip a batch). After an ERR, or a NEED (keep:
# the host lacks those bytes), nothing more of the batch is done: every
# request up to the sync is answered SKIP (its payload read and dropped),
# and the sync answers OK and ends the skipping.
#
# The first line must be "lock<TAB>OWNER[<TAB>WAIT]": the agent checks that
# STATE_DIR and every folder above it belong to root and nobody else can
# write them, then takes the host lock (flock on STATE_DIR/lock; with WAIT,
# waiting up to WAIT seconds for it) and holds it until it exits, which it
# does on "unlock" or when relayctl goes away (stdin closes). It answers
# LOCKED, LOCKED <owner of a dead run> (the lock was free, but a run that
# died left its owner file), BUSY <owner> or UNSAFE <reason>.
#
# A window runs outside this session ("The window's process" below): a
# detach request carries its program, which a process of its own (this
# script again, in a session of its own and, where systemd runs the host,
# in a unit of its own) carries out, holding the host lock, whatever
# becomes of this session; this session relays its answers.
set -u
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
umask 022
agent_script=$1
state=$2
observe_script=${3:-}
journal=$state/journal
stage=$state/stage
# Runtime files (a window's program and answers, observe's output) go to
# /run, in RAM, which a full state disk does not fill: root's alone, one
# folder per window (hosts that share /run, as the lab's do, never meet).
windows=/run/relayctl
[ -d /run ] || windows=$state/run
win=
tab=$(printf '\t')
msg=

# clean TEXT: one line of at most 2000 bytes without control characters.
# Most text is already clean (no byte below 32, no DEL; UTF-8 is kept):
# it is printed without starting a process (three a call were a third of
# an apply's processes on the host).
clean() {
	clean_=$*
	case $clean_ in
	*[[:cntrl:]]*) ;;
	*) if [ ${#clean_} -le 2000 ]; then
		printf '%s' "$clean_"
		return
	fi ;;
	esac
	printf '%s' "$clean_" | tr '\n\t\r' '   ' | tr -d '\000-\037\177' | head -c 2000
}

# clean_v TEXT: clean's line, in cleaned, without the subshell of a
# $(clean ...) where the text is clean already (every answer and journal
# line, on twenty hosts sharing two cores).
clean_v() {
	cleaned=$*
	case $cleaned in
	*[[:cntrl:]]*) ;;
	*) [ ${#cleaned} -le 2000 ] && return ;;
	esac
	cleaned=$(clean "$cleaned")
}
# ok and val answer a primitive that succeeded. One that changed the host
# is noted in the journal first; if the journal cannot be written (a full
# disk), the answer is ERR, so relayctl undoes the change rather than go on
# with a change no journal tells of.
ok() {
	journaled || return
	printf 'OK\n'
}
val() {
	journaled || return
	clean_v "$*"
	printf 'VAL %s\n' "$cleaned"
}
journaled() {
	[ -n "${done_op_after:-}" ] || return 0
	done_op && return 0
	[ "$jmode" = 2 ] && return 0 # an undo: better done than not
	done_op_after=
	err "$op was done, but the journal $journal could not be written (a full disk?)"
	return 1
}
err() {
	skipping=1
	clean_v "$*"
	msg=$cleaned
	[ -d "$state" ] && [ -n "${locked:-}" ] && now_v && printf '%s fail %s\n' "$t_now" "$msg" >>"$journal"
	printf 'ERR %s\n' "$msg"
}
# now_v: the host's UTC time for a journal line, to the millisecond, in t_now.
# One `date` a process gives the clock; after it the time is that plus how
# far /proc/uptime moved, formatted by arithmetic (a `date` a line was the
# agent's second most started program). The steps are /proc/uptime's 10 ms;
# the lines' order, not their times, is what recovery reads.
now_v() {
	uptime_ms
	if [ -z "${t_base_ms:-}" ]; then
		t_base_ms=$(date -u +%s%3N) t_base_up=$up_ms
		case $t_base_ms in '' | *[!0-9]*) t_base_ms=$(($(date -u +%s) * 1000)) ;; esac
	fi
	t_=$((t_base_ms + up_ms - t_base_up))
	t_ms=$((t_ % 1000)) t_=$((t_ / 1000))
	t_sod=$((t_ % 86400)) t_z=$((t_ / 86400 + 719468))
	# days since 1970-01-01 to a civil date (H. Hinnant's days_from_civil, inverted)
	t_era=$((t_z / 146097)) t_doe=$((t_z % 146097))
	t_yoe=$(((t_doe - t_doe / 1460 + t_doe / 36524 - t_doe / 146096) / 365))
	t_doy=$((t_doe - (365 * t_yoe + t_yoe / 4 - t_yoe / 100)))
	t_mp=$(((5 * t_doy + 2) / 153))
	t_d=$((t_doy - (153 * t_mp + 2) / 5 + 1))
	if [ "$t_mp" -lt 10 ]; then t_m=$((t_mp + 3)); else t_m=$((t_mp - 9)); fi
	t_y=$((t_yoe + t_era * 400))
	[ "$t_m" -gt 2 ] || t_y=$((t_y + 1))
	t_h=$((t_sod / 3600)) t_mi=$((t_sod % 3600 / 60)) t_s=$((t_sod % 60)) t_ms=00$t_ms
	[ "$t_m" -gt 9 ] || t_m=0$t_m
	[ "$t_d" -gt 9 ] || t_d=0$t_d
	[ "$t_h" -gt 9 ] || t_h=0$t_h
	[ "$t_mi" -gt 9 ] || t_mi=0$t_mi
	[ "$t_s" -gt 9 ] || t_s=0$t_s
	t_now=$t_y-$t_m-${t_d}T$t_h:$t_mi:$t_s.${t_ms#"${t_ms%???}"}Z
}
jlog() {
	clean_v "$*"
	now_v
	printf '%s %s\n' "$t_now" "$cleaned" >>"$journal" 2>/dev/null
}

# owned_by_root_only PATH: PATH (not followed) belongs to root and, unless
# it is a symlink, neither its group nor others may write it.
owned_by_root_only() {
	st=$(stat -c '%u %a %F' -- "$1" 2>/dev/null) || return 1
	set -- $st
	[ "$1" = 0 ] || return 1
	case $3 in symbolic) return 0 ;; esac
	m=$2
	while [ ${#m} -lt 3 ]; do m=0$m; done
	case $m in *[2367][0-7] | *[2367]) return 1 ;; esac
	return 0
}

# root_dirs PATH...: every PATH is a folder (not a symlink) that belongs
# to root and that neither its group nor others may write, with one stat
# for all of them.
root_dirs() {
	st=$(stat -c '%u %a %F' -- "$@" 2>/dev/null) || return 1
	n_=0
	ifs_=$IFS
	IFS='
'
	set -f
	for l_ in $st; do
		n_=$((n_ + 1))
		m=${l_#* }
		m=${m%% *}
		while [ ${#m} -lt 3 ]; do m=0$m; done
		case $l_ in "0 "*" directory") ;; *) n_=-1 ;; esac
		case $m in *[2367][0-7] | *[2367]) n_=-1 ;; esac
		[ "$n_" -gt 0 ] || break
	done
	IFS=$ifs_
	set +f
	[ "$n_" = "$#" ]
}

# prefixes_v PATH: "/" and every folder from it down to PATH, one a line,
# in prefixes_ (PATH is absolute and clean).
prefixes_v() {
	prefixes_=/ p_='' rest_=${1#/}
	while [ -n "$rest_" ]; do
		p_=$p_/${rest_%%/*}
		case $rest_ in */*) rest_=${rest_#*/} ;; *) rest_= ;; esac
		prefixes_="$prefixes_
$p_"
	done
}

# safe_dir PATH: every folder from / down to PATH, as written and as
# resolved, belongs to root and only root can write it, so nobody else can
# plant a symlink or swap a file between our check and our write. Missing
# folders are made (0755). Prints the reason when it fails.
#
# The usual case (every folder there, none a symlink, all root's) costs
# one stat; anything else takes the careful path below, which also finds
# the reason to print.
safe_dir() {
	safe_dir_v "$1" && return 0
	printf '%s\n' "$why"
	return 1
}

# safe_dir_v PATH: safe_dir with the reason in why, and in the usual case
# no subshell (a why=$(safe_dir ...) before every write was one).
safe_dir_v() {
	why='' safe_target_=$1
	prefixes_v "$1"
	ifs_=$IFS
	IFS='
'
	set -f
	# shellcheck disable=SC2086 # one path a line, globbing off
	set -- $prefixes_
	IFS=$ifs_
	set +f
	root_dirs "$@" && return 0
	why=$(safe_dir_careful "$safe_target_")
}

# parent_v PATH: the folder PATH is in, in parent_ (PATH is absolute and
# clean), without a subshell.
parent_v() {
	parent_=${1%/*}
	[ -n "$parent_" ] || parent_=/
}

safe_dir_careful() {
	p=
	rest=${1#/}
	owned_by_root_only / || { echo "/ is writable by others"; return 1; }
	while [ -n "$rest" ]; do
		seg=${rest%%/*}
		case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
		p=$p/$seg
		if [ ! -e "$p" ] && [ ! -L "$p" ]; then
			mkdir -m 0755 -- "$p" 2>&1 || return 1
		fi
		owned_by_root_only "$p" || { echo "$p is not owned by root or is writable by its group or others"; return 1; }
	done
	real=$(readlink -f -- "$1") || { echo "cannot resolve $1"; return 1; }
	[ -d "$real" ] || { echo "$1 is not a folder"; return 1; }
	p=
	rest=${real#/}
	while [ -n "$rest" ]; do
		seg=${rest%%/*}
		case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
		p=$p/$seg
		owned_by_root_only "$p" || { echo "$p (through a symlink in $1) is not owned by root or is writable by its group or others"; return 1; }
	done
	return 0
}

# release_ok DIR: DIR is a release folder that root alone can change, all
# the way down: DIR and every folder above it (safe_dir), and every file and
# folder in it owned by root, writable by nobody else, and no symlink among
# them. Whoever could change a release after its sha256 was checked would
# run as root when the service starts it. Prints the reason when it fails.
release_ok() {
	if [ -L "$1" ] || [ ! -d "$1" ]; then
		echo "$1 is not a folder"
		return 1
	fi
	safe_dir "$1" || return 1
	bad_=$(find "$1" -mindepth 1 \( -type l -o ! -user 0 -o -perm /022 \) -print -quit 2>&1) || {
		echo "cannot read $1: $bad_"
		return 1
	}
	[ -z "$bad_" ] && return 0
	if [ -L "$bad_" ]; then
		echo "$bad_ is a symlink; a release holds only root's own files and folders"
	else
		echo "$bad_ is not owned by root or is writable by its group or others: whoever can change it would run as root"
	fi
	return 1
}

# sha256_of FILE [SIZE]: the file's sha256 in hex (nothing, and false, if
# it cannot be read). openssl uses the CPU's SHA instructions and coreutils'
# sha256sum does not: 17 ms against 82 ms for a 9 MB release on the lab
# machine, and a host hashes a release two or three times an apply. A file
# known to be small (SIZE under 1 MiB, or the word small: a program
# relayctl sent, a backup of a config) goes to sha256sum, which starts in a
# third of openssl's time.
sha256_of() {
	sha_=''
	big_=yes
	case ${2:-} in small) big_= ;; '' | *[!0-9]*) ;; *) [ "$2" -ge 1048576 ] || big_= ;; esac
	if [ -n "$big_" ] && command -v openssl >/dev/null 2>&1; then
		sha_=$(openssl dgst -sha256 -r <"$1" 2>/dev/null) || sha_=
		sha_=${sha_%% *}
	fi
	case $sha_ in
	'' | *[!0-9a-f]*)
		sha_=$(sha256sum -- "$1" 2>/dev/null) || return 1
		sha_=${sha_%% *}
		;;
	esac
	[ ${#sha_} = 64 ] || return 1
	printf '%s' "$sha_"
}

# size_of FILE: its size in bytes.
size_of() {
	size_=$(wc -c <"$1") || return 1
	printf '%s' $((size_))
}

# fresh_temp DIR: a new, empty, exclusively created file in DIR.
fresh_temp() { mktemp -- "$1/.relayctl.XXXXXXXX"; }

# read_n N: exactly N bytes of stdin to stdout. GNU dd takes the pipe from
# sshd 64 KiB at a time where head -c reads 8 KiB: on the lab, 20 uploads of
# the 9 MB release cost the host's sshd and the readers 3.2 CPU-s instead of
# 3.7. Where dd lacks count_bytes (busybox), head -c.
if [ "$(printf abc | dd bs=65536 iflag=fullblock,count_bytes count=2 status=none 2>/dev/null)" = ab ]; then
	read_n() { dd bs=65536 iflag=fullblock,count_bytes count="$1" status=none; }
else
	read_n() { head -c "$1"; }
fi

# take N FILE: read exactly N bytes of stdin into FILE. Whatever happens to
# the write (a full disk), all N bytes are read, so the next request line is
# the next request and never the rest of a file; the write's own error, if
# any, is printed.
take() {
	read_n "$1" | { { cat >"$2"; } 2>&1 || { cat >/dev/null; false; }; }
}

# capped MAX FILE: at most MAX bytes of stdin into FILE; rc 3 when there
# was more (then FILE holds MAX bytes and the rest is left unread, so the
# writer fails on its next write and stops). The cap holds whatever the
# server says: curl 7.88 ignores --max-filesize when a response has no
# Content-Length, and wget has no cap at all.
capped() {
	read_n "$1" >"$2" || return 1
	[ "$(read_n 1 | wc -c)" -eq 0 ] || return 3
}

# fetch_url URL MAX SECS FILE: fetch URL into FILE, at most MAX bytes in
# SECS seconds, http and https only (redirects too), no URL globbing. Sets
# rc (0 when FILE holds the whole body) and out (the fetcher's words).
# wget cannot be held to http(s) across a redirect (it follows one to
# ftp://), so with wget a redirect is refused: give the final url, or
# install curl.
fetch_url() {
	fu_rc=$4.rc
	if command -v curl >/dev/null 2>&1; then
		out=$({ { curl -fsS -L -g --proto =http,https --proto-redir =http,https --max-redirs 5 \
			--connect-timeout "$3" --max-time "$3" --max-filesize "$2" -o - --url "$1" 2>&3 </dev/null 9>&-
			echo $? >"$fu_rc"; } | capped "$2" "$4"; } 3>&1)
		rc=$?
		fetcher=curl
	elif command -v wget >/dev/null 2>&1; then
		out=$({ { timeout "$3" wget -q --max-redirect=0 -O - -- "$1" 2>&3 </dev/null 9>&-
			echo $? >"$fu_rc"; } | capped "$2" "$4"; } 3>&1)
		rc=$?
		fetcher=wget
	else
		out="no curl or wget on the host" rc=127
		return
	fi
	frc=$(cat -- "$fu_rc" 2>/dev/null)
	rm -f -- "$fu_rc"
	if [ "$rc" = 3 ]; then
		out="more than $2 bytes (the cap); stopped there"
		return
	fi
	[ "$rc" = 0 ] || { out="cannot write the file: $out"; return; }
	rc=${frc:-1}
	case $fetcher:$rc in
	wget:124) out="timed out after $3 seconds" ;;
	wget:0) ;;
	wget:*) out="wget exit $rc (a redirect is refused with wget; give the release's final url, or install curl)${out:+: $out}" ;;
	esac
}

# mode_like REF FILE: FILE gets REF's mode and owner when REF is a regular
# file (not a symlink): a file relayctl replaces keeps its mode and owner, so
# a 0600 config holding a secret stays 0600. stat -c and numeric chmod and
# chown work with GNU coreutils and busybox alike.
mode_like() {
	[ -f "$1" ] && [ ! -L "$1" ] || return 0
	ml_=$(stat -c '%a %u %g' -- "$1") || return 1
	set -- "$2" $ml_
	chmod "$2" -- "$1" && chown "$3:$4" -- "$1"
}

# write_file FROM PATH MODE [REF]: write FROM's content as PATH through a
# fresh temp file in PATH's folder and a rename, which replaces PATH itself
# (a symlink there is replaced, never followed); with REF, PATH gets REF's
# mode and owner (mode_like) instead of MODE.
write_file() {
	parent_v "$2"
	d=$parent_
	safe_dir_v "$d" || { echo "$why"; return 1; }
	t=$(fresh_temp "$d") || return 1
	if cat -- "$1" >"$t" && chmod "$3" -- "$t" && mode_like "${4:-}" "$t" && mv -fT -- "$t" "$2"; then return 0; fi
	rm -f -- "$t"
	return 1
}

# read_argv N: read N of the request's lines, each a word, as one command
# to run with no shell in between: no eval, no word splitting, no globbing.
# It reads the lines whatever they hold; argv_empty is set when a word is
# empty: split at tabs, an empty word would vanish, and run_list would run
# another command than the one reviewed, so such a command is refused
# (empty_argv).
read_argv() {
	n=$1
	argv_empty=
	argv_list=
	while [ "$n" -gt 0 ] && [ "$argv_left" -gt 0 ]; do
		IFS= read -r w || exit 2
		argv_left=$((argv_left - 1))
		[ -n "$w" ] || argv_empty=1
		argv_list="$argv_list$w$tab"
		n=$((n - 1))
	done
	[ "$n" = 0 ]
}
empty_argv() { err "$op: a command word is empty; relayctl runs no command with one (without a shell it would vanish)"; }
run_list() { # run_list: the words of argv_list (tab-separated) as a command
	IFS=$tab
	set -f
	# shellcheck disable=SC2086 # splitting at tabs is the point: words were sent one a line
	set -- $argv_list
	set +f
	IFS=' 	
'
	# fd 9 holds the host lock: a relay started here must not inherit it;
	# nor the window's pid file (fd 6, window_alive).
	"$@" 6>&- 9>&-
}


# squeeze TEXT: its words joined by single spaces (tune.Normalize).
squeeze() {
	set -f
	# shellcheck disable=SC2086 # splitting at blanks is the point
	set -- $1
	set +f
	printf '%s' "$*"
}

# done_op: the journal notes each change made, even when relayctl has
# gone away meanwhile (a lost connection): the next run reads where it
# stopped. Values here were validated by relayctl: no control characters.
done_op() {
	now_v
	printf '%s ok %s %s\n' "$t_now" "$op" "$a" >>"$journal" 2>/dev/null
}

# The primitives, one function each (rollout/primitive.go lists them with
# their arguments); a b c d e are the request's arguments.

# rm_if PATH: rm -rf PATH where there is something to remove: a program
# only then (a fresh folder's name usually has nothing yet).
rm_if() { if [ -e "$1" ] || [ -L "$1" ]; then rm -rf -- "$1"; fi; }

p_sync() {
	skipping=
	printf 'OK\n'
}
p_begin() { # PLAN CHECKSUM: a fresh stage folder, the journal opened
	rm_if "$stage" && mkdir -m 0700 -- "$stage" || { err "cannot create $stage"; return; }
	[ -d "$state/receipts" ] || mkdir -p -- "$state/receipts"
	if jlog "begin plan=$a checksum=$b"; then ok; else err "cannot write the journal $journal (a full disk?)"; fi
}
p_step() { # TEXT: a step's start or end, by its kind and title; a step whose
	# start the journal cannot note does not start (the journal is written
	# ahead), but a rollback does: an undo is better done than not.
	if jlog "$a" || [ "$jmode" = 2 ]; then ok; else err "cannot write the journal $journal (a full disk?)"; fi
}
p_dir() { # PATH: PATH is (made) a folder that only root can change
	if safe_dir_v "$a"; then ok; else err "$why"; fi
}
p_file_ok() { # PATH: absent, or a regular file and not a symlink
	if [ -L "$a" ]; then
		err "$a is a symlink; relayctl writes no file through or over a symlink: make it a regular file"
	elif [ -e "$a" ] && [ ! -f "$a" ]; then
		err "$a is not a regular file"
	else ok; fi
}
p_link_ok() { # PATH: absent, or a symlink
	if [ -e "$a" ] && [ ! -L "$a" ]; then err "$a exists and is not a symlink"; else ok; fi
}
p_exec_ok() { # PATH: a regular executable only root can change
	# Whoever can change the program (or what its symlink points at) would
	# run as root: it and every folder above it must be root's.
	real=$(readlink -f -- "$a")
	if [ -z "$real" ] || [ ! -f "$real" ] || [ ! -x "$real" ]; then
		err "$a is not an executable file"
	elif ! owned_by_root_only "$real"; then
		err "$real is not owned by root or is writable by its group or others: whoever can change it would run as root"
	elif ! { parent_v "$a" && safe_dir_v "$parent_"; }; then
		err "$why"
	elif parent_v "$real" && safe_dir_v "$parent_"; then ok; else err "$why"; fi
}
p_rename() { # FROM TO: atomic rename in one folder
	if out=$(mv -fT -- "$a" "$b" 2>&1); then ok; else err "rename $a to $b: $out"; fi
}
p_remove() { # PATH: unlink PATH (never what it points at)
	if out=$(rm -f -- "$a" 2>&1); then ok; else err "remove $a: $out"; fi
}
p_link() { # PATH TARGET: PATH becomes a symlink to TARGET, a new link renamed over it
	t=$a.relayctl-link
	if [ -e "$t" ] || [ -L "$t" ]; then rm -f -- "$t"; fi
	if out=$(ln -s -- "$b" "$t" 2>&1 && mv -fT -- "$t" "$a" 2>&1); then ok; else err "point $a at $b: $out"; fi
}

# holds PATH SHA256 SIZEHINT LIKE: PATH already holds those bytes (checked,
# not trusted: a regular file root alone can change, in a folder root alone
# can change, whose owner could otherwise swap them after the check), and
# takes LIKE's mode and owner. rc 1: it does not; rc 2: it cannot (the
# reason printed). dir is PATH's folder.
holds() {
	parent_v "$1"
	dir=$parent_
	safe_dir_v "$dir" || { echo "$why"; return 2; }
	if [ -L "$1" ]; then
		echo "$1 is a symlink; relayctl writes no file through or over a symlink"
		return 2
	fi
	[ -f "$1" ] && owned_by_root_only "$1" && [ "$(sha256_of "$1" "$3")" = "$2" ] || return 1
	mode_like "$4" "$1" || { echo "cannot set the mode of $1 like $4"; return 2; }
}

# settle TEMP PATH SHA256 MODE LIKE HOW: TEMP, once its sha256 is checked,
# becomes PATH (mode MODE, or LIKE's): VAL HOW SIZE, or ERR with nothing left
# behind; for bytes decoded from a packed form (HOW decoded), NEED and why
# instead of ERR: the next form follows.
settle() {
	got=$(size_of "$1")
	sum=$(sha256_of "$1" "$got")
	if [ "$sum" != "$3" ]; then
		rm -f -- "$1"
		case $6 in
		fetched) err "the file fetched from $c has sha256 $sum, want $3 (nothing was written)" ;;
		decoded) need "the $f form decoded to bytes with sha256 $sum, want $3" ;;
		*) err "the bytes received for $2 have sha256 $sum, want $3" ;;
		esac
		return
	fi
	if out=$(chmod "$4" -- "$1" 2>&1 && mode_like "$5" "$1" 2>&1 && mv -fT -- "$1" "$2" 2>&1); then val "$6 $got"; else
		rm -f -- "$1"
		err "write $2: $out"
	fi
}

# need [WHY]: the rest of the batch waits for this keep's bytes (NEED),
# or, with WHY, for them in another form than the one named (NEED WHY).
need() {
	skipping=1
	if [ -n "$1" ]; then printf 'NEED %s\n' "$(clean "$1")"; else printf 'NEED\n'; fi
}

# decodable ENCODING BASE BASESHA: the host can decode that packed form
# (package wire): its decoder is here, and a patch's base is a regular
# file root alone can change, in a folder root alone can change, whose
# sha256 is BASESHA (a patch from other bytes decodes to other bytes).
# Prints why not.
decodable() {
	case $1 in
	gzip) dec_=gzip ;;
	zstd | zstd-patch) dec_=zstd ;;
	*)
		echo "$1 is not a form the agent decodes"
		return 1
		;;
	esac
	command -v "$dec_" >/dev/null 2>&1 || {
		echo "no $dec_ on the host"
		return 1
	}
	[ "$1" = zstd-patch ] || return 0
	if [ -L "$2" ] || [ ! -f "$2" ] || ! owned_by_root_only "$2"; then
		echo "the patch's base $2 is not a regular file of root's alone"
		return 1
	fi
	parent_v "$2"
	safe_dir "$parent_" || return 1
	sum_=$(sha256_of "$2")
	[ "$sum_" = "$3" ] && return 0
	echo "the patch's base $2 has sha256 ${sum_:-none}, not the $3 it was made from"
	return 1
}

# take_decoded ENCODING BASE N SIZE FILE: decode the N bytes of stdin that
# follow into FILE, at most SIZE+1 bytes of output (more is not the
# release). All N bytes are read whatever the decoder does, so the next
# request line is the next request. Prints the decoder's words when it
# fails.
take_decoded() {
	read_n "$3" | {
		{
			case $1 in
			gzip) gzip -dc ;;
			zstd) zstd -dcq ;;
			*) zstd -dcq --patch-from="$2" ;;
			esac 2>"$5.err"
			echo $? >"$5.rc"
		} | read_n "$(($4 + 1))" >"$5"
		cat >/dev/null
	}
	td_=$(cat -- "$5.rc" 2>/dev/null)
	tdw_=$(head -c 300 -- "$5.err" 2>/dev/null)
	tdw_=${tdw_#"${tdw_%%[![:space:]]*}"} # gzip starts its words with a newline
	rm -f -- "$5.rc" "$5.err"
	[ "$td_" = 0 ] && return 0
	echo "${1%-patch} -d exit ${td_:-unknown}${tdw_:+: $tdw_}"
	return 1
}

p_keep() { # PATH SHA256 SIZE MODE [LIKE [ENCODING BASE BASESHA]], with the bytes as data or none
	# VAL kept when PATH holds those bytes already; else with no data NEED
	# (the rest of the batch waits for the bytes), with data the bytes
	# written through a temp file and a rename, sha256 checked: VAL sent
	# SIZE. LIKE (- for none): the file whose mode and owner PATH takes.
	# With ENCODING the data is that packed form of the bytes, decoded
	# first (keep_packed); a form the host cannot decode is answered NEED
	# and why, before its bytes are sent when it is named by an offer.
	like=${e:-}
	[ "$like" = - ] && like=
	why=$(holds "$a" "$b" "$c" "$like")
	case $? in
	0) val kept; return ;;
	2) err "$why"; return ;;
	esac
	if [ "$data_left" = 0 ]; then
		why=
		[ -z "${f:-}" ] || why=$(decodable "$f" "$g" "$h")
		need "$why"
		return
	fi
	parent_v "$a"
	dir=$parent_
	t=$(fresh_temp "$dir") || { err "cannot create a file in $dir"; return; }
	if [ -n "${f:-}" ]; then
		keep_packed "$t"
		return
	fi
	# take reads every byte whatever happens to the write; in a command
	# substitution it cannot say so itself.
	out=$(take "$data_left" "$t")
	rc=$?
	data_left=0
	if [ "$rc" != 0 ]; then
		rm -f -- "$t"
		err "write $a: $out"
		return
	fi
	got=$(size_of "$t")
	if [ "$got" != "$c" ]; then
		rm -f -- "$t"
		err "received $got of $c bytes for $a"
		return
	fi
	settle "$t" "$a" "$b" "$d" "$like" sent
}

# keep_packed TEMP: the data is keep's bytes in the packed form ENCODING
# (from BASE, BASESHA: f g h), decoded into TEMP, then settled (its sha256
# checked as any upload's). A form the host cannot decode, or that decodes
# to other bytes, leaves nothing behind and is answered NEED and why: the
# next form follows, the release as it is last.
keep_packed() {
	if why=$(decodable "$f" "$g" "$h"); then
		why=$(take_decoded "$f" "$g" "$data_left" "$c" "$1")
		rc=$?
	else
		rc=1
		read_n "$data_left" >/dev/null
	fi
	data_left=0
	if [ "$rc" = 0 ]; then
		got=$(size_of "$1")
		[ "$got" = "$c" ] || rc=1 why="it decoded to $got bytes, want $c"
	fi
	if [ "$rc" != 0 ]; then
		rm -f -- "$1"
		need "the $f form: $why"
		return
	fi
	settle "$1" "$a" "$b" "$d" "$like" decoded
}
p_fetch() { # PATH SHA256 URL MAXSIZE TIMEOUT: the same, but the host fetches URL
	# itself (fetch_url: curl, else wget), at most MAXSIZE bytes in TIMEOUT
	# seconds: VAL kept or VAL fetched SIZE; nothing written otherwise.
	why=$(holds "$a" "$b" "" "")
	case $? in
	0) val kept; return ;;
	2) err "$why"; return ;;
	esac
	parent_v "$a"
	dir=$parent_
	t=$(fresh_temp "$dir") || { err "cannot create a file in $dir"; return; }
	fetch_url "$c" "$d" "$e" "$t"
	if [ "$rc" != 0 ]; then
		rm -f -- "$t"
		err "fetch $c: $(printf '%s' "$out" | tail -c 300) (nothing was written)"
		return
	fi
	settle "$t" "$a" "$b" 0755 "" fetched
}
# tree_of DIR: the sha256 of DIR's file listing, one "SHA256  ./PATH" line
# per regular file sorted by path (artifact.TreeHash, made in Go from the
# tarball relayctl reviewed). Names are plain characters: the tarball was
# read before any host unpacked it.
tree_of() {
	(cd -- "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum -- | sha256sum) | {
		read -r t_ _ || return 1
		printf '%s' "$t_"
	}
}

# release_holds DIR PROGRAM TREE SHA: DIR holds the release: for a binary
# (TREE -) DIR/PROGRAM has sha256 SHA; for a tarball, DIR's files hash to
# TREE and DIR/PROGRAM is an executable file. Prints why not.
release_holds() {
	if [ ! -f "$1/$2" ] || [ -L "$1/$2" ]; then
		echo "$1/$2 is not a regular file"
		return 1
	fi
	if [ "$3" = - ]; then
		sum_=$(sha256_of "$1/$2")
		[ "$sum_" = "$4" ] && return 0
		echo "$1/$2 has sha256 ${sum_:-none}, want $4"
		return 1
	fi
	[ -x "$1/$2" ] || {
		echo "$1/$2 is not executable"
		return 1
	}
	tree_=$(tree_of "$1")
	[ "$tree_" = "$3" ] && return 0
	echo "the files in $1 hash to ${tree_:-nothing} (find | sort | sha256sum), want $3: not the release reviewed"
	return 1
}

p_place_release() { # DIR FILE SHA256 PROGRAM TREE: a binary (TREE -) copied to
	# DIR/PROGRAM, or a tarball unpacked into DIR, from the store's FILE;
	# checked on the host (sha256, tree hash, root's alone) before DIR is
	# renamed into place.
	new=$a.relayctl-new
	parent_v "$a"
	if ! safe_dir_v "$parent_"; then err "$why"; return; fi
	if [ -L "$b" ] || [ ! -f "$b" ]; then err "$b is not a regular file"; return; fi
	sum=$(sha256_of "$b")
	if [ "$sum" != "$c" ]; then err "the release on the host has sha256 $sum, want $c"; return; fi
	if [ "$e" = - ]; then
		out=$(rm -rf -- "$new" 2>&1 && mkdir -m 0755 -- "$new" 2>&1 && cp -- "$b" "$new/$d" 2>&1 && chmod 0755 -- "$new/$d" 2>&1)
	else
		# --no-same-owner: root owns what it unpacks; --no-same-permissions
		# with umask 022: nothing group- or other-writable.
		out=$(rm -rf -- "$new" 2>&1 && mkdir -m 0755 -- "$new" 2>&1 && (umask 022 && tar -x -f "$b" -C "$new" --no-same-owner --no-same-permissions 2>&1))
	fi
	rc=$?
	if [ "$rc" = 0 ]; then
		out=$(release_holds "$new" "$d" "$e" "$c") && out=$(release_ok "$new")
		rc=$?
	fi
	if [ "$rc" != 0 ]; then
		rm -rf -- "$new"
		err "$(printf '%s' "$out" | tail -c 400)"
		return
	fi
	if out=$(rm -rf -- "$a" 2>&1 && mv -T -- "$new" "$a" 2>&1); then ok; else err "install release folder $a: $out"; fi
}
p_check_release() { # DIR SHA256 PROGRAM TREE: DIR holds that release (release_holds),
	# and DIR is root's alone all the way down
	if ! why=$(release_ok "$a"); then
		err "$why"
		return
	fi
	if why=$(release_holds "$a" "$c" "$d" "$b"); then ok; else err "the release already in $a is not the one reviewed: $why"; fi
}
p_prune() { # RELEASES_DIR CURRENT_LINK N, then N lines v:VERSION or s:SHA256: remove
	# each release folder (renamed aside first, so none is ever half there
	# under its name) or release store entry; never the one the current
	# link points at. VAL the count removed.
	if ! safe_dir_v "$a"; then err "$why"; return; fi
	read_argv "$c" || {
		err "short argv"
		return
	}
	# Both sides resolved alike: under a symlinked releases folder the
	# link's target and $a/$v are different names for one folder.
	cur=$(readlink -f -- "$b" 2>/dev/null)
	ra=$(readlink -f -- "$a") || { err "cannot resolve $a"; return; }
	n=0 failed=
	IFS=$tab
	set -f
	# shellcheck disable=SC2086 # the words were sent one a line, split at tabs
	set -- $argv_list
	set +f
	IFS=' 	
'
	for w in "$@"; do
		case $w in
		v:[0-9A-Za-z]*)
			v=${w#v:}
			case $v in *[!0-9A-Za-z.+-]* | *..*) failed="$failed $v"; continue ;; esac
			[ "$ra/$v" = "$cur" ] && continue
			[ -d "$a/$v" ] && [ ! -L "$a/$v" ] || continue
			if mv -T -- "$a/$v" "$a/.relayctl-prune-$v" 2>/dev/null && rm -rf -- "$a/.relayctl-prune-$v"; then n=$((n + 1)); else failed="$failed $v"; fi
			;;
		s:*)
			h=${w#s:}
			case $h in *[!0-9a-f]* | '') failed="$failed $h"; continue ;; esac
			[ ${#h} = 64 ] && [ -d "$a/.sha256/$h" ] || continue
			if rm -rf -- "$a/.sha256/$h"; then n=$((n + 1)); else failed="$failed $h"; fi
			;;
		*) failed="$failed $w" ;;
		esac
	done
	# what an earlier prune was stopped in the middle of
	for d in "$a"/.relayctl-prune-*; do
		[ -d "$d" ] && [ ! -L "$d" ] && rm -rf -- "$d"
	done
	if [ -n "$failed" ]; then err "could not remove:$(clean "$failed")"; else val "$n"; fi
}
p_release_sum() { # DIR PROGRAM TREE|-: VAL "SHA256 TREE|- CAPS" of the release in DIR, for the
	# receipt (what a rollback would go back to, checked then by these
	# hashes): its program's sha256, with tree its files' tree hash, and the
	# capabilities its marker lists (comma-separated); VAL "" when DIR holds
	# no release to describe. Read-only, and never fails the batch.
	if [ -L "$a" ] || [ ! -d "$a" ] || [ -L "$a/$b" ] || [ ! -f "$a/$b" ]; then
		val ""
		return
	fi
	sum=$(sha256_of "$a/$b") || {
		val ""
		return
	}
	tree=-
	if [ "$c" = tree ]; then tree=$(tree_of "$a") || tree=-; fi
	caps=$(grep -a -o -m 1 'relayd-capabilities: [a-z0-9=/._ -]*' -- "$a/$b" 2>/dev/null | head -n 1)
	caps=${caps#relayd-capabilities: }
	val "$sum ${tree:--} $(printf '%s' "$caps" | tr ' ' ',')"
}
p_restore_kept() { # FROM PATH SHA256: PATH becomes a copy of FROM, a backup the host kept
	# beside a receipt (its mode and owner with it), through a temp file and
	# a rename once its sha256 is checked; nothing written otherwise. Both
	# folders must be root's alone.
	parent_v "$a"
	if ! safe_dir_v "$parent_"; then err "$why"; return; fi
	if [ -L "$a" ] || [ ! -f "$a" ]; then
		err "$a is not there (or not a regular file): the host no longer keeps that backup (nothing was written)"
		return
	fi
	parent_v "$b"
	dir=$parent_
	if ! safe_dir_v "$dir"; then err "$why"; return; fi
	t=$(fresh_temp "$dir") || {
		err "cannot create a file in $dir"
		return
	}
	if ! out=$(cp -p -- "$a" "$t" 2>&1); then
		rm -f -- "$t"
		err "copy $a: $out (nothing was written)"
		return
	fi
	sum=$(sha256_of "$t" small)
	if [ "$sum" != "$c" ]; then
		rm -f -- "$t"
		err "the backup $a has sha256 $sum, its receipt says $c (nothing was written)"
		return
	fi
	if out=$(mv -fT -- "$t" "$b" 2>&1); then ok; else
		rm -f -- "$t"
		err "write $b: $out"
	fi
}
p_backup() { # PATH NAME: keep PATH's content, mode and owner (or its absence) for restore
	if [ -L "$a" ]; then
		err "$a is a symlink; relayctl writes no file through or over a symlink"
	elif [ -f "$a" ]; then
		if out=$(cp -p -- "$a" "$stage/$b" 2>&1); then ok; else err "back up $a: $out"; fi
	else
		: >"$stage/$b.absent"
		ok
	fi
}
p_restore() { # PATH NAME: put back what backup kept, with its mode and owner
	if [ -e "$stage/$b.absent" ]; then
		if out=$(rm -f -- "$a" 2>&1); then ok; else err "remove $a: $out"; fi
	elif out=$(write_file "$stage/$b" "$a" 0644 "$stage/$b" 2>&1); then ok; else err "restore $a: $out"; fi
}
p_backup_link() { # PATH NAME: the same for a symlink
	if [ -L "$a" ]; then
		if readlink -- "$a" >"$stage/$b"; then ok; else err "read $a"; fi
	else
		: >"$stage/$b.absent"
		ok
	fi
}
p_restore_link() { # PATH NAME
	if [ -e "$stage/$b.absent" ]; then
		if out=$(rm -f -- "$a" 2>&1); then ok; else err "remove $a: $out"; fi
	else
		t=$(cat "$stage/$b")
		if out=$(rm -f -- "$a.relayctl-link" 2>&1 && ln -s -- "$t" "$a.relayctl-link" 2>&1 && mv -fT -- "$a.relayctl-link" "$a" 2>&1); then ok; else err "point $a back at $t: $out"; fi
	fi
}
p_sysctl() { # KEY VALUE [WANT]: write /proc/sys/KEY; VAL what reads back, ERR if that is not WANT
	f=/proc/sys/$(printf '%s' "$a" | tr . /)
	[ -e "$f" ] || {
		err "$a does not exist"
		return
	}
	# A sysctl's exit status proves nothing (docs/kernel.md): relayctl
	# compares what reads back.
	if ! (printf '%s\n' "$b" >"$f") 2>/dev/null; then
		err "the kernel refused $a = $b ($(kernel_says "$f" "$b")); it reads $(head -c 200 "$f")"
		return
	fi
	got=$(head -c 4096 "$f")
	if [ -n "$c" ] && [ "$(squeeze "$got")" != "$(squeeze "$c")" ]; then
		err "$a: read back $(squeeze "$got"), want $c"
		return
	fi
	val "$got"
}
# kernel_says FILE VALUE: why the kernel refused VALUE for a /proc/sys
# file, in its own words (the errno's text: "Invalid argument"); the
# shell's printf only says "I/O error", so the write is made again by dd,
# which names the errno.
kernel_says() {
	ks_=$(printf '%s\n' "$2" | dd of="$1" bs=4096 2>&1 | grep '^dd:' | head -n 1)
	ks_=${ks_##*: }
	printf '%s' "${ks_:-refused}"
}
p_handoff() { # command N, then N lines: the handoff argv; VAL the host clock (ns) before it
	t=$(date +%s%N)
	run_words handoff
}
# run_words WHAT: run the N words (b) that follow the request as a
# command; VAL $t, or ERR WHAT: the tail of its output.
run_words() {
	read_argv "$b" || {
		err "short argv"
		return
	}
	[ -z "$argv_empty" ] || {
		empty_argv
		return
	}
	if out=$(run_list </dev/null 2>&1); then val "$t"; else err "$1: $(printf '%s' "$out" | tail -c 400)"; fi
}
# service VERB: restart or stop the relay, by systemd UNIT, or by the stop
# (and start) argv lines: VAL the host clock (ns) when it was stopped.
service() {
	t=$(date +%s%N)
	case $a in
	systemd)
		# A unit that failed into its start limit (a release that could
		# not start, a crash loop) refuses every start until reset-failed:
		# without it a rollback could not start the old release. A unit
		# that is not loaded or not failed says so; that is no error.
		case $1 in restart | reload-or-restart) systemctl reset-failed -- "$b" >/dev/null 2>&1 9>&- ;; esac
		if out=$(systemctl "$1" -- "$b" 2>&1 9>&-); then val "$t"; else err "systemctl $1 $b: $(printf '%s' "$out" | tail -c 300)"; fi
		;;
	command)
		if [ "$1" = reload ]; then
			run_words reload
			return
		fi
		read_argv "$b" || {
			err "short argv"
			return
		}
		stop_list=$argv_list
		stop_empty=$argv_empty
		start_list=
		if [ "$1" = restart ]; then
			read_argv "$c" || {
				err "short argv"
				return
			}
			start_list=$argv_list
		fi
		[ -z "$stop_empty$argv_empty" ] || {
			empty_argv
			return
		}
		argv_list=$stop_list
		if ! out=$(run_list </dev/null 2>&1); then
			err "stop: $(printf '%s' "$out" | tail -c 300)"
			return
		fi
		if [ "$1" = restart ]; then
			argv_list=$start_list
			if ! out=$(run_list </dev/null 2>&1); then
				err "start: $(printf '%s' "$out" | tail -c 300)"
				return
			fi
		fi
		val "$t"
		;;
	*) err "unknown manager $a" ;;
	esac
}
p_restart() { service restart; } # systemd UNIT | command NSTOP NSTART, then the argv lines
p_reload() { service reload; }   # systemd UNIT | command N, then the argv lines
p_reload_or_restart() { service reload-or-restart; } # systemd UNIT: a reload's undo
p_stop() { service stop; }       # systemd UNIT | command NSTOP, then the argv lines
p_clear_fdstore() { # UNIT: its file-descriptor store empty (after a stop, which
	# empties it on systemd 252; 254+ keeps a preserved one until clean)
	n=$(systemctl show --property=NFileDescriptorStore --value -- "$a" 2>/dev/null 9>&-)
	if [ "${n:-0}" != 0 ]; then
		systemctl clean --what=fdstore -- "$a" >/dev/null 2>&1 9>&-
		n=$(systemctl show --property=NFileDescriptorStore --value -- "$a" 2>/dev/null 9>&-)
	fi
	if [ "${n:-0}" = 0 ]; then ok; else err "systemctl clean --what=fdstore $a: $n fds still in the store"; fi
}
p_daemon_reload() {
	if out=$(systemctl daemon-reload 2>&1 9>&-); then ok; else err "systemctl daemon-reload: $(printf '%s' "$out" | tail -c 300)"; fi
}
p_relay_drain() { # PID HOST:PORT POST|DELETE: the relay's no-new-lobbies mode, in its network namespace
	case $a in '' | *[!0-9]*)
		err "bad pid"
		return
		;;
	esac
	case $c in POST | DELETE) ;; *)
		err "bad verb"
		return
		;;
	esac
	out=$(nsenter -t "$a" -n timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
printf "%s /drain HTTP/1.0\r\n\r\n" "$2" >&3
head -c 200 <&3' "${b%:*}" "${b##*:}" "$c" 2>&1 9>&-)
	case $out in "HTTP/"*" 200 "*) ok ;; *) err "$c /drain: $(printf '%s' "$out" | head -n 1)" ;; esac
}
# frame NAME CMD [ARGS...]: CMD's output as one section of observe.sh's
# framing (BOUNDARY NAME, the output, BOUNDARY end STATUS), with $a the
# boundary: a sample's answer is parsed as observe's is.
frame() {
	printf '%s %s\n' "$a" "$1"
	shift
	"$@" </dev/null 2>/dev/null
	printf '\n%s end %d\n' "$a" "$?"
}
# relay_status PID HOST PORT: GET /status of the relay in its network
# namespace, bounded, with why it failed (as observe.sh reads it).
relay_status() {
	nsenter -t "$1" -n timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
printf "GET /status HTTP/1.0\r\n\r\n" >&3
head -c 65536 <&3' "$2" "$3" 2>&1 9>&-
}
p_sample() { # BOUNDARY PID PORT CONTROL|-: DATA the relay socket's drop counters, framed
	# Only what the soak needs, read in the relay's network namespace: ss
	# for the socket (d, rb, inode), /proc/PID/net/udp and snmp, the
	# relay's /status, and the clock. A few processes where observe starts
	# dozens; the output goes through a file, as observe's.
	case $b in '' | *[!0-9]*)
		err "bad pid"
		return
		;;
	esac
	case $c in '' | *[!0-9]*)
		err "bad port"
		return
		;;
	esac
	case $d in - | 127.*:[0-9]*) ;; *)
		err "bad control address"
		return
		;;
	esac
	case $d in *[!0-9.:-]*)
		err "bad control address"
		return
		;;
	esac
	[ -d "/proc/$b" ] || {
		err "the relay (pid $b) is not running"
		return
	}
	f=$windows/sample.$$.out
	{
		frame clock date +%s%N
		frame ss nsenter -t "$b" -n ss -H -O -u -a -n -m -e "sport = :$c"
		frame proc-net-udp cat "/proc/$b/net/udp"
		frame proc-net-snmp cat "/proc/$b/net/snmp"
		[ "$d" = - ] || frame relay-status relay_status "$b" "${d%:*}" "${d##*:}"
	} >"$f" 2>/dev/null
	printf 'DATA %d\n' "$(wc -c <"$f")"
	cat -- "$f"
	rm -f -- "$f"
}
p_unit_log() { # UNIT SINCE_NS [INVOCATION]: DATA, the unit's journal lines since then
	since=$((b / 1000000000))
	# systemctl can say a run failed before journald has written how (seen
	# in the lab: the last words missing from a read taken at once). With
	# the failed run's invocation id, wait up to 2 s for systemd's "Main
	# process exited" of that run (its MESSAGE_ID), then --sync, which
	# returns once journald has read what was sent before it: the process's
	# own output, written before it exited, included.
	case $c in
	'' | *[!0-9a-f]*) ;;
	*)
		i=0
		while [ $i -lt 20 ] && [ -z "$(journalctl -q --no-pager -n 1 -o cat "INVOCATION_ID=$c" MESSAGE_ID=98e322203f7a4ed290d09fe03c09fe15 2>/dev/null)" ]; do
			nap 0.1
			i=$((i + 1))
		done
		journalctl --sync >/dev/null 2>&1 || :
		;;
	esac
	# Not -n 20: with --since, journalctl gives the first lines after
	# since, not the last (a busy second before the window filled all 20).
	out=$(journalctl -u "$a" --since "@$since" --no-pager -o short-iso 2>&1 | tail -n 20 | tail -c 8000)
	printf 'DATA %d\n%s' "$(printf '%s' "$out" | wc -c)" "$out"
}
p_clock() { val "$(date +%s%N)"; }
p_observe() { # BOUNDARY, then the argv lines (observe.sh's arguments): DATA its framed output
	# observe.sh in this session: the read-back needs no SSH session of
	# its own. Its output goes through a file, which keeps it byte for byte
	# (a command substitution would eat the final newline). Not read_argv:
	# observe's words may be empty (a unit name under the command manager),
	# and splitting at tabs drops them.
	f=$windows/observe.$$.out
	(
		n=$argv_left
		set --
		while [ "$n" -gt 0 ]; do
			IFS= read -r w || exit 1
			set -- "$@" "$w"
			n=$((n - 1))
		done
		printf '%s\n' "$a" | sh -c "$observe_script" relayctl-observe "$@" 9>&-
	) >"$f" 2>/dev/null
	argv_left=0
	printf 'DATA %d\n' "$(wc -c <"$f")"
	cat -- "$f"
	rm -f -- "$f"
}
p_clear() { # archive an unfinished run's journal and stage
	old=$state/receipts/abandoned-$(date -u +%Y%m%dT%H%M%SZ)
	[ -d "$state/receipts" ] || mkdir -p -- "$state/receipts" || {
		err "mkdir receipts"
		return
	}
	if [ -f "$journal" ]; then mv -- "$journal" "$old.journal" || {
		err "archive the journal"
		return
	}; fi
	if [ -d "$stage" ]; then mv -- "$stage" "$old.stage" || {
		err "archive $stage"
		return
	}; fi
	[ -z "$win" ] || rm -rf -- "$win"
	val "$old"
}
# file_receipt NAME KEEP: the receipt (the request's data) as
# STATE/receipts/NAME.json, through a temporary file and a rename.
file_receipt() {
	case $1 in *[!A-Za-z0-9._-]* | '')
		err "bad receipt name"
		return 1
		;;
	esac
	case $2 in *[!0-9]* | '')
		err "bad receipt count"
		return 1
		;;
	esac
	[ -d "$state/receipts" ] || mkdir -p -- "$state/receipts" || {
		err "mkdir receipts"
		return 1
	}
	r=$state/receipts/$1
	out=$(take "$data_left" "$r.json.relayctl-new")
	rc=$?
	data_left=0
	if [ "$rc" != 0 ]; then
		err "write receipt: $out"
		return 1
	fi
	mv -f -- "$r.json.relayctl-new" "$r.json" || {
		err "write receipt"
		return 1
	}
}
# prune_receipts KEEP: only the newest KEEP receipts stay, each with its
# journal (names begin with their run's UTC time: the glob's order is
# theirs). The oldest go first; a name relayctl did not write is left.
prune_receipts() {
	keep=$1
	set -- "$state"/receipts/*.json
	[ -e "$1" ] || [ -L "$1" ] || return 0
	n=$#
	for f in "$@"; do
		[ "$n" -gt "$keep" ] || break
		rm -f -- "$f" "${f%.json}.journal"
		[ -d "${f%.json}.backups" ] && [ ! -L "${f%.json}.backups" ] && rm -rf -- "${f%.json}.backups"
		n=$((n - 1))
	done
}
p_commit() { # NAME OUTCOME KEEP, then the receipt as data: filed with the journal beside it
	file_receipt "$a" "$c" || return
	jlog "end $b"
	mv -f -- "$journal" "$r.journal" || {
		err "file the journal"
		return
	}
	# An applied window's backups stay beside its receipt, root's alone
	# (the stage folder is 0700): relayctl rollback puts the files back
	# from them. Those of older receipts than the newest keep_backups go.
	if [ "$b" = applied ] && [ -d "$stage" ] && mv -- "$stage" "$r.backups"; then prune_backups; else rm -rf -- "$stage"; fi
	[ -z "$win" ] || rm -rf -- "$win"
	prune_receipts "$c"
	ok
}
p_record() { # NAME OUTCOME KEEP, then the receipt as data: filed alone
	file_receipt "$a" "$c" || return
	prune_receipts "$c"
	ok
}
p_receipts() { # N: the newest N receipts, newest first, as one DATA answer
	case $a in '' | *[!0-9]*)
		err "bad receipt count"
		return
		;;
	esac
	set --
	[ -d "$state/receipts" ] && set -- "$state"/receipts/*.json
	list='' total=0 n=0 i=$#
	while [ "$i" -gt 0 ] && [ "$n" -lt "$a" ]; do
		eval "f=\${$i}"
		i=$((i - 1))
		[ -f "$f" ] && [ ! -L "$f" ] || continue
		name=${f##*/}
		case $name in *[!A-Za-z0-9._-]*) continue ;; esac
		size=$(($(wc -c <"$f"))) || continue
		[ "$size" -le 1048576 ] || continue
		list="$list$name $size
"
		total=$((total + ${#name} + ${#size} + 2 + size))
		n=$((n + 1))
	done
	printf 'DATA %d\n' "$total"
	# Exactly SIZE bytes each, whatever happens to the file meanwhile
	# (zeros for bytes gone): the answer's length was given.
	printf '%s' "$list" | while IFS=' ' read -r name size; do
		printf '%s %s\n' "$name" "$size"
		cat -- "$state/receipts/$name" /dev/zero 2>/dev/null | head -c "$size"
	done
}
keep_backups=5
prune_backups() {
	set -- "$state"/receipts/*.backups
	n=$(($# - keep_backups))
	for d in "$@"; do
		[ "$n" -gt 0 ] || break
		n=$((n - 1))
		[ -d "$d" ] && [ ! -L "$d" ] && rm -rf -- "$d"
	done
}
p_unlock() { # remove the owner file and exit
	rm -f -- "$state/lock.owner"
	ok
	exit 0
}

# The window's process. A detach request's data is a window's program:
#   relayctl-window 1
#   kind window|rollback
#   await MS     how long to wait for relayctl's word once the window's
#                requests are done, while this session lives
#   judge MS     how long the host's own read-back may take
#   stable MS    how long it must hold, the same relay process
#   checks N     then N bytes: the host's own checks, one a line
#   observe N    then N bytes: the request that reads the host
#   undo-at I... which rollback (1 on, 0 for none) follows a stop at each
#                request of the window, and last, at checks that failed
#   undo N       then N bytes of requests: one rollback (as many as needed)
#   window N     then N bytes of requests: the window itself
# The session writes it to /run/relayctl/window-ID (root's alone, made
# afresh, in RAM: a full state disk leaves it be), checks its sha256
# against the request's, and starts the window's process with that sha256,
# which checks it again before it reads a line of it. The process answers
# the window's requests into window-ID/answers/1, 2, ... (each published
# by an empty N.done beside it once whole; the session relays them as they
# come), then waits for relayctl's word
# (a verdict request: keep, or undo with relayctl's rollback as its
# requests). When the session is gone (relayctl or its connection lost)
# or the await runs out, it decides by itself: a window that failed is
# rolled back; one that did not is read back (observe and the checks)
# until it holds, stably, and kept, or rolled back when the judge time
# runs out. Its end is the journal's last line ("window kept by=host",
# "window rolled-back by=host why=...", ...) and window-ID/end; then it exits,
# and the host lock it held with the session is free.

# started_at PID: the process's start time (clock ticks since boot): with
# the pid, it names one process, whatever pid is reused later. Nothing for
# a process that has exited (a zombie waits for a parent that reaps late).
started_at() {
	start_of "$1" && printf '%s' "$so_start"
}

# start_of PID: started_at's answer in so_start, without a process of its
# own: the waits below ask it every few milliseconds, and a subshell each
# time, on twenty hosts' windows at once, was CPU the windows lacked.
start_of() {
	IFS= read -r so_start 2>/dev/null <"/proc/$1/stat" || return 1
	so_start=${so_start##*) }
	set -f
	# shellcheck disable=SC2086 # the stat line's fields
	set -- $so_start
	set +f
	[ $# -ge 20 ] || return 1
	case $1 in Z | X | x) return 1 ;; esac
	shift 19
	so_start=$1
}

# alive FILE: the process FILE names ("PID START") is alive.
alive() {
	IFS=' ' read -r al_pid al_start <"$1" 2>/dev/null || return 1
	case $al_pid in '' | *[!0-9]*) return 1 ;; esac
	start_of "$al_pid" && [ "$so_start" = "$al_start" ]
}

# nap SECONDS: sleep, without the host lock's descriptor: a sleep that
# outlives a killed agent or window must not keep the host locked.
nap() { sleep "$1" 9>&-; }

# keeps_open PID FD FILE: process PID has FILE open on descriptor FD: what
# names one process in two stat calls, where its start time (start_of)
# costs a 300-byte /proc line read a byte at a time (the shell's read
# takes no more), and the waits asked it some sixty times a window. A pid
# reused by another process does not have that open file; a process that
# has ended has no descriptors. It needs test's -ef, which dash, bash,
# busybox and the ksh family have though POSIX does not name it (ef_ok);
# a shell without it names a process by its start time, as alive does.
keeps_open() {
	case $1 in '' | *[!0-9]*) return 1 ;; esac
	# shellcheck disable=SC3013 # -ef: only where ef_ok found it
	[ "/proc/$1/fd/$2" -ef "$3" ]
}
# shellcheck disable=SC3013 # the probe for -ef itself
if [ / -ef / ] 2>/dev/null; then ef_ok=1; else ef_ok=; fi

# my_pid: this process's pid in my_pid_, a subshell's too ($$ is the
# shell's): read from /proc/self only in a subshell.
my_pid() {
	# shellcheck disable=SC3013 # -ef: only where ef_ok found it
	if [ -n "$ef_ok" ] && [ /proc/self -ef "/proc/$$" ]; then
		my_pid_=$$
	else
		IFS=' ' read -r my_pid_ _ </proc/self/stat
	fi
}

# doze FILE SECONDS UNTIL: unless UNTIL (a test, evaluated here: it sees
# globals, not the caller's arguments) holds, wait up to SECONDS or until
# the other side of the window wakes this one (wake FILE). The files the
# sides write are the truth; a wake-up only cuts a wait short, so one that
# is lost costs SECONDS at most. FILE names this process (its pid) and is
# held open on descriptor 7 while it dozes (keeps_open), before UNTIL is
# tested, so a change the other side makes after the test finds it to
# wake (without -ef, FILE names it by pid and start time instead).
#
# A wake is SIGWINCH, caught only while dozing: its default is to be
# ignored, so one that comes later interrupts nothing (a caught signal
# would end a read of relayctl's next request) and kills nothing. The
# wait is on a sleep of SECONDS that a wake does not end, so the next doze
# waits on the same sleep: one process for every answer of a window
# (twenty windows polling, each poll a sleep process, were a fifth of the
# CPU of an apply on twenty hosts sharing two cores; a sleep a wake, a
# sixth of the programs a host still started). The sleep is off the
# session's output: one that outlives its session must not hold the
# connection open.
#
# Both sides' waits tick every half second. The session's are woken for
# everything they wait on (each answer, the pid file, the end) and tick
# only to notice a window killed outright. The window's wait for the
# verdict is woken by the verdict and by its session's end (session_gone,
# which a session ended by its connection runs too: stdin closes); it
# ticks to notice a session killed outright, which runs nothing.
session_tick=0.5
doze() {
	dz_woken=
	trap 'dz_woken=1' WINCH
	my_pid
	if [ -n "$ef_ok" ]; then
		# command: exec's failed redirection would end the shell.
		{ command exec 7>"$1"; } 2>/dev/null && printf '%s\n' "$my_pid_" >&7
	else
		start_of "$my_pid_" && printf '%s %s\n' "$my_pid_" "$so_start" >"$1"
	fi
	if ! eval "$3"; then
		if [ -z "${dz_tick:-}" ]; then
			sleep "$2" >/dev/null 2>&1 7>&- 9>&- &
			dz_tick=$!
		fi
		# A wake before the wait set dz_woken; one during it ends the wait.
		# A wait that ended without one is the sleep's end (or a pid not
		# this shell's child: a subshell's copy of dz_tick): the next doze
		# starts another.
		[ -n "$dz_woken" ] || wait "$dz_tick" 2>/dev/null
		[ -n "$dz_woken" ] || dz_tick=
	fi
	[ -z "$ef_ok" ] || exec 7>&-
	trap - WINCH
	return 0
}

# wake FILE: wakes the doze FILE names, if that process dozes on it still
# (holds it open on descriptor 7; without -ef, is still the process of the
# pid and start time named).
wake() {
	if [ -n "$ef_ok" ]; then
		IFS=' ' read -r wk_pid _ 2>/dev/null <"$1" && keeps_open "$wk_pid" 7 "$1" && kill -WINCH "$wk_pid" 2>/dev/null
	else
		alive "$1" && kill -WINCH "$al_pid" 2>/dev/null
	fi
	return 0
}

# window_alive: the window's process (its pid file's) runs: it holds its
# pid file open on descriptor 6 (keeps_open) from the moment it is written. For
# the session's waits on its own window; a window another agent started
# is judged by alive (its start time).
window_alive() {
	if [ -n "$ef_ok" ]; then
		IFS=' ' read -r wa_pid _ 2>/dev/null <"$win/pid" && keeps_open "$wa_pid" 6 "$win/pid"
	else
		alive "$win/pid"
	fi
}

# now_ms: the host clock in milliseconds.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# uptime_ms: milliseconds since boot in up_ms (10 ms steps), read without a
# process of its own, for the waits' deadlines; the host clock where
# /proc/uptime cannot be read.
uptime_ms() {
	if IFS=' .' read -r up_s up_cs _ </proc/uptime 2>/dev/null; then
		case $up_s$up_cs in '' | *[!0-9]*) ;; *)
			up_ms=$((up_s * 1000 + ${up_cs#0} * 10))
			return
			;;
		esac
	fi
	up_ms=$(now_ms)
}

# skip_n N: N answers SKIP (requests relayctl sent inside a program that
# did not run).
skip_n() {
	sk_=$1
	while [ "$sk_" -gt 0 ]; do
		printf 'SKIP\n'
		sk_=$((sk_ - 1))
	done
}

# relay FROM N: the window's answers FROM..FROM+N-1, to relayctl as the
# window's process writes them. If it ends first, the next is ERR and the
# rest SKIP. A relayctl gone ends this session here (the window goes on).
relay() {
	rl_i=$1 rl_end=$(($1 + $2))
	while [ "$rl_i" -lt "$rl_end" ]; do
		if [ -f "$win/answers/$rl_i.done" ]; then
			# An answer the window could not write whole: this session ends
			# here, and the window, its session gone, ends by itself.
			if one_line "$win/answers/$rl_i"; then
				printf '%s\n' "$ol_l"
			else
				whole "$win/answers/$rl_i" || exit 1
				cat -- "$win/answers/$rl_i" || exit 1
			fi
			rl_i=$((rl_i + 1))
			continue
		fi
		if ! window_alive; then
			[ -f "$win/answers/$rl_i.done" ] && continue
			err "the window's process on the host ended before it answered: $(head -c 300 "$win/log" 2>/dev/null)"
			skip_n $((rl_end - rl_i - 1))
			return
		fi
		# The window wakes this session with each answer, and at its end.
		doze "$win/doze.session" "$session_tick" '[ -f "$win/answers/$rl_i.done" ] || ! window_alive'
	done
}

# one_line FILE: FILE is one line and no DATA answer, in ol_l: most answers
# are, and the shell passes them on without a cat of their own.
one_line() {
	{ IFS= read -r ol_l && ! { IFS= read -r ol_x || [ -n "$ol_x" ]; }; } <"$1" 2>/dev/null || return 1
	case $ol_l in "DATA "*) return 1 ;; esac
}

# whole FILE: FILE holds one answer, all of it.
whole() {
	IFS= read -r wh_l <"$1" || return 1
	case $wh_l in
	"DATA "*)
		wh_n=${wh_l#DATA }
		case $wh_n in '' | *[!0-9]*) return 1 ;; esac
		[ "$(wc -c <"$1")" -eq $((${#wh_l} + 1 + wh_n)) ]
		;;
	esac
}

# take_program FILE SHA256: the request's data as FILE, which must hash
# to SHA256 (what relayctl sent is what the window's process reads); why
# says why not.
take_program() {
	tp_size=$data_left
	tp_out=$(take "$data_left" "$1")
	tp_rc=$?
	data_left=0
	why="write $1: $tp_out"
	[ "$tp_rc" = 0 ] || return 1
	tp_sum=$(sha256_of "$1" "$tp_size")
	why="$1 holds sha256 ${tp_sum:-none}, relayctl sent $2"
	[ "$tp_sum" = "$2" ]
}

p_detach() { # ID SHA256 N, with the program as data: its window, run by a
	# process of its own outside this session; the N answers of its
	# requests follow this one's OK, relayed.
	n=$c
	case $n in '' | *[!0-9]*) n=0 ;; esac
	case $a in '' | *[!0-9a-f]*) a= ;; esac
	if [ ${#a} != 16 ]; then
		err "bad window id"
		skip_n "$n"
		return
	fi
	if [ -n "$win" ] && window_alive; then
		err "a window is in flight on the host already"
		skip_n "$n"
		return
	fi
	win=$windows/window-$a
	forget_windows
	if ! out=$(rm_if "$win" 2>&1 && mkdir -m 0700 -- "$win" "$win/answers" 2>&1); then
		err "cannot make $win: $out"
		skip_n "$n"
		return
	fi
	if ! take_program "$win/program" "$b"; then
		err "$why"
		skip_n "$n"
		return
	fi
	if ! why=$(start_window "$a" "$b"); then
		err "could not start the window outside this session: $why (nothing in force changed)"
		skip_n "$n"
		return
	fi
	win_n=$n
	printf 'OK\n'
	relay 1 "$n"
}

# session_gone: the session's end (relayctl done with the host, or its
# connection closed, which ends the read of the next request). A window
# still waiting for relayctl's word learns it now, not at its tick: the
# file, then the wake. A session killed outright runs nothing; the
# window's tick finds it gone.
session_gone() {
	[ -n "${win:-}" ] && [ -d "$win" ] && ! [ -L "$win" ] || return 0
	: >"$win/session.gone" 2>/dev/null && wake "$win/doze.window"
	return 0
}

# forget_windows: the folders of windows whose process is gone, a minute
# after (a window in another host's hands, where hosts share /run, is
# alive, or younger).
forget_windows() {
	find "$windows" -mindepth 1 -maxdepth 1 -name 'window-*' -type d -mmin +1 2>/dev/null | while IFS= read -r fw_d; do
		alive "$fw_d/pid" || rm -rf -- "$fw_d"
	done
}

# start_window ID SHA256: the window's process, reparented away from this
# session (a double fork), in a session of its own (setsid), its standard
# files off the connection, and where systemd runs the host in a scope
# unit of its own, relayctl-window-ID, out of the SSH session's cgroup
# (which a logind session teardown or an OOM kill takes whole). It
# inherits the host lock (fd 9). Waits until it runs: its pid file.
start_window() {
	set -- "$agent_script" "$state" "$observe_script" window "$1" "$2" "$$" "$(started_at $$)"
	unit=relayctl-window-$5
	if [ -d /run/systemd/system ]; then
		(setsid systemd-run --scope --quiet --collect --unit="$unit" -- sh -c 'eval "$1"' relayctl-window "$@" </dev/null >/dev/null 2>>"$win/log" &)
	else
		(setsid sh -c 'eval "$1"' relayctl-window "$@" </dev/null >/dev/null 2>>"$win/log" &)
	fi
	uptime_ms
	sw_end=$((up_ms + 5000))
	while ! [ -s "$win/pid" ]; do
		uptime_ms
		if [ "$up_ms" -ge "$sw_end" ]; then
			head -c 300 "$win/log" 2>/dev/null
			echo " (no process after 5 s)"
			return 1
		fi
		# The window wakes this session once its pid file is written.
		doze "$win/doze.session" "$session_tick" '[ -s "$win/pid" ]'
	done
}

p_verdict() { # keep|undo SHA256 N (undo: N requests as data, relayctl's
	# rollback): relayctl's word to the window waiting for it. keep: VAL
	# how it ended; undo: OK, then the N answers, relayed. If the window
	# decided by itself first: ERR saying how it ended.
	n=$c
	case $n in '' | *[!0-9]*) n=0 ;; esac
	[ "$a" = undo ] || n=0
	case $a in keep | undo) ;; *) err "bad verdict $a"; return ;; esac
	if ! window_alive && ! [ -s "$win/end" ]; then
		err "no window is in flight on the host"
		skip_n "$n"
		return
	fi
	if [ "$a" = undo ] && ! take_program "$win/undo.req" "$b"; then
		err "$why"
		skip_n "$n"
		return
	fi
	printf '%s %s\n' "$a" "$b" >"$win/verdict.new" && mv -f -- "$win/verdict.new" "$win/verdict"
	if ! mkdir -- "$win/decided" 2>/dev/null; then
		rm -f -- "$win/verdict"
		wait_end
		err "the window on the host ended by itself: $(head -c 1000 "$win/end" 2>/dev/null || echo 'its process is gone')"
		skip_n "$n"
		return
	fi
	wake "$win/doze.window"
	if [ "$a" = keep ]; then
		wait_end
		val "$(head -c 1000 "$win/end" 2>/dev/null)"
		return
	fi
	printf 'OK\n'
	relay $((${win_n:-0} + 1)) "$n"
}

# wait_end: until the window's process has ended (its end file), or is gone.
wait_end() {
	while ! [ -s "$win/end" ] && window_alive; do
		doze "$win/doze.session" "$session_tick" '[ -s "$win/end" ] || ! window_alive'
	done
}

# window_main ID SHA256 SESSION_PID SESSION_START: the window's process.
window_main() {
	trap '' HUP
	win=$windows/window-$1
	answers=$win/answers locked=1
	printf '%s %s\n' "$$" "$(started_at $$)" >"$win/pid.new" && { command exec 6<"$win/pid.new"; } 2>/dev/null && mv -f -- "$win/pid.new" "$win/pid"
	wake "$win/doze.session"
	printf '%s %s\n' "$3" "$4" >"$win/session"
	# It runs only holding the host lock, and reads only what relayctl sent.
	if ! [ -e "/proc/$$/fd/9" ]; then
		echo "the window's process does not hold the host lock" >>"$win/log"
		exit 1
	fi
	if ! window_split "$2"; then
		echo "$split_err" >>"$win/log"
		exit 1
	fi
	serve <"$win/window.req"
	window_stop=$stop_at window_msg=$stop_msg
	if [ "$w_kind" = rollback ]; then
		if [ -n "$window_stop" ]; then window_end "rollback-failed by=controller why=$window_msg"; else window_end "rolled-back by=controller"; fi
		return
	fi
	await_word
	case $word in
	keep) window_end "kept by=controller" ;;
	undo)
		serve <"$win/undo.req"
		if [ -n "$stop_at" ]; then window_end "rollback-failed by=controller why=$stop_msg"; else window_end "rolled-back by=controller"; fi
		;;
	*) judge_alone ;;
	esac
}

# window_end TEXT: how the window ended, in the journal, then window/end.
window_end() {
	jlog "window $1"
	printf '%s\n' "$(clean "$1")" >"$win/end.new" && mv -f -- "$win/end.new" "$win/end"
	wake "$win/doze.session"
}

# window_split SHA256: the program, checked, into its settings (w_kind,
# w_await, w_judge, w_stable, w_undo_at) and parts (checks, observe.req,
# undo.N.req, window.req); split_err says why not.
window_split() {
	split_err="the window's program is not the one relayctl sent"
	[ "$(sha256_of "$win/program" small)" = "$1" ] || return 1
	split_err="the window's program cannot be read"
	{
		IFS= read -r l && [ "$l" = "relayctl-window 1" ] &&
			read -r k w_kind && [ "$k" = kind ] &&
			read -r k w_await && [ "$k" = await ] &&
			read -r k w_judge && [ "$k" = judge ] &&
			read -r k w_stable && [ "$k" = stable ] &&
			read -r k n && [ "$k" = checks ] && read_n "$n" >"$win/checks" &&
			read -r k n && [ "$k" = observe ] && read_n "$n" >"$win/observe.req" &&
			read -r k w_undo_at && [ "$k" = undo-at ] || return 1
		v=0
		while read -r k n && [ "$k" = undo ]; do
			v=$((v + 1))
			read_n "$n" >"$win/undo.$v.req" || return 1
		done
		[ "$k" = window ] && read_n "$n" >"$win/window.req" || return 1
	} <"$win/program"
	split_err="the window's program has a bad setting"
	for v in "$w_await" "$w_judge" "$w_stable" $w_undo_at; do
		case $v in '' | *[!0-9]*) return 1 ;; esac
	done
	case $w_kind in window | rollback) ;; *) return 1 ;; esac
}

# await_word: until relayctl's word arrives (word: keep or undo), or the
# session is gone or the await runs out (word: judge). window-ID/decided is
# made once, by whichever side comes first: that side's word stands.
await_word() {
	uptime_ms
	aw_start=$up_ms aw_now=$up_ms
	while ! [ -d "$win/decided" ]; do
		if [ -e "$win/session.gone" ] || ! alive "$win/session" || [ "$aw_now" -ge $((aw_start + w_await)) ]; then
			if mkdir -- "$win/decided" 2>/dev/null; then
				word=judge
				end_session
				return
			fi
			continue
		fi
		# relayctl's verdict wakes it (p_verdict), and so does the session's
		# end (session_gone); a session killed outright and the await's end
		# are seen within a tick.
		doze "$win/doze.window" "$session_tick" '[ -d "$win/decided" ] || [ -e "$win/session.gone" ]'
		uptime_ms
		aw_now=$up_ms
	done
	read -r word sum _ <"$win/verdict" 2>/dev/null || word=judge
	# relayctl's rollback as relayctl sent it, or none: then alone.
	if [ "$word" = undo ] && [ "$(sha256_of "$win/undo.req" small)" != "$sum" ]; then word=judge; fi
}

# end_session: a session that still stands when the await runs out has
# brought no word from relayctl for all of it: relayctl has gone quiet,
# or its connection has (a network that drops its traffic, which sshd
# notices only by its own ClientAlive settings or TCP's, hours later by
# default). The window ends it (TERM, to the process its session file
# names by pid and start time, never a pid since reused), so the host
# lock it holds is free once the window has ended, and a word that comes
# later finds no session: relayctl dials again and reads the journal.
end_session() {
	[ -e "$win/session.gone" ] && return 0
	alive "$win/session" && kill -TERM "$al_pid" 2>/dev/null
	return 0
}

# judge_alone: the window decided on the host. A window that stopped is
# rolled back; else it is read back until the checks hold, twice w_stable
# apart with the same relay process, or the judge time runs out.
judge_alone() {
	if [ -n "$window_stop" ]; then
		undo_at "$window_stop" "window: $window_msg"
		return
	fi
	ja_end=$(($(now_ms) + w_judge)) ja_pid=
	while :; do
		read_back
		if [ -z "$hc_fail" ]; then
			if [ "$w_stable" = 0 ] || [ "$ja_pid" = "$hc_pid" ]; then
				window_end "kept by=host"
				return
			fi
			ja_pid=$hc_pid
			nap "$((w_stable / 1000)).$(printf '%03d' $((w_stable % 1000)))"
			continue
		fi
		ja_pid=
		[ "$(now_ms)" -lt "$ja_end" ] || break
		nap 0.2
	done
	set -f
	# shellcheck disable=SC2086 # numbers, one a field
	set -- $w_undo_at
	set +f
	undo_at $# "read-back: $hc_fail"
}

# undo_at I WHY: the rollback planned for a stop at request I (the last
# entry: checks that did not hold), then the window's end.
undo_at() {
	ua_i=$1 ua_why=$2
	set -f
	# shellcheck disable=SC2086 # numbers, one a field
	set -- $w_undo_at
	set +f
	[ "$ua_i" -le $# ] || ua_i=$#
	shift $((ua_i - 1))
	if [ "$1" = 0 ]; then
		window_end "rolled-back by=host why=$ua_why"
		return
	fi
	serve <"$win/undo.$1.req"
	if [ -n "$stop_at" ]; then window_end "rollback-failed by=host why=$ua_why; rollback: $stop_msg"; else window_end "rolled-back by=host why=$ua_why"; fi
}

# read_back: the host read as the program's observe request reads it, and
# the checks against that: hc_fail, hc_pid (host_checks).
read_back() {
	serve <"$win/observe.req"
	IFS=$tab read -r _ _ _ _ rb_b _ <"$win/observe.req"
	tail -n +2 -- "$answers/$nans" >"$win/reading"
	rm -f -- "$answers/$nans.done" "$answers/$nans"
	host_checks "$win/reading" "$rb_b"
}

# section FILE BOUNDARY NAME: the content of observe's first frame NAME in
# FILE (without the newline observe adds before its end line).
section() {
	awk -v h="$2 $3" -v e="$2 end " '
		!seen && $0 == h { on = 1; seen = 1; next }
		on && index($0, e) == 1 { exit }
		on { if (n++) printf "\n"; printf "%s", $0 }
	' "$1"
}

# host_checks FILE BOUNDARY: the window's checks, one a line (KIND and its
# words, tab-separated), against a reading (observe's framed output).
# hc_fail says what does not hold ("" when all do); hc_pid is the relay
# process read. The checks are few and simple on purpose; relayctl, when
# it is there, reads the host back in full:
#   sysctl KEY VALUE  /proc/sys/KEY reads VALUE (blanks squeezed)
#   link TARGET       the current link points at TARGET
#   pid OLD DIR       the relay runs, as a pid other than OLD (- any),
#                     from the release folder DIR (- any)
#   rb WANT           every socket of that pid on the port, in its network
#                     namespace, has rb WANT (and there is one)
host_checks() {
	hc_fail='' hc_pid=$(section "$1" "$2" service)
	case $hc_pid in *[!0-9]*) hc_pid= ;; esac
	while IFS=$tab read -r hk hx hy; do
		case $hk in
		sysctl)
			hg=$(squeeze "$(section "$1" "$2" "sysctl $hx")")
			[ "$hg" = "$(squeeze "$hy")" ] || hc_fail="$hc_fail; sysctl $hx: got $hg, want $hy"
			;;
		link)
			hg=$(section "$1" "$2" current-link)
			[ "$hg" = "$hx" ] || hc_fail="$hc_fail; release link: got ${hg:-none}, want $hx"
			;;
		pid)
			hg=$(section "$1" "$2" relay-exe)
			if [ -z "$hc_pid" ]; then
				hc_fail="$hc_fail; relay running: got false, want true"
			elif [ "$hc_pid" = "$hx" ]; then
				hc_fail="$hc_fail; relay restarted: got the same pid $hx, want a new one"
			elif [ "$hy" != - ]; then
				# /proc/PID/exe is resolved: so is the folder.
				hd=$(readlink -f -- "$hy" 2>/dev/null) || hd=$hy
				case $hg in "$hd"/*) ;; *) hc_fail="$hc_fail; relay runs the release in $hy: got ${hg:-nothing}" ;; esac
			fi
			;;
		rb)
			hg=$(section "$1" "$2" ss | grep -v '^ESTAB' | grep -F "pid=$hc_pid,")
			if [ -z "$hc_pid" ] || [ -z "$hg" ]; then
				hc_fail="$hc_fail; ss rb: no socket of the relay on its port"
			elif printf '%s\n' "$hg" | grep -v -q -F "rb$hx,"; then
				hg=$(printf '%s\n' "$hg" | grep -o 'rb[0-9]*' | tr '\n' ' ')
				hc_fail="$hc_fail; ss rb: got ${hg% }, want rb$hx"
			fi
			;;
		*) hc_fail="$hc_fail; unknown check $hk" ;;
		esac
	done <"$win/checks"
	hc_fail=${hc_fail#; }
}

# serve: answer requests from stdin until it ends. In the session the
# answers go to stdout; in the window's process ($answers set) each goes
# to a file of its own, numbered on from $nans, which the session relays.
# serve notes the first request that fails (stop_at, its number among the
# requests served; stop_msg, what it said).
serve() {
	skipping='' stop_at='' stop_msg='' served=0
	while IFS= read -r line; do
		IFS=$tab read -r op jmode data_left argv_left a b c d e f g h <<EOF
$line
EOF
		# The payload's sizes must be numbers, or the stream cannot be kept
		# in step: the agent stops.
		case $data_left:$argv_left in
		*[!0-9:]* | :* | *:)
			printf 'ERR bad request line\n'
			exit 2
			;;
		esac
		served=$((served + 1))
		if [ -n "$answers" ]; then
			nans=$((nans + 1))
			# N.done, made once N is written whole, publishes N: a
			# redirection, where a rename was a program an answer.
			request >"$answers/$nans"
			: >"$answers/$nans.done"
			wake "$win/doze.session"
		else
			request
		fi
		# What the primitive left of its payload is read and dropped.
		[ "$data_left" -gt 0 ] && read_n "$data_left" >/dev/null
		while [ "$argv_left" -gt 0 ]; do
			IFS= read -r _ || exit 2
			argv_left=$((argv_left - 1))
		done
	done
}

# request: carry out the request read (op, its journal mode, a b c d e f g h).
request() {
	# JOURNAL: 1, note the change, and fail if the journal cannot; 2 (an
	# undo), note it if the journal can.
	case $jmode in 1 | 2) done_op_after=1 ;; *) done_op_after='' jmode='' ;; esac
	fn=
	case $op in
	'' | *[!a-z-]*) ;;
	*)
		fn=p_$op
		while :; do
			case $fn in *-*) fn=${fn%%-*}_${fn#*-} ;; *) break ;; esac
		done
		;;
	esac
	# The window's process carries out a window's primitives, nothing of
	# the session's.
	if [ -n "$answers" ]; then
		case $op in lock | unlock | sync | detach | verdict | begin | commit | clear | keep | fetch | prune) fn= ;; esac
	fi
	was=$skipping
	if [ -n "$skipping" ] && [ "$op" != sync ] && [ "$op" != unlock ]; then
		printf 'SKIP\n'
	elif [ -n "$fn" ] && command -v "$fn" >/dev/null 2>&1; then
		"$fn"
	else
		err "unknown request $op"
	fi
	if [ -z "$was" ] && [ -n "$skipping" ] && [ -z "$stop_at" ]; then
		stop_at=$served stop_msg=$msg
	fi
}

answers=
nans=0
if [ "${4:-}" = window ]; then
	shift 4
	window_main "$@"
	exit 0
fi
IFS= read -r first || exit 0
IFS=$tab read -r cmd owner wait_s <<EOF
$first
EOF
if [ "$cmd" = receipts ]; then
	# Read-only, without the lock (history --hosts): one answer, then exit.
	# Only where root alone could have written (a FIFO or a symlink swapped
	# in between a check and a read would hang it or read another file):
	# the state folder and every folder above it as lock checks them, and
	# receipts/ root's alone, not a symlink. Nothing is made: a host
	# without them has no receipts.
	a=$owner
	if [ -d "$state" ] && ! safe_dir_v "$state"; then
		printf 'UNSAFE %s\n' "$(clean "$why")"
	elif [ -d "$state" ] && { [ -e "$state/receipts" ] || [ -L "$state/receipts" ]; } && ! root_dirs "$state/receipts"; then
		printf 'UNSAFE %s/receipts is not a folder that belongs to root and only root can write\n' "$state"
	else
		p_receipts
	fi
	exit 0
fi
[ "$cmd" = lock ] || {
	printf 'ERR the first request must be lock\n'
	exit 2
}
safe_dir_v "$state" || {
	printf 'UNSAFE %s\n' "$(clean "$why")"
	exit 77
}
# The folders in it that earlier runs made are written in too (receipts,
# the stage): root's alone as well, or a user that owns one (a service
# whose StateDirectory= was pointed here) could plant a symlink a receipt
# is then written through. Nobody else can add one here while the lock is
# held: STATE_DIR is root's alone.
for d in "$state/receipts" "$state/stage"; do
	if { [ -e "$d" ] || [ -L "$d" ]; } && ! root_dirs "$d"; then
		printf 'UNSAFE %s is not a folder that belongs to root and only root can write\n' "$d"
		exit 77
	fi
done
# The runtime folder too (made, root's alone all the way up, else refused).
safe_dir_v "$windows" || {
	printf 'UNSAFE %s\n' "$(clean "$why")"
	exit 77
}
exec 9>>"$state/lock" || {
	printf 'UNSAFE cannot open %s/lock\n' "$state"
	exit 77
}
# With a wait (relayctl back after a lost connection, whose window may
# still be finishing on the host), up to that many seconds.
case ${wait_s:-} in '' | *[!0-9]*) wait_s=0 ;; esac
if ! flock -n 9 && { [ "$wait_s" = 0 ] || ! flock -w "$wait_s" 9; }; then
	printf 'BUSY %s\n' "$(clean "$(head -c 2000 "$state/lock.owner" 2>/dev/null)")"
	exit 75
fi
# The lock is free: whoever held it is gone (flock dies with its process),
# so it is ours. A run that died leaves its owner file (and its journal,
# which relayctl reads with the observe behind this request): report it.
dead=
[ -s "$state/lock.owner" ] && dead=$(clean "$(head -c 2000 "$state/lock.owner")")
printf '%s\n' "$owner" >"$state/lock.owner"
locked=1
if [ -n "$dead" ]; then printf 'LOCKED %s\n' "$dead"; else printf 'LOCKED\n'; fi

trap session_gone EXIT
serve
exit 0

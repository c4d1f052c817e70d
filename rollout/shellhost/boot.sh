# shellcheck shell=sh
# relayctl's bootstrap: the first thing a session runs on a host, as
#   sh -c BOOT relayctl-boot STATE_DIR SHAS serve [if-state]
#   sh -c BOOT relayctl-boot STATE_DIR SHAS install SHA256 SIZE ENCODING [BASE]
# SHAS are the sha256s of relayctl's host agent, one for each machine
# relayctl carries it for (MACHINE=SHA256, comma-separated). The agent
# lives in STATE_DIR/agent/SHA256, a name its bytes must hash to, in
# folders root alone can change, as written and as resolved. serve execs
# it there once its sha256 is checked, or answers NEED MACHINE KEPT GZIP
# (the agents this host keeps, a patch's possible bases; whether it has
# gzip) and exits 3, or UNSAFE WHY and exits 77; with if-state (a
# read-only call) a host without STATE_DIR answers NONE: it has nothing to
# read, and nothing is made there for it. install reads the agent's
# bytes in ENCODING (raw, gzip, or zstd-patch from the kept agent BASE,
# which decodes it itself) from stdin, checks its sha256 and puts it in
# place: INSTALLED, or FAILED WHY, or UNSAFE WHY.
set -u
umask 077
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
LC_ALL=C
export LC_ALL
state=$1 shas=$2 mode=$3
shift 3
dir=$state/agent
nl='
'

# ups_v PATH: / and every folder from it down to PATH, one a line, in ups_.
ups_v() {
	ups_=/ p_='' r_=${1#/}
	while [ -n "$r_" ]; do
		p_=$p_/${r_%%/*}
		ups_="$ups_$nl$p_"
		case $r_ in */*) r_=${r_#*/} ;; *) r_= ;; esac
	done
}

# root_only FILE: each folder above FILE, as written and as resolved, and
# FILE itself (a regular file) belong to root and neither their group nor
# others may write them; else bad_ names the first that does not (and how
# it was reached). One stat for all of them.
root_only() {
	bad_=$1 ro_f=$1
	ups_v "${1%/*}"
	ro_w=$ups_
	ro_real=$(cd -P -- "${1%/*}" 2>/dev/null && pwd -P) || return 1
	ups_v "$ro_real"
	set -f
	IFS=$nl
	# shellcheck disable=SC2086 # one path a line, globbing off
	set -- $ro_w
	ro_nw=$#
	# shellcheck disable=SC2086 # one path a line, globbing off
	set -- $ro_w $ups_ "$ro_f"
	ro_st=$(stat -c '%u %a %F' -- "$@" 2>/dev/null)
	ro_rc=$?
	IFS=' 	
'
	set +f
	[ "$ro_rc" = 0 ] || return 1
	ro_i=0
	while IFS= read -r ro_l; do
		ro_i=$((ro_i + 1))
		bad_=$1
		[ "$ro_i" -le "$ro_nw" ] || [ $# = 1 ] || bad_="$1 (through a symlink in $state)"
		shift
		case $ro_l in
		"0 "*[0145][0145]" directory" | "0 "*" symbolic link") [ $# -gt 0 ] || return 1 ;;
		"0 "*[0145][0145]" regular file") [ $# = 0 ] || return 1 ;;
		*) return 1 ;;
		esac
	done <<EOF
$ro_st
EOF
	[ $# = 0 ]
}

# sum FILE: its sha256, by openssl where the host has it (it uses the
# CPU's SHA instructions: a third of sha256sum's CPU for the 8 MB agent,
# which every session hashes), else by sha256sum.
sum() {
	if command -v openssl >/dev/null 2>&1 && sum_=$(openssl dgst -sha256 -r -- "$1" 2>/dev/null); then
		sum_=${sum_%% *}
		case $sum_ in *[!0-9a-f]*) ;; *) [ ${#sum_} != 64 ] || { printf '%s' "$sum_"; return 0; } ;; esac
	fi
	sum_=$(sha256sum -- "$1" 2>/dev/null) || return 1
	printf '%s' "${sum_%% *}"
}

# kept: the agents this host keeps, comma-separated (- for none).
kept() {
	kp_=
	for f in "$dir"/*; do
		n_=${f##*/}
		case $n_ in *[!0-9a-f]*) continue ;; esac
		[ ${#n_} = 64 ] && [ -f "$f" ] && [ ! -L "$f" ] && kp_="$kp_${kp_:+,}$n_"
	done
	printf '%s' "${kp_:--}"
}

case $mode in
serve)
	old_ifs=$IFS
	IFS=,
	for ms in $shas; do
		IFS=$old_ifs
		a=$dir/${ms#*=}
		[ -f "$a" ] || continue
		if ! root_only "$a"; then
			echo "UNSAFE $bad_ is not owned by root or is writable by its group or others"
			exit 77
		fi
		[ "$(sum "$a")" = "${ms#*=}" ] || continue
		# shellcheck disable=SC2093 # a failed exec ends the shell, its status says why
		exec "$a" serve "$state"
	done
	IFS=$old_ifs
	if [ "${1:-}" = if-state ] && ! [ -e "$state" ] && ! [ -L "$state" ]; then
		echo NONE
		exit 0
	fi
	g=-
	command -v gzip >/dev/null 2>&1 && g=gzip
	echo "NEED $(uname -m) $(kept) $g"
	exit 3
	;;
install)
	want=$1 size=$2 enc=$3 base=${4:-}
	case $want$base in *[!0-9a-f]*)
		echo "FAILED bad sha256"
		exit 2
		;;
	esac
	case $size in '' | *[!0-9]*)
		echo "FAILED bad size"
		exit 2
		;;
	esac
	mkdir -p -- "$dir" 2>/dev/null
	echo >"$dir/.probe" 2>/dev/null
	if ! root_only "$dir/.probe"; then
		rm -f -- "$dir/.probe"
		echo "UNSAFE $bad_ is not owned by root or is writable by its group or others"
		exit 77
	fi
	rm -f -- "$dir/.probe"
	if [ "$enc" = zstd-patch ]; then
		b=$dir/$base
		if [ -f "$b" ] && root_only "$b" && [ "$(sum "$b")" = "$base" ]; then
			exec "$b" install "$state" "$want" "$size" zstd-patch
		fi
		head -c "$size" >/dev/null
		echo "FAILED the patch's base $base is not kept here"
		exit 1
	fi
	t=$dir/.new.$$
	rm -f -- "$t"
	case $enc in
	gzip) head -c "$size" | gzip -dc 2>/dev/null | head -c 67108864 >"$t" ;;
	raw) head -c "$size" >"$t" ;;
	*)
		head -c "$size" >/dev/null
		echo "FAILED $enc is not a form this host takes"
		exit 2
		;;
	esac
	wrote=$?
	if [ "$wrote" = 0 ] && [ "$(sum "$t")" = "$want" ] && chmod 0700 -- "$t" && mv -f -- "$t" "$dir/$want"; then
		echo INSTALLED
		exit 0
	fi
	rm -f -- "$t"
	if [ "$wrote" != 0 ]; then
		echo "FAILED cannot write relayctl's agent in $dir (a full disk?)"
	else
		echo "FAILED the agent received does not hash to $want"
	fi
	exit 1
	;;
esac
echo "FAILED unknown mode $mode"
exit 2

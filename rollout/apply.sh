# relayctl apply helper, run on the host as: sh -c SCRIPT relayctl SUBCOMMAND STATE_DIR ...
# It is a constant of relayctl; everything that comes from a spec reaches it
# as data (quoted arguments, or files read with `read -r`), never as code.
#
#   lock STATE OWNER [break]  hold the host lock until stdin closes
#   stage STATE               receive files on stdin, check them, back up
#   run STATE STEPS           run a staged step list (the window, or rollback)
#   clear STATE               archive an unfinished run's journal and stage
#   commit STATE NAME OUTCOME file the journal and the receipt (on stdin)
#
# Progress goes to stdout as lines "STEP kind key", "DONE kind", "FAIL kind msg",
# "CLOCK ns"; the journal ($STATE/journal) records each step before and after.
set -u
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
sub=$1 state=$2
shift 2
journal=$state/journal
stage=$state/stage

now() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }
jlog() { printf '%s %s\n' "$(now)" "$*" >>"$journal"; }
say() { printf '%s\n' "$*"; }
norm() { printf '%s' "$1" | tr -s ' \t\n' '   ' | sed 's/^ //; s/ $//'; }
step=none
fail() {
	jlog "fail $step: $*"
	say "FAIL $step $*"
	exit 1
}

# runargv FILE: run the command whose words are the lines of FILE, as they
# are: no eval, no word splitting, no globbing.
runargv() {
	argv_file=$1
	set --
	while IFS= read -r w; do set -- "$@" "$w"; done <"$argv_file"
	"$@"
}

case $sub in
lock)
	owner=$1
	mode=${2:-}
	mkdir -p "$state" || exit 1
	exec 9>>"$state/lock"
	if ! flock -n 9; then
		say "BUSY"
		cat "$state/lock.owner" 2>/dev/null
		exit 75
	fi
	# The lock is free, but a run that died keeps its owner file: report it.
	if [ -s "$state/lock.owner" ] && [ "$mode" != break ]; then
		say "STALE"
		cat "$state/lock.owner"
		[ -s "$journal" ] && printf 'JOURNAL %s\n' "$(tail -n 1 "$journal")"
		exit 76
	fi
	printf '%s\n' "$owner" >"$state/lock.owner"
	say "LOCKED"
	# Held until relayctl says release (clean) or the connection drops (the
	# owner file then stays behind for the next run to report).
	while IFS= read -r line; do
		if [ "$line" = release ]; then
			rm -f "$state/lock.owner"
			say "RELEASED"
			exit 0
		fi
	done
	exit 0
	;;

stage)
	# stdin: "FILE name size mode" lines, each followed by size bytes.
	mkdir -p "$state/receipts" || fail "cannot create $state/receipts"
	rm -rf "$stage" && mkdir -p "$stage" || fail "cannot create $stage"
	while IFS=' ' read -r tag name size; do
		[ "$tag" = FILE ] || break
		case $name in *[!A-Za-z0-9._-]*) fail "bad staged name" ;; esac
		head -c "$size" >"$stage/$name" || fail "receive $name"
		got=$(wc -c <"$stage/$name" | tr -d ' ')
		[ "$got" = "$size" ] || fail "received $got of $size bytes of $name"
	done
	[ -f "$stage/manifest" ] || fail "no manifest staged"
	# manifest lines: kind<TAB>a<TAB>b<TAB>c
	tab=$(printf '\t')
	while IFS=$tab read -r kind a b c; do
		step=$kind
		jlog "start stage $kind $a"
		say "STEP $kind $a"
		case $kind in
		begin)
			jlog "begin plan=$a checksum=$b"
			;;
		upload-release) # a=dir b=sha256 c=staged name
			mkdir -p "$a.relayctl-new" || fail "mkdir $a.relayctl-new"
			mv -f "$stage/$c" "$a.relayctl-new/relayd" && chmod 0755 "$a.relayctl-new/relayd" || fail "place release"
			sum=$(sha256sum "$a.relayctl-new/relayd" | cut -d' ' -f1)
			[ "$sum" = "$b" ] || fail "release sha256 on the host is $sum, want $b"
			rm -rf "$a" && mv -T "$a.relayctl-new" "$a" || fail "install release folder $a"
			;;
		check-release) # a=dir b=sha256
			sum=$(sha256sum "$a/relayd" 2>/dev/null | cut -d' ' -f1)
			[ "$sum" = "$b" ] || fail "the release already in $a has sha256 ${sum:-none}, want $b"
			;;
		stage-file) # a=target b=staged name: put beside the target, not yet in place
			mkdir -p "$(dirname "$a")" || fail "mkdir for $a"
			cp "$stage/$b" "$a.relayctl-new" || fail "write $a.relayctl-new"
			;;
		backup-file) # a=path b=backup name
			if [ -e "$a" ]; then cp -p "$a" "$stage/$b" || fail "back up $a"; else : >"$stage/$b.absent"; fi
			;;
		backup-link) # a=link b=backup name
			if [ -L "$a" ]; then readlink "$a" >"$stage/$b" || fail "read $a"; else : >"$stage/$b.absent"; fi
			;;
		*) fail "unknown stage step $kind" ;;
		esac
		jlog "done stage $kind"
		say "DONE $kind"
	done <"$stage/manifest"
	;;

run)
	# The window (or the rollback): a staged step list, in order.
	list=$1
	tab=$(printf '\t')
	[ -f "$stage/$list" ] || fail "no staged step list $list"
	jlog "start $list"
	while IFS=$tab read -r kind a b c; do
		step=$kind
		jlog "start $kind $a"
		say "STEP $kind $a"
		case $kind in
		set-sysctl) # a=key b=value
			f=/proc/sys/$(printf '%s' "$a" | tr . /)
			[ -e "$f" ] || fail "$a does not exist"
			printf '%s\n' "$b" 2>/dev/null >"$f"
			# A sysctl's exit status proves nothing (DESIGN.md): read it back.
			got=$(cat "$f")
			[ "$(norm "$got")" = "$(norm "$b")" ] || fail "$a: read back $(norm "$got"), want $(norm "$b")"
			;;
		move-file) # a=from b=to (atomic rename in one folder)
			mv -f "$a" "$b" || fail "rename $a to $b"
			;;
		restore-file) # a=path b=backup name
			if [ -e "$stage/$b.absent" ]; then
				rm -f "$a" || fail "remove $a"
			else
				cp -p "$stage/$b" "$a.relayctl-old" && mv -f "$a.relayctl-old" "$a" || fail "restore $a"
			fi
			;;
		remove-file) # a=path
			rm -f "$a" || fail "remove $a"
			;;
		set-link) # a=link b=target (a new link renamed over the old one)
			ln -sfn "$b" "$a.relayctl-new" && mv -T "$a.relayctl-new" "$a" || fail "point $a at $b"
			;;
		restore-link) # a=link b=backup name
			if [ -e "$stage/$b.absent" ]; then
				rm -f "$a" || fail "remove $a"
			else
				t=$(cat "$stage/$b")
				ln -sfn "$t" "$a.relayctl-new" && mv -T "$a.relayctl-new" "$a" || fail "point $a back at $t"
			fi
			;;
		restart) # a=systemd|command b=unit
			say "CLOCK $(date +%s%N)"
			if [ "$a" = systemd ]; then
				systemctl restart "$b" >"$stage/restart.log" 2>&1 || fail "systemctl restart $b: $(tail -c 300 "$stage/restart.log")"
			else
				runargv "$stage/stop.argv" >"$stage/restart.log" 2>&1 || fail "stop: $(tail -c 300 "$stage/restart.log")"
				runargv "$stage/start.argv" >>"$stage/restart.log" 2>&1 || fail "start: $(tail -c 300 "$stage/restart.log")"
			fi
			;;
		stop) # a=systemd|command b=unit
			if [ "$a" = systemd ]; then
				systemctl stop "$b" >"$stage/restart.log" 2>&1 || fail "systemctl stop $b"
			else
				runargv "$stage/stop.argv" >"$stage/restart.log" 2>&1 || fail "stop: $(tail -c 300 "$stage/restart.log")"
			fi
			;;
		*) fail "unknown step $kind" ;;
		esac
		jlog "done $kind $a"
		say "DONE $kind"
	done <"$stage/$list"
	jlog "done $list"
	;;

clear)
	# An unfinished run's journal and staged files, kept beside the receipts
	# once relayctl was told (or the journal showed) it is safe to go on.
	old=$state/receipts/abandoned-$(date -u +%Y%m%dT%H%M%SZ)
	mkdir -p "$state/receipts" || fail "mkdir receipts"
	if [ -f "$journal" ]; then mv "$journal" "$old.journal" || fail "archive the journal"; fi
	if [ -d "$stage" ]; then mv "$stage" "$old.stage" || fail "archive $stage"; fi
	say "CLEARED $old"
	;;

commit)
	# stdin: the receipt (JSON). The journal is filed beside it.
	name=$1
	outcome=$2
	case $name in *[!A-Za-z0-9._-]*) fail "bad receipt name" ;; esac
	mkdir -p "$state/receipts" || fail "mkdir receipts"
	cat >"$state/receipts/$name.json.relayctl-new" && mv -f "$state/receipts/$name.json.relayctl-new" "$state/receipts/$name.json" || fail "write receipt"
	jlog "end $outcome"
	mv -f "$journal" "$state/receipts/$name.journal" || fail "file the journal"
	rm -rf "$stage"
	say "COMMITTED"
	;;

*)
	say "FAIL usage unknown subcommand $sub"
	exit 2
	;;
esac

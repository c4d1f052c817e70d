package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/sshrun"
)

func historyCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "list the runs of a plan, a spec or a host, newest first: who ran them, with which relayctl and key, and how each host ended",
		ArgsUsage: "[PLAN|SPEC]",
		Description: `Lists runs (apply, resume, stage), newest first, each with its run id,
kind, plan, the release it puts the hosts on, start, how its hosts ended,
the operator (user and machine), the relayctl version and commit, and the
SSH keys the hosts accepted.

From the local records (the default): a PLAN's record beside it,
PLAN.receipts/, where every run keeps its receipt under a name of its own;
a SPEC's runs are those of every record in --dir whose plan has the spec's
name; --host NAME keeps the runs that reached or tried NAME, and gives that
host's own line (outcome, state, key).

With --hosts, from the hosts' own receipts instead (under
/var/lib/relayctl/receipts, each host keeps its newest 100): each host of
the PLAN or SPEC, or the --host NAME, is read over SSH, read-only and
without its lock (one round trip, while an apply may be running), a row per
receipt; a host that cannot be read is listed after, with why. A --host
NAME alone is dialled where the newest plan in --dir dials it; one no plan
there names, only when it is an IP address or ssh_config names it.

With --json, one document on stdout (format_version 1, docs/json.md).

Exit status: 0, also when there are no runs; 1 on an error, or with --hosts
when a host could not be read.

Examples:
   relayctl history ashburn.plan
   relayctl history ashburn.plan --json | jq '.runs[0]'
   relayctl history plans/examples/ashburn-rcvbuf.yaml --dir .
   relayctl history --host relay-ash-1
   relayctl history ashburn.plan --hosts --host relay-ash-1`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "host", Usage: "only the runs of host `NAME` (with --hosts and no PLAN or SPEC: read NAME where the newest plan in --dir dials it)"},
			&cli.BoolFlag{Name: "hosts", Usage: "read the hosts' own receipts over SSH instead of the local records"},
			&cli.StringFlag{Name: "dir", Value: ".", Usage: "the `FOLDER` whose plans' records a SPEC or --host alone is looked up in"},
			&cli.IntFlag{Name: "last", Value: 20, Usage: "at most `N` runs (per host with --hosts, at most 100); 0 for every one kept"},
			&cli.BoolFlag{Name: "json", Usage: "print the runs as JSON on stdout (docs/json.md)"},
			allowProgramFlag(),
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runHistory(c, e) },
	}
}

// HistoryFormatVersion is the layout version of history --json,
// documented in docs/json.md.
const HistoryFormatVersion = 1

// historyReport is history --json.
type historyReport struct {
	FormatVersion int           `json:"format_version"`
	Source        string        `json:"source"` // "local" or "hosts"
	Runs          []historyRun  `json:"runs"`
	Unread        []historyMiss `json:"unread,omitempty"` // --hosts: the hosts that could not be read
}

// historyRun is one run: from a local record, every host it covered
// (Hosts only with --host); from a host, that host's receipt.
type historyRun struct {
	RunID    string `json:"run_id"`
	Kind     string `json:"kind"`
	Plan     string `json:"plan"`
	Checksum string `json:"plan_checksum"`
	// Release is the release the run's plan leaves its hosts on (the
	// receipt's release; with --hosts, that host's release_planned):
	// absent for a plan that ships none, or a receipt from before it
	// was recorded.
	Release  string            `json:"release,omitempty"`
	Started  string            `json:"started,omitempty"`
	Ended    string            `json:"ended,omitempty"`
	Operator *rollout.Operator `json:"operator,omitempty"`
	Relayctl *rollout.Build    `json:"relayctl,omitempty"`
	Approval *rollout.Approval `json:"approval,omitempty"`
	Outcomes map[string]int    `json:"outcomes"`
	Keys     []string          `json:"ssh_keys"` // the keys its hosts accepted, each once
	Hosts    []historyHost     `json:"hosts,omitempty"`
	Receipt  string            `json:"receipt"` // the local record, or the receipt's name on the host
}

// historyHost is one host's line of a run.
type historyHost struct {
	Host    string               `json:"host"`
	Outcome string               `json:"outcome"`
	State   string               `json:"state"`
	Reason  string               `json:"reason,omitempty"`
	SSH     *rollout.SSHIdentity `json:"ssh,omitempty"`
	Started string               `json:"started,omitempty"`
	Ended   string               `json:"ended,omitempty"`
}

// historyMiss is a host whose receipts could not be read.
type historyMiss struct {
	Host  string `json:"host"`
	Error string `json:"error"`
}

func runHistory(c *cli.Context, e *env) error {
	if c.NArg() > 1 || c.NArg() == 0 && c.String("host") == "" {
		return withHint(errors.New("history needs a PLAN, a SPEC or --host NAME"), "relayctl history ashburn.plan")
	}
	if n := c.Int("last"); n < 0 {
		return fmt.Errorf("--last %d: want 0 (every run kept) or more", n)
	}
	scope, err := historyScope(c)
	if err != nil {
		return err
	}
	rep := historyReport{FormatVersion: HistoryFormatVersion, Source: "local", Runs: []historyRun{}}
	if c.Bool("hosts") {
		rep.Source = "hosts"
		rep.Runs, rep.Unread = hostHistory(c, scope)
	} else if rep.Runs, err = localHistory(scope, c.String("dir")); err != nil {
		return err
	}
	sortRuns(rep.Runs)
	if n := c.Int("last"); n > 0 && !c.Bool("hosts") && len(rep.Runs) > n {
		rep.Runs = rep.Runs[:n]
	}
	if c.Bool("json") {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		printHistory(e.stdout, rep)
	}
	if len(rep.Unread) > 0 {
		return &exitCode{code: 1, err: fmt.Errorf("%d host(s) could not be read: %s", len(rep.Unread), plans.Visible(rep.Unread[0].Host+": "+rep.Unread[0].Error))}
	}
	return nil
}

// scope is what history lists: a plan's runs, a spec's, or a host's.
type scope struct {
	plan     string            // a PLAN file
	name     string            // the plan's (or spec's) name; "" for every plan
	checksum string            // a PLAN's checksum: its host receipts
	hosts    []string          // the hosts --hosts reads
	targets  map[string]string // where they are dialled, when not by name
	host     string            // --host
	last     int
}

// historyScope reads the PLAN or SPEC given. Of a plan it reads only its
// name, checksum and hosts, whatever its format: history reads, it does
// not apply.
func historyScope(c *cli.Context) (scope, error) {
	sc := scope{host: c.String("host"), last: c.Int("last")}
	if c.NArg() == 0 {
		sc.hosts = []string{sc.host}
		if !c.Bool("hosts") {
			return sc, nil
		}
		target, err := hostWhere(c, sc.host, c.String("dir"))
		if target != "" {
			sc.targets = map[string]string{sc.host: target}
		}
		return sc, err
	}
	arg := c.Args().First()
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		s, err := readSpec(arg, inventoryAllow(c))
		if err != nil {
			return sc, err
		}
		sc.name, sc.hosts, sc.targets = s.Name, s.Hosts, s.Targets
	} else {
		data, err := readPlanFile(arg)
		if errors.Is(err, fs.ErrNotExist) && !c.Bool("hosts") {
			if st, serr := os.Stat(runsDir(arg)); serr == nil && st.IsDir() {
				sc.plan = arg // the plan is gone, its record is not
				return sc, nil
			}
		}
		if err != nil {
			return sc, err
		}
		var p struct {
			Name     string `json:"name"`
			Checksum string `json:"checksum"`
			Hosts    []struct {
				Host   string `json:"host"`
				Target string `json:"target"`
			} `json:"hosts"`
		}
		if err := json.Unmarshal(data, &p); err != nil || p.Name == "" {
			return sc, withHint(fmt.Errorf("%s: %w", arg, plans.ErrNotAPlan), notAPlanHint(arg))
		}
		sc.plan, sc.name, sc.checksum, sc.targets = arg, p.Name, p.Checksum, map[string]string{}
		for _, h := range p.Hosts {
			sc.hosts = append(sc.hosts, h.Host)
			if h.Target != "" {
				sc.targets[h.Host] = h.Target
			}
		}
	}
	if sc.host != "" {
		sc.hosts = []string{sc.host}
	}
	return sc, nil
}

// hostWhere is where --hosts dials a --host given without a PLAN or SPEC:
// where the newest plan in dir that names it dials it (its target; ""
// for a host dialled by its name). A host no plan there names is dialled
// by its name only when that is an IP address or ssh_config names it: an
// inventory's name is often neither, and its lookup would ask DNS about
// a name the fleet does not go by.
func hostWhere(c *cli.Context, host, dir string) (string, error) {
	target, found := recordedTarget(host, dir)
	if found {
		return target, nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "", nil
	}
	if t, err := sshrun.Resolve(host, sshOptions(c)); err == nil && t.HostName != host {
		return "", nil
	}
	return "", withHint(fmt.Errorf("history --hosts --host %s: no plan in %s names %s, and ssh_config does not, so where it is dialled is not known (an inventory's name is not looked up in DNS)", host, dir, host),
		fmt.Sprintf("give the plan or spec it is in: relayctl history PLAN --hosts --host %s, or --dir the folder of its plans", host))
}

// recordedTarget is the target of host in the newest plan file in dir
// that names it, and whether one does.
func recordedTarget(host, dir string) (string, bool) {
	ents, _ := os.ReadDir(dir)
	var newest time.Time
	target, found := "", false
	for i, e := range ents {
		if i == 10000 || !e.Type().IsRegular() || planHead.Find(readHead(filepath.Join(dir, e.Name()), 256)) == nil {
			continue
		}
		info, err := e.Info()
		data, rerr := os.ReadFile(filepath.Join(dir, e.Name()))
		var p struct {
			Hosts []struct{ Host, Target string } `json:"hosts"`
		}
		if err != nil || rerr != nil || json.Unmarshal(data, &p) != nil || found && !info.ModTime().After(newest) {
			continue
		}
		for _, h := range p.Hosts {
			if h.Host == host {
				target, found, newest = h.Target, true, info.ModTime()
			}
		}
	}
	return target, found
}

// localHistory reads the runs in the local records: the PLAN's, or every
// record in dir (for a spec's name, or a host).
func localHistory(sc scope, dir string) ([]historyRun, error) {
	plansWithRecords := []string{sc.plan}
	if sc.plan == "" {
		found, err := filepath.Glob(filepath.Join(dir, "*.receipts"))
		if err != nil {
			return nil, err
		}
		plansWithRecords = nil
		for _, d := range found {
			plansWithRecords = append(plansWithRecords, strings.TrimSuffix(d, ".receipts"))
		}
	}
	runs := []historyRun{}
	for _, plan := range plansWithRecords {
		files, err := planRuns(plan)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			r, err := localRun(f, sc.host)
			if err != nil {
				return nil, err
			}
			if sc.name != "" && r.Plan != sc.name || sc.host != "" && len(r.Hosts) == 0 {
				continue
			}
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// localRun is a run from its record; with host set, Hosts is that host's
// line (none when the run did not cover it).
func localRun(f runFile, host string) (historyRun, error) {
	r := historyRun{Outcomes: map[string]int{}, Keys: []string{}, Receipt: f.Path}
	keys := map[string]bool{}
	head, err := readRun(f.Path, func(h historyHost) {
		r.Outcomes[h.Outcome]++
		if h.SSH != nil && h.SSH.Key != "" && !keys[h.SSH.Key] {
			keys[h.SSH.Key] = true
			r.Keys = append(r.Keys, h.SSH.Key)
		}
		if host != "" && h.Host == host {
			r.Hosts = append(r.Hosts, h)
		}
	})
	if err != nil {
		return r, err
	}
	r.RunID, r.Kind = orElse(head.ID, f.ID), orElse(head.Kind, f.Kind)
	r.Plan, r.Checksum, r.Release, r.Started, r.Ended = head.Plan, head.Checksum, head.Release, head.Started, head.Ended
	r.Operator, r.Relayctl, r.Approval = head.Operator, head.Relayctl, head.Approval
	return r, nil
}

func orElse(s, other string) string {
	if s != "" {
		return s
	}
	return other
}

// runHead is what history reads of a receipt besides its hosts.
type runHead struct {
	FormatVersion int    `json:"format_version"`
	Plan          string `json:"plan"`
	Checksum      string `json:"plan_checksum"`
	Release       string `json:"release"`
	rollout.RunInfo
	Started  string            `json:"started"`
	Ended    string            `json:"ended"`
	Approval *rollout.Approval `json:"approval"`
}

// readRun reads a local receipt (any format relayctl wrote), calling
// each with every host's line as it comes: a receipt of 10,000 hosts is
// never held whole.
func readRun(path string, each func(historyHost)) (runHead, error) {
	var head runHead
	f, err := os.Open(path)
	if err != nil {
		return head, fmt.Errorf("read receipt: %w", err)
	}
	defer f.Close()
	fail := func(err error) (runHead, error) {
		return head, fmt.Errorf("%s: not a receipt relayctl wrote: %w", path, err)
	}
	dec := json.NewDecoder(f)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fail(errors.New("not a JSON object"))
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		if k != "hosts" {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return fail(err)
			}
			fields[fmt.Sprint(k)] = v
			continue
		}
		if err := readHosts(dec, each); err != nil {
			return fail(err)
		}
	}
	b, _ := json.Marshal(fields)
	if err := json.Unmarshal(b, &head); err != nil {
		return fail(err)
	}
	if head.FormatVersion < 1 || head.FormatVersion > rollout.ReceiptFormatVersion {
		return fail(fmt.Errorf("format_version %d (this relayctl reads 1 to %d)", head.FormatVersion, rollout.ReceiptFormatVersion))
	}
	return head, nil
}

// readHosts reads a receipt's hosts list, one host at a time.
func readHosts(dec *json.Decoder, each func(historyHost)) error {
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return errors.New("hosts is not a list")
	}
	for dec.More() {
		var h historyHost
		if err := dec.Decode(&h); err != nil {
			return err
		}
		if each != nil {
			each(h)
		}
	}
	_, err := dec.Token()
	return err
}

// hostHistory reads the receipts each host keeps, --parallel at a time:
// a row per receipt of the scope's plan (by checksum) or spec (by name),
// or every receipt with --host alone.
func hostHistory(c *cli.Context, sc scope) ([]historyRun, []historyMiss) {
	d, err := sshHosts(c, sc.targets)
	if err != nil {
		misses := []historyMiss{}
		for _, h := range sc.hosts {
			misses = append(misses, historyMiss{Host: h, Error: err.Error()})
		}
		return []historyRun{}, misses
	}
	n := sc.last
	if n <= 0 || n > rollout.HostReceiptsKept {
		n = rollout.HostReceiptsKept
	}
	var mu sync.Mutex
	runs, misses := []historyRun{}, []historyMiss{}
	sem := make(chan struct{}, max(1, c.Int("parallel")))
	var wg sync.WaitGroup
	for _, h := range sc.hosts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			files, err := rollout.ReadHostReceipts(c.Context, d, h, n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				misses = append(misses, historyMiss{Host: h, Error: err.Error()})
				return
			}
			for _, f := range files {
				if r, ok := hostReceiptRun(h, f, sc); ok {
					runs = append(runs, r)
				}
			}
		}()
	}
	wg.Wait()
	sort.Slice(misses, func(i, j int) bool { return misses[i].Host < misses[j].Host })
	return runs, misses
}

// hostReceiptRun is one receipt a host keeps, as a run, when it is of the scope.
// A receipt that does not decode is listed as such, not dropped: the host
// has it, and a reader should know.
func hostReceiptRun(host string, f rollout.HostFile, sc scope) (historyRun, bool) {
	r := historyRun{RunID: strings.TrimSuffix(f.Name, ".json"), Kind: "-", Outcomes: map[string]int{}, Keys: []string{}, Receipt: f.Name}
	var hr rollout.HostReceipt
	if err := json.Unmarshal(f.Data, &hr); err != nil {
		r.Hosts = []historyHost{{Host: host, Outcome: "unreadable", State: "the receipt does not decode: " + clipValue(err.Error())}}
		r.Outcomes["unreadable"] = 1
		return r, sc.checksum == "" && sc.name == ""
	}
	if sc.checksum != "" && hr.Checksum != sc.checksum || sc.name != "" && hr.Plan != sc.name {
		return r, false
	}
	if hh := hr.RunHeader; hh != nil {
		r.RunID, r.Kind = orElse(hh.ID, r.RunID), orElse(hh.Kind, r.Kind)
		r.Operator, r.Relayctl, r.Approval = hh.Operator, hh.Relayctl, hh.Approval
	}
	r.Plan, r.Checksum, r.Release, r.Started, r.Ended = hr.Plan, hr.Checksum, hr.ReleasePlanned, hr.Started, hr.Ended
	line := historyHost{Host: host, Outcome: string(hr.Outcome), State: hr.State, Reason: hr.Reason, SSH: hr.SSH, Started: hr.Started, Ended: hr.Ended}
	r.Hosts = []historyHost{line}
	r.Outcomes[line.Outcome] = 1
	if hr.SSH != nil && hr.SSH.Key != "" {
		r.Keys = []string{hr.SSH.Key}
	}
	return r, true
}

// sortRuns puts the newest run first (run ids begin with their time),
// a run's hosts by name.
func sortRuns(runs []historyRun) {
	sort.SliceStable(runs, func(i, j int) bool {
		if runs[i].RunID != runs[j].RunID {
			return runs[i].RunID > runs[j].RunID
		}
		return hostOf(runs[i]) < hostOf(runs[j])
	})
}

func hostOf(r historyRun) string {
	if len(r.Hosts) > 0 {
		return r.Hosts[0].Host
	}
	return ""
}

// printHistory is the table: a row per run (per host receipt with
// --hosts), then the hosts that could not be read.
func printHistory(w io.Writer, rep historyReport) {
	if len(rep.Runs) == 0 && len(rep.Unread) == 0 {
		fmt.Fprintln(w, "no runs recorded")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tKIND\tPLAN\tRELEASE\tSTARTED\tHOSTS\tOPERATOR\tRELAYCTL\tSSH KEY\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", plans.Visible(r.RunID), plans.Visible(r.Kind), plans.Visible(r.Plan), plans.Visible(orElse(r.Release, "-")), plans.Visible(orElse(r.Started, "-")),
			plans.Visible(hostsText(r)), plans.Visible(operatorText(r.Operator)), plans.Visible(buildText(r.Relayctl)), plans.Visible(keysText(r.Keys)))
	}
	tw.Flush()
	for _, m := range rep.Unread {
		fmt.Fprintf(w, "%s: not read: %s\n", plans.Visible(m.Host), plans.Visible(m.Error))
	}
}

// hostsText is how a run's hosts ended: the one host's outcome (and state
// when it is not as planned), or each outcome's count.
func hostsText(r historyRun) string {
	if len(r.Hosts) == 1 {
		h := r.Hosts[0]
		if h.State != rollout.StateAsPlanned && h.State != "" {
			return h.Host + " " + h.Outcome + " (" + clipValue(h.State) + ")"
		}
		return h.Host + " " + h.Outcome
	}
	var parts []string
	for _, o := range rollout.Outcomes {
		if n := r.Outcomes[string(o)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func operatorText(o *rollout.Operator) string {
	if o == nil {
		return "-"
	}
	s := o.Who() + " on " + o.Machine
	if o.SudoUser != "" {
		s += " (sudo by " + o.SudoUser + ")"
	}
	return s
}

func buildText(b *rollout.Build) string {
	if b == nil {
		return "-"
	}
	if b.Commit == "" {
		return b.Version
	}
	c, dirty := strings.CutSuffix(b.Commit, "-dirty")
	if len(c) > 12 {
		c = c[:12]
	}
	if dirty {
		c += "-dirty"
	}
	return b.Version + " (" + c + ")"
}

func keysText(keys []string) string {
	switch len(keys) {
	case 0:
		return "-"
	case 1:
		return keys[0]
	}
	return fmt.Sprintf("%s (and %d more)", keys[0], len(keys)-1)
}

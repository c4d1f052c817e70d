package main

// Uploads against the lab (package wire): the hosts' own gzip and zstd
// decode what relayctl sends over real SSH. A first release goes
// compressed; its upgrade goes as a zstd patch from the release the host
// keeps; a host without zstd gets gzip; a host whose kept release is not
// the one the plan knows, and a patch that does not decode, get the
// release compressed instead, said so; and whatever the host decoded is
// the reviewed release, its sha256 checked on the host.

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/uplink"
)

// hideZstd makes zstd vanish from a lab host: an empty file that is not
// executable mounted over it in the host's own mount namespace (the
// machine keeps its zstd).
func hideZstd(t *testing.T, h *lab.Host) {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "no-zstd")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	zstd, err := h.Exec(context.Background(), "sh", "-c", "command -v zstd")
	if err != nil {
		t.Fatalf("%s has no zstd to hide (apt-get install zstd): %v", h.Name, err)
	}
	if out, err := h.Exec(context.Background(), "mount", "--bind", empty, strings.TrimSpace(string(zstd))); err != nil {
		t.Fatalf("%s: hide zstd: %v %s", h.Name, err, out)
	}
	if out, err := h.Exec(context.Background(), "sh", "-c", "command -v zstd"); err == nil {
		t.Fatalf("%s still has zstd: %s", h.Name, out)
	}
}

// uploads are the receipt's upload of each host, by name.
func uploads(t *testing.T, file string) map[string]*rollout.UploadRecord {
	t.Helper()
	out := map[string]*rollout.UploadRecord{}
	for _, h := range readReceipt(t, file).Hosts {
		if h.Outcome != rollout.Applied {
			t.Errorf("%s: %s (%s)", h.Host, h.Outcome, h.Reason)
		}
		out[h.Host] = h.Upload
	}
	return out
}

// holdsRelease checks, on the host, that the release's folder and its
// store hold the release's bytes (sha256sum on the host), and that the
// relay runs it.
func (e *labEnv) holdsRelease(h *lab.Host, version string, release []byte) {
	e.t.Helper()
	sum := sha256.Sum256(release)
	sha := plans.SHA256(string(release))
	out, err := h.Exec(context.Background(), "sha256sum", "/opt/relay/releases/"+version+"/relayd", "/opt/relay/releases/.sha256/"+sha+"/relayd")
	if err != nil || strings.Count(string(out), sha+"  /") != 2 {
		e.t.Errorf("%s: the release on the host: %v\n%s; want sha256 %x", h.Name, err, out, sum)
	}
	pid, rb, _ := e.socket(h)
	exe, _ := h.Exec(context.Background(), "readlink", "/proc/"+strconv.Itoa(pid)+"/exe")
	if rb != 8388608 || strings.TrimSpace(string(exe)) != "/opt/relay/releases/"+version+"/relayd" {
		e.t.Errorf("%s: the relay runs %s with rb %d; want release %s at 8388608", h.Name, exe, rb, version)
	}
}

func TestLabUploadsPackedForEachHost(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 4), nil)
	first, err := os.ReadFile(lab.BuildRelayd(t, "1.8.0"))
	if err != nil {
		t.Fatal(err)
	}
	next, err := os.ReadFile(lab.BuildRelayd(t, "1.9.0"))
	if err != nil {
		t.Fatal(err)
	}
	hosts := e.lab.Hosts
	// The host agent decodes every form itself: a host without zstd takes
	// zstd and zstd patches as any other.
	hideZstd(t, hosts[1])

	// No release before in the hosts' stores: compressed.
	e.mustPlan(e.spec, e.plan)
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply 1.8.0: exit %d\n%s\n%s", code, out, errs)
	}
	up := uploads(t, e.plan+".receipt.json")
	for _, h := range hosts {
		want := uplink.Zstd
		if u := up[h.Name]; u == nil || u.Form != want || u.Bytes*100 > u.Size*45 || u.Size != int64(len(first)) {
			t.Errorf("%s: upload %+v; want %s, 45%% of the release's %d bytes at most", h.Name, u, want, len(first))
		}
		e.holdsRelease(h, "1.8.0", first)
	}

	// The upgrade: a patch from 1.8.0, which the hosts keep and relayctl
	// shipped, lab-2 without zstd too; lab-3's kept 1.8.0 changes after the
	// plan, so it is no base.
	spec, plan := e.specFor("lab-upgrade", hosts[:3], "")
	writeRelease(t, spec, "1.8.0", "1.9.0")
	e.mustPlan(spec, plan)
	review := mustRead(t, plan+".md")
	if !strings.Contains(review, "a zstd patch from the release the host keeps (sha256 `"+plans.SHA256(string(first))[:16]) ||
		strings.Contains(review, "gzip-compressed") || strings.Contains(review, "cannot decode") {
		t.Errorf("the review does not say each host's upload:\n%s", review)
	}
	base := "/opt/relay/releases/.sha256/" + plans.SHA256(string(first)) + "/relayd"
	if out, err := hosts[2].Exec(context.Background(), "sh", "-c", "printf x >> "+base); err != nil {
		t.Fatalf("change lab-3's kept release: %v %s", err, out)
	}
	code, out, errs := e.relayctl("apply", plan)
	if code != 0 {
		t.Fatalf("apply 1.9.0: exit %d\n%s\n%s", code, out, errs)
	}
	up = uploads(t, plan+".receipt.json")
	if u := up["lab-1"]; u == nil || u.Form != uplink.ZstdPatch || u.From != plans.SHA256(string(first)) || u.Bytes*10 > u.Size || len(u.Fallback) != 0 {
		t.Errorf("lab-1: upload %+v; want a patch from 1.8.0, a tenth of the release at most", u)
	}
	if u := up["lab-2"]; u == nil || u.Form != uplink.ZstdPatch {
		t.Errorf("lab-2: upload %+v; want a patch, though the host has no zstd", u)
	}
	if u := up["lab-3"]; u == nil || u.Form != uplink.Zstd || len(u.Fallback) != 1 || !strings.Contains(u.Fallback[0], "not the "+plans.SHA256(string(first))+" it was made from") {
		t.Errorf("lab-3: upload %+v; want zstd, the patch refused before its bytes", u)
	}
	if !strings.Contains(errs, "lab-3: upload: the zstd-patch form: the patch's base "+base) {
		t.Errorf("progress does not say lab-3's patch was refused:\n%s", errs)
	}
	for _, h := range hosts[:3] {
		e.holdsRelease(h, "1.9.0", next)
	}

	// A patch that does not decode (a damaged form in relayctl's cache,
	// whole by its own sha256): lab-4 decodes it, refuses it, and is sent
	// the release compressed, checked by its sha256 as any upload.
	spec, plan = e.specFor("lab-damaged", hosts[3:], "")
	writeRelease(t, spec, "1.8.0", "1.9.0")
	e.mustPlan(spec, plan)
	damageCachedPatch(t)
	code, out, errs = e.relayctl("apply", plan)
	if code != 0 {
		t.Fatalf("apply 1.9.0 with a damaged patch: exit %d\n%s\n%s", code, out, errs)
	}
	if u := uploads(t, plan+".receipt.json")["lab-4"]; u == nil || u.Form != uplink.Zstd || len(u.Fallback) != 1 || !strings.Contains(u.Fallback[0], "the zstd-patch form: zstd -d: ") {
		t.Errorf("lab-4: upload %+v; want zstd after the patch failed to decode", u)
	}
	e.holdsRelease(hosts[3], "1.9.0", next)
}

// writeRelease makes a spec ship the next release (lab.BuildRelayd's, by
// version).
func writeRelease(t *testing.T, spec, from, to string) {
	t.Helper()
	b := mustRead(t, spec)
	b = strings.Replace(b, "version: "+from, "version: "+to, 1)
	b = strings.Replace(b, lab.BuildRelayd(t, from), lab.BuildRelayd(t, to), 1)
	if err := os.WriteFile(spec, []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// damageCachedPatch flips a byte in the middle of the patch relayctl's
// cache keeps, and keeps it whole by its own sha256 (as a relayctl that
// made a wrong patch would have): apply sends it as it is.
func damageCachedPatch(t *testing.T) {
	t.Helper()
	forms, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "relayctl", "forms", "*.zstd-patch.*"))
	if len(forms) != 1 {
		t.Fatalf("patches in the cache: %v, want one", forms)
	}
	b, err := os.ReadFile(forms[0])
	if err != nil {
		t.Fatal(err)
	}
	form := b[sha256.Size:]
	form[len(form)/2] ^= 0xff
	sum := sha256.Sum256(form)
	if err := os.WriteFile(forms[0], append(sum[:], form...), 0o600); err != nil {
		t.Fatal(err)
	}
}

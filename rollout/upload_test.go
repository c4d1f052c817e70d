package rollout_test

// A release crosses the uplink in the smallest form each host can decode
// (package wire), as the plan said it would, and the receipt says what was
// sent: a patch from the release the host keeps, gzip where it has no
// zstd, the next form where the host cannot take the first.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	release "github.com/relayctl/relayctl/artifact"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
	"github.com/relayctl/relayctl/uplink"
)

// upgrade is a host that keeps release old in its store (an earlier apply
// put it there) and decodes decoders, and the cache that shipped old: an
// upgrade to release new.
type upgrade struct {
	old, new []byte
	sim      *rollouttest.Sim
	cache    *uplink.Cache
}

func newUpgrade(t *testing.T, decoders ...string) *upgrade {
	t.Helper()
	old, new, err := rollouttest.TwoReleases(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := uplink.OpenCache(filepath.Join(t.TempDir(), "relayctl"))
	if err != nil {
		t.Fatal(err)
	}
	cache.PutRelease(old)
	s := rollouttest.NewSim("h1")
	s.Decoders = decoders
	s.StoreRelease(old)
	return &upgrade{old: old, new: new, sim: s, cache: cache}
}

// planned is the plan of new for the host as it is now.
func (u *upgrade) planned(t *testing.T) *plans.Plan {
	t.Helper()
	spec, err := plans.ParseSpec("fake.yaml", []byte(fmt.Sprintf(fakeSpec, "h1", "")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: []*plans.Facts{u.sim.Facts()}, Steps: rollout.Steps, Uploads: uplink.NewRelease(u.new, u.cache),
		Artifact: plans.Artifact{SHA256: plans.SHA256(string(u.new)), Size: int64(len(u.new)), VersionFrom: capability.FromNone}})
	if err != nil {
		t.Fatal(err)
	}
	return reload(t, p)
}

func (u *upgrade) apply(t *testing.T, p *plans.Plan, progress io.Writer) *rollout.HostResult {
	t.Helper()
	rep, err := rollout.Apply(context.Background(), rollouttest.Dialer{"h1": u.sim}, checked(t, p),
		rollout.ApplyOptions{Artifact: u.new, Cache: u.cache, VerifyTimeout: 300 * time.Millisecond, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied {
		t.Fatalf("apply: %s (%s)", h.Outcome, h.Reason)
	}
	stored := u.sim.Files["/opt/relay/releases/.sha256/"+plans.SHA256(string(u.new))+"/relayd"]
	if !bytes.Equal([]byte(stored), u.new) {
		t.Fatalf("the host's store holds %d bytes, not the release's %d", len(stored), len(u.new))
	}
	return h
}

func TestReleaseUpgradeIsSentAsAPatch(t *testing.T) {
	u := newUpgrade(t, uplink.Gzip, uplink.Zstd, uplink.ZstdPatch)
	p := u.planned(t)
	want := p.Hosts[0].Release.Upload
	oldSHA := plans.SHA256(string(u.old))
	if want == nil || want.Form != uplink.ZstdPatch || want.From != oldSHA || want.Bytes*10 > int64(len(u.new)) {
		t.Fatalf("planned upload %+v; want a patch from %s, a tenth of the release at most", want, oldSHA[:12])
	}
	if md := string(p.Markdown("x.plan")); !strings.Contains(md, fmt.Sprintf("- Upload: %d bytes, a zstd patch from the release the host keeps", want.Bytes)) ||
		!strings.Contains(md, "- Uplink: the release reaches 1 host(s) (1 as a zstd patch)") {
		t.Errorf("the review does not say how the release is sent:\n%s", md)
	}
	var progress strings.Builder
	h := u.apply(t, p, &progress)
	if got := h.Upload; got == nil || got.Form != uplink.ZstdPatch || got.From != oldSHA || got.Bytes != want.Bytes || got.Size != int64(len(u.new)) || len(got.Fallback) != 0 {
		t.Errorf("receipt's upload %+v; want the planned patch, %d bytes", got, want.Bytes)
	}
	if h.BytesUploaded < want.Bytes || h.BytesUploaded > want.Bytes+4096 {
		t.Errorf("%d bytes uploaded; want the patch's %d, the config and the drop-in", h.BytesUploaded, want.Bytes)
	}
	if strings.Contains(progress.String(), "upload:") {
		t.Errorf("progress speaks of a fallback:\n%s", progress.String())
	}
}

// A host without zstd is sent the release gzip-compressed, though it
// keeps the release before: gzip is what it can decode.
func TestHostWithoutZstdIsSentGzip(t *testing.T) {
	u := newUpgrade(t, uplink.Gzip)
	p := u.planned(t)
	want := p.Hosts[0].Release.Upload
	if want == nil || want.Form != uplink.Gzip || want.Bytes*100 > int64(len(u.new))*45 || !strings.Contains(want.Note, "cannot decode one") {
		t.Fatalf("planned upload %+v; want gzip, 45%% of the release at most, and why no patch", want)
	}
	if h := u.apply(t, p, io.Discard); h.Upload == nil || h.Upload.Form != uplink.Gzip || h.Upload.Bytes != want.Bytes {
		t.Errorf("receipt's upload %+v; want gzip, %d bytes", h.Upload, want.Bytes)
	}
}

// A host whose stored release is not the one the plan knows (its bytes
// changed since) refuses the patch, and is sent the release compressed:
// the receipt and the progress say so. The patch went with the request
// (observe had found the store without the release: Op.Send), so its bytes
// count.
func TestPatchFromAChangedBaseFallsBack(t *testing.T) {
	u := newUpgrade(t, uplink.Gzip, uplink.Zstd, uplink.ZstdPatch)
	p := u.planned(t)
	planned := p.Hosts[0].Release.Upload
	oldSHA := plans.SHA256(string(u.old))
	u.sim.Files["/opt/relay/releases/.sha256/"+oldSHA+"/relayd"] = "other bytes"
	var progress strings.Builder
	h := u.apply(t, p, &progress)
	zs, _ := uplink.Encode(uplink.Zstd, u.new, nil)
	if got := h.Upload; got == nil || got.Form != uplink.Zstd || got.Bytes != int64(len(zs))+planned.Bytes || len(got.Fallback) != 1 || !strings.Contains(got.Fallback[0], "is not the "+oldSHA) {
		t.Errorf("receipt's upload %+v; want zstd (%d bytes) after the patch (%+v) refused", got, len(zs), planned)
	}
	if !strings.Contains(progress.String(), "h1: upload: the zstd-patch form: the patch's base") || !strings.Contains(progress.String(), "sent the release zstd-compressed instead") {
		t.Errorf("progress does not say the patch was refused:\n%s", progress.String())
	}
	md := rollout.ReceiptMarkdown(p, &rollout.Report{Hosts: []*rollout.HostResult{h}})
	if !strings.Contains(string(md), "not the planned form: the zstd-patch form") {
		t.Errorf("the receipt does not say the patch was refused:\n%s", md)
	}
}

// A host whose store holds no release relayctl has the bytes of is sent
// the release compressed; the review says why there is no patch.
func TestNoPatchWithoutTheBaseBytes(t *testing.T) {
	u := newUpgrade(t, uplink.Gzip, uplink.Zstd, uplink.ZstdPatch)
	cache, _ := uplink.OpenCache(filepath.Join(t.TempDir(), "empty"))
	u.cache = cache
	p := u.planned(t)
	if up := p.Hosts[0].Release.Upload; up == nil || up.Form != uplink.Zstd || !strings.Contains(up.Note, "relayctl's release cache has none of the 1 release(s) in the host's store") {
		t.Fatalf("planned upload %+v; want zstd, and why no patch", up)
	}
	if h := u.apply(t, p, io.Discard); h.Upload == nil || h.Upload.Form != uplink.Zstd {
		t.Errorf("receipt's upload %+v; want zstd", h.Upload)
	}
}

// A tarball takes the same path: its upgrade is a patch from the tarball
// the host's store keeps (release.tar), and the host unpacks what it
// decoded, its files' tree hash checked.
func TestTarballUpgradeIsSentAsAPatch(t *testing.T) {
	old, new, err := rollouttest.TwoReleases(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	oldTar, newTar := tarOf(t, old), tarOf(t, new)
	cache, _ := uplink.OpenCache(filepath.Join(t.TempDir(), "relayctl"))
	cache.PutRelease(oldTar)
	s := rollouttest.NewSim("h1")
	s.Decoders = []string{uplink.Gzip, uplink.Zstd, uplink.ZstdPatch}
	s.StoreReleaseAs(oldTar, "release.tar")
	src := strings.Replace(fakeSpec, "release: {version: 1.8.0, artifact: relayd}", "release: {kind: tarball, version: 1.8.0, artifact: relayd.tar, program: relayd}", 1)
	spec, err := plans.ParseSpec("fake.yaml", []byte(fmt.Sprintf(src, "h1", "")))
	if err != nil {
		t.Fatal(err)
	}
	r, err := release.Tarball(newTar, "relayd")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: []*plans.Facts{s.Facts()}, Steps: rollout.Steps, Uploads: uplink.NewRelease(newTar, cache),
		Artifact: plans.Artifact{SHA256: r.SHA256, Size: int64(len(newTar)), TreeSHA256: r.TreeSHA256, VersionFrom: capability.FromNone}})
	if err != nil {
		t.Fatal(err)
	}
	p = reload(t, p)
	if up := p.Hosts[0].Release.Upload; up == nil || up.Form != uplink.ZstdPatch || up.From != plans.SHA256(string(oldTar)) {
		t.Fatalf("planned upload %+v; want a patch from the kept tarball", up)
	}
	rep, err := rollout.Apply(context.Background(), rollouttest.Dialer{"h1": s}, checked(t, p),
		rollout.ApplyOptions{Artifact: newTar, Cache: cache, VerifyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied || h.Upload == nil || h.Upload.Form != uplink.ZstdPatch || h.Upload.Bytes*10 > int64(len(newTar)) {
		t.Errorf("apply: %s (%s), upload %+v; want applied with a patch", h.Outcome, h.Reason, h.Upload)
	}
	if got := s.Files["/opt/relay/releases/.sha256/"+r.SHA256+"/release.tar"]; got != string(newTar) {
		t.Errorf("the host's store holds %d bytes, not the tarball's %d", len(got), len(newTar))
	}
}

// tarOf is a plain tarball holding program as relayd.
func tarOf(t *testing.T, program []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	w.WriteHeader(&tar.Header{Name: "relayd", Mode: 0o755, Size: int64(len(program)), Typeflag: tar.TypeReg})
	w.Write(program)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// relayctl stage sends the release the same way, and the apply after it
// sends nothing.
func TestStageSendsThePatch(t *testing.T) {
	u := newUpgrade(t, uplink.Gzip, uplink.Zstd, uplink.ZstdPatch)
	p := u.planned(t)
	d := rollouttest.Dialer{"h1": u.sim}
	o := rollout.ApplyOptions{Artifact: u.new, Cache: u.cache, VerifyTimeout: 300 * time.Millisecond}
	rep, err := rollout.Stage(context.Background(), d, checked(t, p), o)
	if err != nil {
		t.Fatal(err)
	}
	h := rep.Hosts[0]
	if h.Outcome != rollout.Staged || h.Upload == nil || h.Upload.Form != uplink.ZstdPatch || h.Upload.Bytes != p.Hosts[0].Release.Upload.Bytes {
		t.Fatalf("stage: %s (%s), upload %+v; want staged with the planned patch", h.Outcome, h.Reason, h.Upload)
	}
	rep, err = rollout.Apply(context.Background(), d, checked(t, p), o)
	if err != nil {
		t.Fatal(err)
	}
	if h := rep.Hosts[0]; h.Outcome != rollout.Applied || h.Upload != nil || h.BytesUploaded != 0 {
		t.Errorf("apply after stage: %s, upload %+v, %d bytes; want applied with nothing sent", h.Outcome, h.Upload, h.BytesUploaded)
	}
}

package shellhost

// agent.sh's keep of packed forms (package wire), run here as root with the
// machine's own gzip and zstd: a patch from the release the store keeps, a
// form the host refuses before its bytes go (a base that is not the one
// planned), and after them (a form that does not decode, or decodes to
// other bytes): the next form follows, the sha256 of what is kept checked
// as of any upload, the session in step.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
	"github.com/relayctl/relayctl/uplink"
)

// twoReleases are a program's bytes and a new build of it
// (rollouttest.TwoReleases), with the machine's gzip and zstd to decode
// them.
func twoReleases(t *testing.T) (old, new []byte) {
	t.Helper()
	for _, tool := range []string{"gzip", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed", tool)
			}
			t.Skipf("%s is not installed (set CI=true to make this a failure)", tool)
		}
	}
	old, new, err := rollouttest.TwoReleases(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return old, new
}

func packed(enc, base, baseSHA string, data []byte) rollout.Packed {
	return rollout.Packed{Encoding: enc, Base: base, BaseSHA: baseSHA, Data: func() ([]byte, error) { return data, nil }}
}

func encode(t *testing.T, enc string, data, base []byte) []byte {
	t.Helper()
	b, err := uplink.Encode(enc, data, base)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storeWith is a release store holding old, as an earlier apply left it.
func storeWith(t *testing.T, root string, old []byte) (base, shaOld string) {
	t.Helper()
	shaOld = plans.SHA256(string(old))
	base = filepath.Join(root, "releases", ".sha256", shaOld, "relayd")
	os.MkdirAll(filepath.Dir(base), 0o755)
	if err := os.WriteFile(base, old, 0o755); err != nil {
		t.Fatal(err)
	}
	return base, shaOld
}

func TestAgentKeepsAPatchFromTheStoredRelease(t *testing.T) {
	root := rootDir(t)
	old, new := twoReleases(t)
	base, shaOld := storeWith(t, root, old)
	h := lockedAgent(t, filepath.Join(root, "state"))
	sha := plans.SHA256(string(new))
	file := filepath.Join(root, "releases", ".sha256", sha, "relayd")
	patch, zs := encode(t, uplink.ZstdPatch, new, old), encode(t, uplink.Zstd, new, nil)
	k := keepOp(file, sha, new, "0755")
	k.Packed = []rollout.Packed{packed(uplink.ZstdPatch, base, shaOld, patch), packed(uplink.Zstd, "", "", zs)}
	res, err := runOps(h, k, op("clock"))
	if err != nil || len(res) != 2 || res[0].Form != uplink.ZstdPatch || res[0].Sent != len(patch) || len(res[0].Refused) != 0 {
		t.Fatalf("keep: %+v %v; want the patch taken, %d bytes sent", res, err, len(patch))
	}
	if b, _ := os.ReadFile(file); !bytes.Equal(b, new) {
		t.Fatalf("the store holds %d bytes, not the release", len(b))
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Errorf("left behind in the store: %v", entries)
	}
}

// A patch whose base on the host is not the release it was made from is
// refused when offered, before its bytes are sent: the host gets the next
// form.
func TestAgentRefusesAPatchFromAnotherBaseBeforeItsBytes(t *testing.T) {
	root := rootDir(t)
	old, new := twoReleases(t)
	base, shaOld := storeWith(t, root, old)
	os.WriteFile(base, append(bytes.Clone(old), 'x'), 0o755) // not what its name says
	h := lockedAgent(t, filepath.Join(root, "state"))
	sha := plans.SHA256(string(new))
	file := filepath.Join(root, "releases", ".sha256", sha, "relayd")
	zs := encode(t, uplink.Zstd, new, nil)
	k := keepOp(file, sha, new, "0755")
	k.Packed = []rollout.Packed{packed(uplink.ZstdPatch, base, shaOld, encode(t, uplink.ZstdPatch, new, old)), packed(uplink.Zstd, "", "", zs)}
	res, err := runOps(h, k)
	if err != nil || res[0].Form != uplink.Zstd || res[0].Sent != len(zs) || len(res[0].Refused) != 1 || !strings.HasPrefix(res[0].Refused[0], "the zstd-patch form: the patch's base") || !strings.Contains(res[0].Refused[0], "not the "+shaOld+" it was made from") {
		t.Fatalf("keep: %+v %v; want the patch refused unsent, zstd taken (%d bytes)", res, err, len(zs))
	}
	if b, _ := os.ReadFile(file); !bytes.Equal(b, new) {
		t.Fatalf("the store holds %d bytes, not the release", len(b))
	}
}

// Forms that do not decode to the release are refused after their bytes:
// bytes that are no gzip at all (gzip stops reading at once: the agent
// still reads every byte, or the next request would be the rest of them),
// a damaged patch, a patch made from other bytes, gzip that decodes to
// more than the release. The next form follows, the release as it is
// after the last, and what is kept is checked by its sha256; the session
// stays in step (the keep after it in the batch, and the clock, answer).
func TestAgentFallsBackFromFormsThatDoNotDecode(t *testing.T) {
	root := rootDir(t)
	old, new := twoReleases(t)
	base, shaOld := storeWith(t, root, old)
	h := lockedAgent(t, filepath.Join(root, "state"))
	sha := plans.SHA256(string(new))
	file := filepath.Join(root, "releases", ".sha256", sha, "relayd")
	damaged := encode(t, uplink.ZstdPatch, new, old)
	damaged[len(damaged)/2] ^= 0xff
	other := encode(t, uplink.ZstdPatch, new, new[:len(new)/2]) // made from other bytes than the base
	longer := encode(t, uplink.Gzip, append(bytes.Clone(new), "and more"...), nil)
	notGzip := bytes.Repeat([]byte("not gzip\n"), 100000)
	k := keepOp(file, sha, new, "0755")
	k.Packed = []rollout.Packed{packed(uplink.Gzip, "", "", notGzip), packed(uplink.ZstdPatch, base, shaOld, damaged), packed(uplink.ZstdPatch, base, shaOld, other), packed(uplink.Gzip, "", "", longer)}
	conf := []byte("RELAYD_LISTEN=0.0.0.0:7788\n")
	confFile := filepath.Join(root, "relayd.env.relayctl-new")
	res, err := runOps(h, k, keepOp(confFile, plans.SHA256(string(conf)), conf, "0644"), op("clock"))
	if err != nil || len(res) != 3 {
		t.Fatalf("keeps: %+v %v", res, err)
	}
	r := res[0]
	if r.Form != uplink.Raw || r.Sent != len(notGzip)+len(damaged)+len(other)+len(longer)+len(new) || len(r.Refused) != 4 {
		t.Fatalf("keep: form %s, %d bytes, refused %q; want the release as it is after four refused forms", r.Form, r.Sent, r.Refused)
	}
	for i, want := range []string{"the gzip form: gzip -d: gzip: invalid header", "the zstd-patch form: zstd -d: ", "the zstd-patch form", "the gzip form: it decoded to"} {
		if !strings.Contains(r.Refused[i], want) {
			t.Errorf("refused[%d] = %q, want %q", i, r.Refused[i], want)
		}
	}
	if b, _ := os.ReadFile(file); !bytes.Equal(b, new) {
		t.Errorf("the store holds %d bytes, not the release", len(b))
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Errorf("left behind in the store: %v", entries)
	}
	if b, _ := os.ReadFile(confFile); !bytes.Equal(b, conf) || res[1].Sent != len(conf) || res[2].Value == "" {
		t.Errorf("after the fallbacks: config %q (%d bytes sent), clock %q", b, res[1].Sent, res[2].Value)
	}
}

// A form that is not one the agent decodes never reaches a shell: the
// engine refuses it before anything is sent.
func TestPackedFormsAreValidated(t *testing.T) {
	k := keepOp("/opt/relay/releases/.sha256/x/relayd", strings.Repeat("a", 64), []byte("x"), "0755")
	for _, pk := range []rollout.Packed{
		packed("bzip2", "", "", []byte("x")),
		packed(uplink.ZstdPatch, "relative/base", strings.Repeat("b", 64), []byte("x")),
		packed(uplink.ZstdPatch, "/base\tx", strings.Repeat("b", 64), []byte("x")),
		packed(uplink.ZstdPatch, "/base", "not-a-sha", []byte("x")),
		packed(uplink.Gzip, "/base", "", []byte("x")),
		{Encoding: uplink.Gzip},
	} {
		k.Packed = []rollout.Packed{pk}
		if err := k.Validate(); err == nil {
			t.Errorf("%+v: valid", pk)
		}
	}
}

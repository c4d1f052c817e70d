package rollout

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLedgerSave is one host's save (it ends) on fleets of 100 to
// 10,000 hosts, to a real file: in place (a line and the header) against
// the whole file through a temporary file and a rename, as every save
// was before the ledger was rewritten in place.
//
//	go test -run '^$' -bench LedgerSave ./rollout
func BenchmarkLedgerSave(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		for _, inPlace := range []bool{true, false} {
			b.Run(fmt.Sprintf("hosts=%d/in-place=%v", n, inPlace), func(b *testing.B) {
				book := benchBook(b, n, inPlace)
				r := &HostResult{HostAccount: HostAccount{Outcome: Applied, State: StateAsPlanned, Reason: "", BytesUploaded: 9000395, Wave: 2}}
				b.ResetTimer()
				for i := range b.N {
					book.ended(i%n, r)
				}
				b.StopTimer()
				if err := book.failed(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func benchBook(b *testing.B, n int, inPlace bool) *ledgerBook {
	l := &Ledger{FormatVersion: LedgerFormatVersion, Plan: "bench", Checksum: "sha256:" + fmt.Sprint(n), Run: 1}
	for i := range n {
		l.Hosts = append(l.Hosts, LedgerHost{Host: fmt.Sprintf("relay-%05d.r%03d", i, i/200), Outcome: string(NotStarted), State: StateAsWas})
	}
	path := filepath.Join(b.TempDir(), "x.plan.ledger.json")
	var f *os.File
	book := &ledgerBook{l: l, now: time.Now}
	book.save = func(body []byte) error {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, body, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		if f != nil {
			f.Close()
		}
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
		return err
	}
	if inPlace {
		book.patch = func(p []byte, off int64) error { _, err := f.WriteAt(p, off); return err }
	}
	b.Cleanup(func() {
		if f != nil {
			f.Close()
		}
	})
	book.flush()
	return book
}

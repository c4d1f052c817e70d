package rollout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// HostFile is one receipt as a host keeps it: its file name and bytes,
// which came from the host and are read as untrusted as any host output.
type HostFile struct {
	Name string
	Data []byte
}

// maxHostReceipt bounds one receipt read from a host (the agent sends no
// bigger one).
const maxHostReceipt = 1 << 20

// ReadHostReceipts reads a host's newest n receipts, newest first, without
// taking its lock: one round trip, read-only.
func ReadHostReceipts(ctx context.Context, d HostDialer, name string, n int) ([]HostFile, error) {
	h, err := d.DialHost(ctx, name)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var files []HostFile
	err = h.Run(ctx, []Op{op("receipts", strconv.Itoa(n))}, func(_ int, r Result) error {
		var perr error
		files, perr = ParseHostFiles(r.Value)
		return perr
	})
	if err != nil {
		return nil, fmt.Errorf("%s: read receipts: %w", name, err)
	}
	return files, nil
}

// ParseHostFiles reads the receipts primitive's answer: for each receipt
// a line "NAME SIZE", then SIZE bytes. Anything else is an error.
func ParseHostFiles(data string) ([]HostFile, error) {
	var out []HostFile
	for data != "" {
		line, rest, ok := strings.Cut(data, "\n")
		if !ok {
			return nil, errors.New("a receipt header without its newline")
		}
		name, size, _ := strings.Cut(line, " ")
		n, err := strconv.Atoi(size)
		if err != nil || n < 0 || n > maxHostReceipt || n > len(rest) || !receiptFileName(name) {
			return nil, fmt.Errorf("a malformed receipt header %q", plans.Visible(clip(line)))
		}
		out = append(out, HostFile{Name: name, Data: []byte(rest[:n])})
		data = rest[n:]
	}
	return out, nil
}

// receiptFileName is a name the agent sends: NAME.json of letters,
// digits and ._- only.
func receiptFileName(name string) bool {
	if len(name) > 255 || !strings.HasSuffix(name, ".json") {
		return false
	}
	return strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == ""
}

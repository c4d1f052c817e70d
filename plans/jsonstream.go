package plans

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// StreamJSON writes to w the bytes json.Encoder gives, with a two-space
// indent and no HTML escaping, for head with its last field, a list, set
// to the n items item returns: one item at a time, so that a plan or a
// receipt of 10,000 hosts is never held whole. head must have that list
// nil (it encodes as `"hosts": null`, the place the items go); n < 0
// writes the list as null, 0 as []. what names the file in errors.
func StreamJSON(w io.Writer, head any, n int, item func(i int) any, what string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(head); err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
	}
	top, ok := bytes.CutSuffix(b.Bytes(), []byte("null\n}\n"))
	if !ok {
		return fmt.Errorf("encode %s: %w", what, errors.New("unexpected header"))
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(top)
	switch {
	case n < 0:
		bw.WriteString("null\n}\n")
		return bw.Flush()
	case n == 0:
		bw.WriteString("[]\n}\n")
		return bw.Flush()
	}
	bw.WriteString("[\n")
	var ib bytes.Buffer
	ienc := json.NewEncoder(&ib)
	ienc.SetIndent("    ", "  ")
	ienc.SetEscapeHTML(false)
	for i := range n {
		ib.Reset()
		if err := ienc.Encode(item(i)); err != nil {
			return fmt.Errorf("encode %s: %w", what, err)
		}
		bw.WriteString("    ")
		bw.Write(bytes.TrimSuffix(ib.Bytes(), []byte("\n")))
		if i < n-1 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
	}
	bw.WriteString("  ]\n}\n")
	return bw.Flush()
}

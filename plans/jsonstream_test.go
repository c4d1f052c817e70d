package plans

import (
	"bytes"
	"encoding/json"
	"testing"
)

// StreamJSON's bytes are json.Encoder's for the whole value, whether the
// list is nil, empty or holds items (the receipt's case beside the plan's,
// which TestPlanStreamsItsCanonicalBytes holds too).
func TestStreamJSONIsTheWholeEncoding(t *testing.T) {
	type item struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	type doc struct {
		Title string  `json:"title"`
		Hosts []*item `json:"hosts"`
	}
	for _, hosts := range [][]*item{nil, {}, {{Name: "a<b>", Tags: []string{"x"}}, {Name: "é"}, {}}} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(doc{Title: "t", Hosts: hosts}); err != nil {
			t.Fatal(err)
		}
		n := len(hosts)
		if hosts == nil {
			n = -1
		}
		var got bytes.Buffer
		if err := StreamJSON(&got, doc{Title: "t"}, n, func(i int) any { return hosts[i] }, "doc"); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%d hosts: streamed\n%s\nwhole\n%s", len(hosts), got.String(), want.String())
		}
	}
	if err := StreamJSON(new(bytes.Buffer), struct{ A int }{}, 0, nil, "doc"); err == nil {
		t.Error("a head without its list last was streamed")
	}
}

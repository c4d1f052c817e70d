package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"image"
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func sampleReport() *Report {
	var steps []Step
	for i, n := range []int{8, 16, 24} {
		sch := NewSchedule(n, 60, time.Second, 0, 1)
		in := perfect(n, 8, sch)
		if i == 2 {
			in.Relay.RxPackets -= 50
			in.Relay.RxDrops = 50
			in.Relay.TxPackets -= 350
			in.Received -= 350
		}
		steps = append(steps, Account(in))
	}
	cfg := Defaults()
	cfg.Relay, cfg.Control = "127.0.0.1:7788", "127.0.0.1:7789"
	return &Report{
		Format:      1,
		Config:      reportConfig(cfg),
		Preflight:   Preflight{Players: 24, CPUs: 2, NoFile: 1024, NoFileHard: 4096, FDsNeeded: 50, PortLow: 32768, PortHigh: 60999},
		Calibration: &Calibration{Seconds: 1, Players: 8, SendPPS: 150000, RecvPPS: 300000},
		Steps:       steps,
		Knee:        FindKnee(steps, 0),
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"lobbies of 8 (each datagram forwarded to 7)",
		"bench ceiling: sends 150.0k datagrams/s, receives 300.0k/s",
		"2 CPUs, RLIMIT_NOFILE 1024",
		"knee at 24 players",
		"dropped in the relay's socket buffer",
		"last clean step 16 players",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table: got\n%s\nwant it to contain %q", out, want)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("decode report: %v", err)
	}
	if len(got.Steps) != 3 || got.Steps[2].LossInAtRelay != 50 || !got.Knee.Found || got.Knee.Players != 24 {
		t.Errorf("got %d steps, knee %+v, want 3 steps and the knee at 24 with 50 relay drops", len(got.Steps), got.Knee)
	}
}

// The chart is drawn by gonum/plot in both formats: a PNG that decodes
// to the chart's size, an SVG that is well-formed XML naming each run's
// knee and the gate; before and after share one chart.
func TestWritePlot(t *testing.T) {
	before := sampleReport()
	after := sampleReport()
	for i := range after.Steps {
		after.Steps[i].Players *= 2
		after.Steps[i].Valid = i != 1
	}
	after.Knee = FindKnee(after.Steps, 0)
	g := Gate{Players: 32}
	after.Config.Gate = &g
	dir := t.TempDir()

	png := filepath.Join(dir, "chart.png")
	if err := WritePlot(png, PlotRun{"before", before}, PlotRun{"after", after}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(png)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, format, err := image.DecodeConfig(f)
	if err != nil || format != "png" || cfg.Width < 800 || cfg.Height < 600 {
		t.Errorf("png: %s %dx%d, %v", format, cfg.Width, cfg.Height, err)
	}

	svg := filepath.Join(dir, "chart.svg")
	if err := WritePlot(svg, PlotRun{"before", before}, PlotRun{"after", after}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("parse svg: %v", err)
		}
		if cd, ok := tok.(xml.CharData); ok {
			texts = append(texts, string(cd))
		}
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"knee before: 24 players", "bench limit after: 32 players", "gate: 32 players", "before", "after", "loss, % of planned deliveries", "relay packets/s (rx + tx)"} {
		if !strings.Contains(all, want) {
			t.Errorf("svg text: got %q, want it to contain %q", all, want)
		}
	}
	if err := before.WritePlot(filepath.Join(dir, "chart.gif")); err == nil || !strings.Contains(err.Error(), "want a .png or .svg file name") {
		t.Errorf("a .gif: %v", err)
	}
	if err := PlotFormat(filepath.Join(dir, "missing", "chart.png")); err == nil || !strings.Contains(err.Error(), "cannot write there") {
		t.Errorf("a folder that does not exist: %v", err)
	}
}

// The table's rows fit TableWidth columns at the incident's scale (480
// players at 60 Hz, 3 s steps: six-figure counts); --wide has every
// counter.
func TestTableFitsWidth(t *testing.T) {
	rep := sampleReport()
	for i := range rep.Steps {
		s := &rep.Steps[i]
		s.Players, s.Sent, s.RelayRx, s.RelayDrop, s.Received = 480, 86400, 86400, 12345, 604800
		s.LossIn, s.LossOut, s.LossPct = 12345, 86415, 14.286
		s.LatencyP99, s.LagP99 = 123456*time.Microsecond, 98765*time.Microsecond
		s.Valid, s.NearBenchCeiling = true, true
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, l := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "players") && !strings.HasPrefix(strings.TrimSpace(l), "480") {
			continue
		}
		rows++
		if n := utf8.RuneCountInString(l); n > TableWidth {
			t.Errorf("a %d-column row:\n%s", n, l)
		}
	}
	if rows != 1+len(rep.Steps) {
		t.Errorf("found %d table rows, want %d:\n%s", rows, 1+len(rep.Steps), b.String())
	}
	b.Reset()
	if err := rep.WriteWideTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"lobbies", "planned", "forwarded", "relay tx", "p50", "p95", "bench cpu", "machine busy"} {
		if !strings.Contains(b.String(), col) {
			t.Errorf("wide table lacks %q", col)
		}
	}
}

func TestPreflightParsers(t *testing.T) {
	lo, hi, err := parsePortRange("32768\t60999\n")
	if err != nil || lo != 32768 || hi != 60999 {
		t.Errorf("parsePortRange: got %d %d %v, want 32768 60999", lo, hi, err)
	}
	for _, bad := range []string{"", "1", "9 8", "0 10", "1 70000", "a b"} {
		if _, _, err := parsePortRange(bad); err == nil {
			t.Errorf("parsePortRange(%q): got no error, want one", bad)
		}
	}
	lines := []struct {
		line string
		port int
		ok   bool
	}{
		{"  sl  local_address rem_address   st tx_queue rx_queue", 0, false},
		{"   12: 0100007F:1E6C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41 2 0000 0", 7788, true},
		{" 1: 00000000000000000000000001000000:8000 00000000000000000000000000000000:0000 07", 32768, true},
	}
	for _, l := range lines {
		port, ok := localPort(l.line)
		if port != l.port || ok != l.ok {
			t.Errorf("localPort(%q): got %d %v, want %d %v", l.line, port, ok, l.port, l.ok)
		}
	}
	for _, c := range []struct{ need, want uint64 }{{432, 4096}, {4097, 8192}, {100016, 131072}} {
		if got := suggestNoFile(c.need); got != c.want {
			t.Errorf("suggestNoFile(%d): got %d, want %d", c.need, got, c.want)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	a, err := parseMachineCPU("cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if a.busy != 160 || a.idle != 820 {
		t.Errorf("got busy %d idle %d, want 160 820", a.busy, a.idle)
	}
	b := machineCPU{busy: a.busy + 90, idle: a.idle + 10}
	if got := b.busySince(a); got != 0.9 {
		t.Errorf("got busy share %v, want 0.9", got)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 x 4 5\n"} {
		if _, err := parseMachineCPU(bad); err == nil {
			t.Errorf("parseMachineCPU(%q): got no error, want one", bad)
		}
	}
}

// TestWriteTableModelAndGate: the prediction sits in the header, its check
// under the knee, and the table ends with the gate.
func TestWriteTableModelAndGate(t *testing.T) {
	rep := sampleReport()
	g := Gate{Players: 24, Promise: 12, Factor: 2}
	rep.Config.Gate = &g
	rep.Model = Predict(16384, "the relay's /status", 200, 0, 24)
	rep.Model.Compare(rep.Knee, rep.Steps)
	res := JudgeGate(g, rep.Steps, 0)
	rep.Gate = &res
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for _, want := range []string{
		"model: relay rb 16384 (the relay's /status) holds 12 datagrams of 200 bytes (truesize 1280); with aligned ticks the burst is one datagram per player, so loss is predicted from 13 players; the gate's burst of 24 datagrams needs rb 30720: this buffer does not hold it",
		"gate: the region carries 2 × 12 = 24 players? judged on every step up to 24 players: each valid, loss within 0%",
		"model: 16 players were clean, at or above the predicted onset of 13: the relay read part of each burst while it arrived, so the model is conservative here (knee at 24)",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("table: got\n%s\nwant the line %q", b.String(), want)
		}
	}
	if last, want := lines[len(lines)-1], "gate: the region carries 2 × 12 = 24 players: no: at 24 players the relay lost"; !strings.HasPrefix(last, want) {
		t.Errorf("last line: got %q, want it to start %q", last, want)
	}
	var j bytes.Buffer
	if err := rep.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(j.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Gate == nil || got.Gate.Verdict != GateRelayShort || got.Model == nil || got.Model.Onset != 13 || got.Config.Gate == nil || got.Config.Gate.Players != 24 {
		t.Errorf("JSON: got gate %+v, model %+v, config gate %+v", got.Gate, got.Model, got.Config.Gate)
	}
}

package bench

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The chart is written by hand as SVG: two series against players (loss %
// on the left axis, the relay's packet rate on the right) with the knee
// marked. No plotting dependency is worth it for two polylines.
const (
	plotW, plotH                       = 860, 480
	marginL, marginR, marginT, marginB = 80, 90, 50, 60
	colLoss, colRate, colKnee, colCeil = "#c0392b", "#2471a3", "#555555", "#b9770e"
	fontCSS                            = `font-family="sans-serif" font-size="12"`
)

// WritePlot writes the chart to path: SVG, or PNG when path ends in .png
// (converted from the SVG by rsvg-convert, from Debian's librsvg2-bin).
func (r *Report) WritePlot(path string) error {
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		return err
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
		return nil
	case ".png":
		conv, err := exec.LookPath("rsvg-convert")
		if err != nil {
			return fmt.Errorf("write png plot: rsvg-convert not found (apt-get install librsvg2-bin), or name the file .svg")
		}
		cmd := exec.Command(conv, "-f", "png", "-b", "white", "-o", path)
		cmd.Stdin = &b
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("write png plot: rsvg-convert: %w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return fmt.Errorf("write plot %s: want a .svg or .png file name", path)
}

// WriteSVG writes the chart as an SVG document.
func (r *Report) WriteSVG(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-family="sans-serif" font-size="15" font-weight="bold">relayctl bench: %s, lobbies of %d at %d Hz</text>`+"\n",
		marginL, esc(r.Config.Relay), r.Config.LobbySize, r.Config.Hz)

	x0, x1 := float64(marginL), float64(plotW-marginR)
	y0, y1 := float64(plotH-marginB), float64(marginT)
	minP, maxP := 0.0, 1.0
	maxLoss, maxRate := 0.0, 0.0
	if len(r.Steps) > 0 {
		minP, maxP = float64(r.Steps[0].Players), float64(r.Steps[0].Players)
	}
	for _, s := range r.Steps {
		minP = math.Min(minP, float64(s.Players))
		maxP = math.Max(maxP, float64(s.Players))
		maxLoss = math.Max(maxLoss, s.LossPct)
		maxRate = math.Max(maxRate, s.RelayPPS)
	}
	if maxP == minP {
		minP, maxP = minP-1, maxP+1
	}
	lossTicks := niceTicks(math.Max(maxLoss, 1))
	rateTicks := niceTicks(math.Max(maxRate, 1))
	xTicks := niceTicksRange(minP, maxP)
	maxP = xTicks[len(xTicks)-1] // the axis ends on a tick
	lossTop, rateTop := lossTicks[len(lossTicks)-1], rateTicks[len(rateTicks)-1]
	px := func(p float64) float64 { return x0 + (p-minP)/(maxP-minP)*(x1-x0) }
	pyL := func(v float64) float64 { return y0 - v/lossTop*(y0-y1) }
	pyR := func(v float64) float64 { return y0 - v/rateTop*(y0-y1) }

	// Axes and grid.
	fmt.Fprintf(&b, `<g stroke="#000" stroke-width="1"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/></g>`+"\n",
		x0, y0, x1, y0, x0, y0, x0, y1, x1, y0, x1, y1)
	for _, t := range lossTicks {
		y := pyL(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, x0, y, x1, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s text-anchor="end" fill="%s">%s</text>`+"\n", x0-6, y+4, fontCSS, colLoss, num(t))
	}
	for _, t := range rateTicks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s fill="%s">%s</text>`+"\n", x1+6, pyR(t)+4, fontCSS, colRate, si(t))
	}
	for _, t := range xTicks {
		x := px(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`, x, y0, x, y0+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s text-anchor="middle">%s</text>`+"\n", x, y0+20, fontCSS, num(t))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">players</text>`+"\n", (x0+x1)/2, plotH-15, fontCSS)
	fmt.Fprintf(&b, `<text transform="translate(22 %.1f) rotate(-90)" %s text-anchor="middle" fill="%s">loss, %% of planned deliveries</text>`+"\n", (y0+y1)/2, fontCSS, colLoss)
	fmt.Fprintf(&b, `<text transform="translate(%d %.1f) rotate(90)" %s text-anchor="middle" fill="%s">relay packets/s (rx+tx, its counters)</text>`+"\n", plotW-20, (y0+y1)/2, fontCSS, colRate)

	// The knee, and the bench's own ceiling expressed in players.
	if k := r.Knee; k.Step >= 0 {
		x := px(float64(k.Players))
		label := fmt.Sprintf("knee: %d players", k.Players)
		if !k.Found {
			label = fmt.Sprintf("bench limit: %d players", k.Players)
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`, x, y0, x, y1, colKnee)
		// The label sits on the side of the line with more room.
		lx, anchor := x+4, "start"
		if x > (x0+x1)/2 {
			lx, anchor = x-4, "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s text-anchor="%s" fill="%s">%s</text>`+"\n", lx, y1+14, fontCSS, anchor, colKnee, label)
	}

	series := func(col string, y func(Step) float64) {
		var pts []string
		for _, s := range r.Steps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(s.Players)), y(s)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		for _, s := range r.Steps {
			fill := col
			if !s.Valid {
				fill = "white" // hollow: the bench, not the relay, set this point
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" stroke="%s" fill="%s"/>`, px(float64(s.Players)), y(s), col, fill)
		}
		b.WriteString("\n")
	}
	series(colRate, func(s Step) float64 { return pyR(s.RelayPPS) })
	series(colLoss, func(s Step) float64 { return pyL(s.LossPct) })

	// Legend, in one row between the title and the plot, clear of the knee label.
	lx, ly := x0, 44.0
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%.1f" y="%.1f" %s>loss %%</text>`, lx, ly, lx+24, ly, colLoss, lx+30, ly+4, fontCSS)
	lx += 100
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%.1f" y="%.1f" %s>relay packets/s</text>`, lx, ly, lx+24, ly, colRate, lx+30, ly+4, fontCSS)
	lx += 150
	fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" stroke="#000" fill="white"/><text x="%.1f" y="%.1f" %s>hollow: invalid step (the bench fell behind)</text>`, lx+12, ly, lx+30, ly+4, fontCSS)
	b.WriteString("\n</svg>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}

// niceTicks returns 0 and round steps up to at least top.
func niceTicks(top float64) []float64 {
	return niceTicksRange(0, top)
}

func niceTicksRange(lo, hi float64) []float64 {
	span := hi - lo
	raw := span / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var t []float64
	for v := start; ; v += step {
		if v >= lo-1e-9 {
			t = append(t, v)
		}
		if v >= hi-1e-9 {
			break
		}
	}
	return t
}

func num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}

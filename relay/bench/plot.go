package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart is drawn with gonum.org/v1/plot, which writes PNG and SVG
// itself (no converter to install). Two panels share the players axis:
// loss above, the relay's packet rate below. Each run is one colour; a
// hollow point is an invalid step (the bench fell behind). Each run's knee
// is a dashed line of its colour, the capacity gate a dotted black one,
// so runs before and after a fix compare on the same axes.

// PlotRun is one run on a chart, with its legend label ("" for a chart of
// one run).
type PlotRun struct {
	Label  string
	Report *Report
}

var runColours = []color.Color{
	color.RGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 0xff}, // before: red
	color.RGBA{R: 0x24, G: 0x71, B: 0xa3, A: 0xff}, // after: blue
	color.RGBA{R: 0x1e, G: 0x84, B: 0x49, A: 0xff},
	color.RGBA{R: 0x7d, G: 0x3c, B: 0x98, A: 0xff},
}

// PlotFormat checks a chart's file name before a run spends minutes on the
// ramp: a .png or .svg name in a folder that can be written.
func PlotFormat(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
	default:
		return fmt.Errorf("plot %s: want a .png or .svg file name", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".relayctl-plot-*")
	if err != nil {
		return fmt.Errorf("plot %s: cannot write there: %w", path, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// WritePlot writes the chart of this run to path (.png or .svg).
func (r *Report) WritePlot(path string) error {
	return WritePlot(path, PlotRun{Report: r})
}

// WritePlot writes one chart of the runs, on the same axes, to path: PNG
// or SVG by its extension.
func WritePlot(path string, runs ...PlotRun) error {
	if err := PlotFormat(path); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	werr := writeChart(f, strings.ToLower(filepath.Ext(path)), runs)
	if err := f.Close(); werr == nil && err != nil {
		werr = fmt.Errorf("write plot: %w", err)
	}
	return werr
}

// writeChart draws the runs and encodes them as format, ".png" or ".svg".
func writeChart(w io.Writer, format string, runs []PlotRun) error {
	if len(runs) == 0 || len(runs) > len(runColours) {
		return fmt.Errorf("plot: %d runs; a chart holds 1 to %d", len(runs), len(runColours))
	}
	loss, rate, err := chartPanels(runs)
	if err != nil {
		return err
	}
	width, height := 22*vg.Centimeter, 16*vg.Centimeter
	var canvas interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch format {
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	case ".svg":
		canvas = vgsvg.New(width, height)
	default:
		return fmt.Errorf("plot: format %q: want .png or .svg", format)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	panels := [][]*plot.Plot{{loss}, {rate}}
	for i, c := range plot.Align(panels, tiles, dc) {
		panels[i][0].Draw(c[0])
	}
	if _, err := canvas.WriteTo(w); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// chartPanels builds the two panels, both over the same players range.
func chartPanels(runs []PlotRun) (loss, rate *plot.Plot, err error) {
	loss, rate = plot.New(), plot.New()
	first := runs[0].Report.Config
	loss.Title.Text = fmt.Sprintf("relayctl bench: %s, lobbies of %d at %d Hz, %d-byte datagrams", first.Relay, first.LobbySize, first.Hz, first.PacketSize)
	loss.Y.Label.Text = "loss, % of planned deliveries"
	rate.Y.Label.Text = "relay packets/s (rx + tx)"
	rate.X.Label.Text = "players (hollow: an invalid step, the bench fell behind)"
	for _, p := range []*plot.Plot{loss, rate} {
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = 9
	}
	minP, maxP, maxLoss, maxRate := math.Inf(1), math.Inf(-1), 0.0, 0.0
	for _, run := range runs {
		for _, s := range run.Report.Steps {
			minP, maxP = math.Min(minP, float64(s.Players)), math.Max(maxP, float64(s.Players))
			maxLoss, maxRate = math.Max(maxLoss, s.LossPct), math.Max(maxRate, s.RelayPPS)
		}
	}
	if math.IsInf(minP, 1) {
		return nil, nil, errors.New("plot: no step to draw")
	}
	if minP == maxP {
		minP, maxP = minP-1, maxP+1
	}
	lossTop, rateTop := math.Max(maxLoss, 1)*1.1, math.Max(maxRate, 1)*1.1
	for _, p := range []*plot.Plot{loss, rate} {
		p.X.Min, p.X.Max = minP, maxP
		p.Y.Min = 0
	}
	loss.Y.Max, rate.Y.Max = lossTop, rateTop
	for i, run := range runs {
		col := runColours[i]
		if err := addSeries(loss, run, col, func(s Step) float64 { return s.LossPct }); err != nil {
			return nil, nil, err
		}
		if err := addSeries(rate, run, col, func(s Step) float64 { return s.RelayPPS }); err != nil {
			return nil, nil, err
		}
		if k := run.Report.Knee; k.Step >= 0 && len(run.Report.Steps) > 0 {
			what := "knee"
			if !k.Found {
				what = "bench limit"
			}
			label := strings.TrimSpace(fmt.Sprintf("%s %s: %d players", what, run.Label, k.Players))
			if err := addMark(loss, rate, float64(k.Players), lossTop, rateTop, col, []vg.Length{vg.Points(6), vg.Points(4)}, label); err != nil {
				return nil, nil, err
			}
		}
	}
	if g := gatePlayers(runs); g > 0 {
		label := fmt.Sprintf("gate: %d players", g)
		if err := addMark(loss, rate, float64(g), lossTop, rateTop, color.Black, []vg.Length{vg.Points(2), vg.Points(3)}, label); err != nil {
			return nil, nil, err
		}
	}
	return loss, rate, nil
}

// addSeries draws one run's values as a line through its steps, valid
// steps filled, invalid ones hollow.
func addSeries(p *plot.Plot, run PlotRun, col color.Color, y func(Step) float64) error {
	var all, invalid plotter.XYs
	for _, s := range run.Report.Steps {
		pt := plotter.XY{X: float64(s.Players), Y: y(s)}
		all = append(all, pt)
		if !s.Valid {
			invalid = append(invalid, pt)
		}
	}
	line, points, err := plotter.NewLinePoints(all)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	line.Color, line.Width = col, vg.Points(1.5)
	points.Color, points.Shape, points.Radius = col, draw.CircleGlyph{}, vg.Points(2.5)
	p.Add(line, points)
	if len(invalid) > 0 {
		hollow, err := plotter.NewScatter(invalid)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		// A white disc under a ring: the point reads as hollow on the line.
		under, _ := plotter.NewScatter(invalid)
		under.Color, under.Shape, under.Radius = color.White, draw.CircleGlyph{}, vg.Points(2.5)
		hollow.Color, hollow.Shape, hollow.Radius = col, draw.RingGlyph{}, vg.Points(2.5)
		p.Add(under, hollow)
	}
	if run.Label != "" {
		p.Legend.Add(run.Label, line, points)
	}
	return nil
}

// addMark draws a vertical line at x across both panels, named in the
// upper panel's legend.
func addMark(loss, rate *plot.Plot, x, lossTop, rateTop float64, col color.Color, dashes []vg.Length, label string) error {
	for _, m := range []struct {
		p   *plot.Plot
		top float64
	}{{loss, lossTop}, {rate, rateTop}} {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: m.top}})
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Color, l.Dashes, l.Width = col, dashes, vg.Points(1.2)
		m.p.Add(l)
		if m.p == loss {
			loss.Legend.Add(label, l)
		}
	}
	return nil
}

// gatePlayers is the capacity gate the runs were held to (the last run's
// that has one).
func gatePlayers(runs []PlotRun) int {
	g := 0
	for _, run := range runs {
		if run.Report.Config.Gate != nil {
			g = run.Report.Config.Gate.Players
		}
	}
	return g
}

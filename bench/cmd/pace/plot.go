package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	benchstat "github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/bench/internal/plotgrid"
)

const bin = 100 * time.Millisecond

// writePlot draws calls per 100 ms over time: one row of panels per
// approach, one column per quota, each with the quota's share of a bin as
// a dashed line. A panel's vertical scale fits its steady state (at least
// twice the quota's share), so that a start-up burst does not flatten the
// rest; such a burst is clipped, and the title says so. With several
// rounds, an approach's runs are drawn one after another.
func writePlot(path string, all [][]*row, run time.Duration) error {
	cols, rows := len(all), 0
	for _, rs := range all {
		rows = max(rows, len(rs))
	}
	if rows == 0 || cols == 0 {
		return fmt.Errorf("nothing to plot")
	}
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for j, rs := range all {
		for i := range rows {
			p := plot.New()
			plots[i][j] = p
			if i >= len(rs) {
				p.HideAxes()
				continue
			}
			if err := panel(p, rs[i], run); err != nil {
				return err
			}
		}
	}
	return plotgrid.WritePNG(path, plots, 6*vg.Inch, 2*vg.Inch)
}

// panel draws one approach at one quota: each run's bins from its start,
// runs placed one after another every run+1 s.
func panel(p *plot.Plot, r *row, run time.Duration) error {
	share := float64(r.quota) / 10
	top, peak := 2*share, 0.0
	var lines []plotter.XYs
	span := run + time.Second
	for k, s := range r.segs {
		counts := benchstat.Buckets(s.arrivals, s.start, bin)
		if len(counts) > 0 {
			counts = counts[:len(counts)-1] // the last bin is cut short by the end of the run
		}
		lo, hi := s.window.Start.Sub(s.start), s.window.End.Sub(s.start)
		xy := make(plotter.XYs, len(counts))
		for b, n := range counts {
			at := time.Duration(b) * bin
			peak = max(peak, float64(n))
			if s.steady && at >= lo && at+bin <= hi {
				top = max(top, float64(n))
			}
			xy[b].X = (time.Duration(k)*span + at + bin/2).Seconds()
			xy[b].Y = float64(n)
		}
		lines = append(lines, xy)
	}
	ymax := top * 1.1
	p.Title.Text = fmt.Sprintf("%s, quota %d/s", r.a.label, r.quota)
	if len(r.segs) > 1 {
		p.Title.Text += fmt.Sprintf(", %d runs", len(r.segs))
	}
	if peak > ymax {
		p.Title.Text += fmt.Sprintf(" (clipped: a bin of %d)", int(peak))
	}
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text = "seconds from the start"
	p.Y.Label.Text = "calls / 100 ms"
	p.X.Min, p.X.Max = 0, (time.Duration(len(r.segs))*span - time.Second).Seconds()
	p.Y.Min, p.Y.Max = 0, ymax
	p.Add(plotter.NewGrid())
	for _, xy := range lines {
		if len(xy) == 0 {
			continue
		}
		for i := range xy {
			xy[i].Y = min(xy[i].Y, ymax)
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		line.Color = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
		line.Width = vg.Points(0.8)
		p.Add(line)
	}
	quota, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: share}, {X: p.X.Max, Y: share}})
	if err != nil {
		return err
	}
	quota.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	quota.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(quota)
	return nil
}

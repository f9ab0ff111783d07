package main

import (
	"errors"
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sluicehq/sluice/bench/internal/plotgrid"
)

// bin is the width of a bar of the plot.
const bin = 100 * time.Millisecond

// writePlot draws the calls per 100 ms of one case, one panel per system
// (sluice above the floor): 200s in blue, 429s in red, and the quota's
// share of a bin as a dashed line. Each panel runs from the system's
// first call to the end of its run.
func writePlot(path string, r caseResult, arr map[string][]arrival) error {
	var plots [][]*plot.Plot
	for _, f := range []*figures{r.sluice, r.floor} {
		if f == nil {
			continue
		}
		p, err := panel(r.c, f, arr[f.system])
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	if len(plots) == 0 {
		return errors.New("nothing to plot")
	}
	return plotgrid.WritePNG(path, plots, 10*vg.Inch, 2.5*vg.Inch)
}

// bins counts the accepted and the refused calls of each bin from start
// to end.
func bins(arr []arrival, start, end time.Time) (ok, refused []int) {
	n := int(end.Sub(start) / bin)
	ok, refused = make([]int, n), make([]int, n)
	for _, a := range arr {
		i := int(a.At.Sub(start) / bin)
		if a.At.Before(start) || i >= n {
			continue
		}
		if a.OK {
			ok[i]++
		} else {
			refused[i]++
		}
	}
	return ok, refused
}

func panel(c fleetCase, f *figures, arr []arrival) (*plot.Plot, error) {
	ok, refused := bins(arr, f.start, f.end)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, API %s: %s of the quota served, %d 429s", f.system, c.api, pct(f.share()), f.refused)
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text = "seconds from the first call"
	p.Y.Label.Text = "calls / 100 ms"
	share := float64(c.api.rate) * bin.Seconds()
	p.X.Min, p.X.Max = 0, f.end.Sub(f.start).Seconds()
	p.Y.Min, p.Y.Max = 0, 2*share
	p.Add(plotter.NewGrid())
	for _, s := range []struct {
		counts []int
		color  color.RGBA
		name   string
	}{
		{ok, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, "200"},
		{refused, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, "429"},
	} {
		if len(s.counts) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(s.counts))
		for i, n := range s.counts {
			xy[i].X = (time.Duration(i)*bin + bin/2).Seconds()
			xy[i].Y = float64(n)
			p.Y.Max = max(p.Y.Max, float64(n)*1.1)
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		line.Color = s.color
		line.Width = vg.Points(0.8)
		p.Add(line)
		p.Legend.Add(s.name, line)
	}
	quota, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: share}, {X: p.X.Max, Y: share}})
	if err != nil {
		return nil, err
	}
	quota.Color = color.RGBA{A: 0xff}
	quota.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(quota)
	p.Legend.Add("quota", quota)
	p.Legend.Top = true
	return p, nil
}

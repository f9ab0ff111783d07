// Package plotgrid writes a grid of gonum plots as one PNG, for the
// benchmarks' pictures of calls per 100 ms (docs/pace.png, docs/fleet.png).
package plotgrid

import (
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePNG draws plots (rows of columns, every row as long) aligned on
// one image, each cell w wide and h high, and writes it to path.
func WritePNG(path string, plots [][]*plot.Plot, w, h vg.Length) error {
	rows, cols := len(plots), len(plots[0])
	img := vgimg.New(vg.Length(cols)*w, vg.Length(rows)*h)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(plots, tiles, draw.New(img))
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

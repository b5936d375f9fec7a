package chart

import (
	"cmp"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Event is a call entering (Enter) or leaving the upstream at At.
type Event struct {
	At    time.Time
	Enter bool
}

// Step is the number of calls in flight from At (an offset from the run's
// start) until the next step.
type Step struct {
	At    time.Duration
	Value int
}

// Steps turns events into the in-flight count over time, from start:
// one step per change, entries and exits at the same instant applied
// together (exits first, so a slot handed over at once is no overlap).
func Steps(start time.Time, events []Event) []Step {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b Event) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		// Exits before entries at the same instant.
		return cmp.Compare(boolInt(a.Enter), boolInt(b.Enter))
	})
	steps := []Step{{At: 0, Value: 0}}
	n := 0
	for i, e := range evs {
		if e.Enter {
			n++
		} else if n > 0 {
			n--
		}
		if i+1 < len(evs) && evs[i+1].At.Equal(e.At) {
			continue
		}
		at := max(e.At.Sub(start), 0)
		if last := &steps[len(steps)-1]; last.At == at {
			last.Value = n
		} else if last.Value != n {
			steps = append(steps, Step{At: at, Value: n})
		}
	}
	return steps
}

// Peak is the highest value of steps.
func Peak(steps []Step) int {
	p := 0
	for _, s := range steps {
		p = max(p, s.Value)
	}
	return p
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Panel is one run: its steps, the cap it should stay under, a title.
type Panel struct {
	Title string
	Steps []Step
	// Cap draws a dashed line at this value; 0 draws none.
	Cap int
	// Color of the steps, an SVG color; "" is a default blue.
	Color string
}

// Chart is panels stacked vertically, sharing one time axis.
type Chart struct {
	Title string
	// Caption is a line of small text under the title.
	Caption string
	Panels  []Panel
	// Width is the picture's width in pixels; 0 means 800.
	Width int
}

// Geometry, in pixels.
const (
	panelHeight = 150
	marginLeft  = 48
	marginRight = 16
	headerH     = 76
	panelGap    = 44
	axisH       = 28
)

// WriteSVG draws c as an SVG document.
func WriteSVG(w io.Writer, c Chart) error {
	if len(c.Panels) == 0 {
		return errors.New("chart: no panels")
	}
	width := c.Width
	if width == 0 {
		width = 800
	}
	plotW := float64(width - marginLeft - marginRight)
	if plotW <= 0 {
		return fmt.Errorf("chart: width %d is too small", width)
	}
	var end time.Duration
	top := 1
	for _, p := range c.Panels {
		if len(p.Steps) > 0 {
			end = max(end, p.Steps[len(p.Steps)-1].At)
		}
		top = max(top, Peak(p.Steps), p.Cap)
	}
	if end <= 0 {
		end = time.Second
	}
	height := headerH + len(c.Panels)*(panelHeight+panelGap) + axisH - panelGap + 8
	x := func(d time.Duration) float64 { return marginLeft + plotW*float64(d)/float64(end) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", marginLeft, esc(c.Title))
	if c.Caption != "" {
		fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">%s</text>`+"\n", marginLeft, esc(c.Caption))
	}
	ticks := timeTicks(end)
	for i, p := range c.Panels {
		y0 := float64(headerH + i*(panelHeight+panelGap)) // panel top
		y := func(v int) float64 { return y0 + panelHeight - float64(panelHeight)*float64(v)/float64(top) }
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold">%s</text>`+"\n", marginLeft, y0-8, esc(p.Title))
		// Grid and y axis: one line per value.
		for v := 0; v <= top; v += yStep(top) {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, y(v), marginLeft+plotW, y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%d</text>`+"\n", marginLeft-6, y(v)+4, v)
		}
		for _, t := range ticks {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x(t), y0, x(t), y0+panelHeight)
		}
		color := p.Color
		if color == "" {
			color = "#1f6fb4"
		}
		// The cap under the steps, so that steps at the cap stay visible.
		if p.Cap > 0 {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4" stroke-width="1.5"/>`+"\n", marginLeft, y(p.Cap), marginLeft+plotW, y(p.Cap))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#c0392b">cap %d</text>`+"\n", marginLeft+plotW-4, y(p.Cap)-5, p.Cap)
		}
		if pts := path(p.Steps, end, x, y); pts != "" {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", pts, esc(color))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#333">peak %d</text>`+"\n", marginLeft+plotW-4, y0+12, Peak(p.Steps))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", marginLeft, y0+panelHeight, marginLeft+plotW, y0+panelHeight)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", marginLeft, y0, marginLeft, y0+panelHeight)
	}
	// The time axis, under the last panel.
	yAxis := float64(headerH + len(c.Panels)*(panelHeight+panelGap) - panelGap)
	for _, t := range ticks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x(t), yAxis+16, tickLabel(t, end))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">time since the burst started</text>`+"\n", marginLeft+plotW, yAxis+30)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// path is the SVG path of steps: horizontal runs and vertical jumps, held
// to end.
func path(steps []Step, end time.Duration, x func(time.Duration) float64, y func(int) float64) string {
	if len(steps) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "M%.1f %.1f", x(steps[0].At), y(steps[0].Value))
	for i := 1; i < len(steps); i++ {
		fmt.Fprintf(&b, "H%.1f V%.1f", x(steps[i].At), y(steps[i].Value))
	}
	fmt.Fprintf(&b, "H%.1f", x(end))
	return b.String()
}

// yStep is the spacing of y grid lines: every value up to 10, then
// coarser.
func yStep(top int) int {
	return max(1, int(math.Ceil(float64(top)/10)))
}

// timeTicks are at most 11 round instants (1, 2 or 5 × a power of ten
// milliseconds apart) from 0 to end.
func timeTicks(end time.Duration) []time.Duration {
	step := time.Millisecond
	for mult := 0; end/step > 10; mult = (mult + 1) % 3 {
		step *= []time.Duration{2, 5, 10}[mult]
		step /= []time.Duration{1, 2, 5}[mult]
	}
	var out []time.Duration
	for t := time.Duration(0); t <= end; t += step {
		out = append(out, t)
	}
	return out
}

func tickLabel(t, end time.Duration) string {
	if end >= 2*time.Second {
		return fmt.Sprintf("%gs", t.Seconds())
	}
	return fmt.Sprintf("%dms", t.Milliseconds())
}

func esc(s string) string { return html.EscapeString(s) }

package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 720, 180
	padL, padB     = 36, 22
	padT, padR     = 8, 8
)

// chartSVG draws a server's calls in flight, limit and waiting callers over
// the last span, as steps (each reading holds until the next). It is a few
// lines of SVG the server renders with the fragment, so it updates with
// htmx like the rest and needs no script: a chart library would need one.
func chartSVG(samples []sample, now time.Time, span time.Duration) template.HTML {
	top := 1
	for _, s := range samples {
		top = max(top, s.InFlight, s.Limit, s.Waiting)
	}
	top += max(1, top/5)
	x := func(t time.Time) float64 {
		f := 1 - float64(now.Sub(t))/float64(span)
		return padL + max(0, f)*float64(chartW-padL-padR)
	}
	y := func(v int) float64 { return float64(chartH-padB) - float64(v)/float64(top)*float64(chartH-padB-padT) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="calls in flight, limit and waiting callers over the last %s">`, chartW, chartH, roundDur(span))
	// Axes and grid: a line at every step of the value axis.
	step := max(1, top/4)
	for v := 0; v <= top; v += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f">%d</text>`,
			padL, chartW-padR, y(v), y(v), padL-6, y(v)+4, v)
	}
	for m := 0; m <= int(span/time.Minute); m += max(1, int(span/time.Minute)/5) {
		xx := x(now.Add(-time.Duration(m) * time.Minute))
		label := "now"
		if m > 0 {
			label = fmt.Sprintf("-%dm", m)
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, xx, chartH-6, label)
	}
	line := func(class string, v func(sample) int) {
		if len(samples) == 0 {
			return
		}
		var pts []string
		for i, s := range samples {
			if i > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At), y(v(samples[i-1]))))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At), y(v(s))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(now), y(v(samples[len(samples)-1]))))
		fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, class, strings.Join(pts, " "))
	}
	line("limit", func(s sample) int { return s.Limit })
	line("waiting", func(s sample) int { return s.Waiting })
	line("inflight", func(s sample) int { return s.InFlight })
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

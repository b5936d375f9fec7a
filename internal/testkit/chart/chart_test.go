package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func at(ms int) time.Time { return time.UnixMilli(int64(1_000_000 + ms)) }

func TestSteps(t *testing.T) {
	start := at(0)
	evs := []Event{
		{at(10), true}, {at(10), true}, // two enter together
		{at(30), false}, {at(30), true}, // a slot handed over at once: no bump to 3
		{at(50), false}, {at(60), false},
	}
	got := Steps(start, evs)
	want := []Step{{0, 0}, {10 * time.Millisecond, 2}, {50 * time.Millisecond, 1}, {60 * time.Millisecond, 0}}
	if !slices.Equal(got, want) {
		t.Errorf("Steps = %v, want %v", got, want)
	}
	if p := Peak(got); p != 2 {
		t.Errorf("Peak = %d, want 2", p)
	}
	// Out of order input, an exit without an entry (recording began
	// mid-call): sorted, never below zero.
	got = Steps(start, []Event{{at(20), false}, {at(5), true}, {at(1), false}})
	if want := []Step{{0, 0}, {5 * time.Millisecond, 1}, {20 * time.Millisecond, 0}}; !slices.Equal(got, want) {
		t.Errorf("Steps = %v, want %v", got, want)
	}
}

func TestTimeTicks(t *testing.T) {
	for _, tc := range []struct {
		end  time.Duration
		step time.Duration
	}{
		{5 * time.Millisecond, time.Millisecond},
		{90 * time.Millisecond, 10 * time.Millisecond},
		{1500 * time.Millisecond, 200 * time.Millisecond},
		{12 * time.Second, 2 * time.Second},
		{40 * time.Second, 5 * time.Second},
	} {
		ticks := timeTicks(tc.end)
		if len(ticks) < 2 || len(ticks) > 11 || ticks[0] != 0 || ticks[1] != tc.step || ticks[len(ticks)-1] > tc.end {
			t.Errorf("timeTicks(%v) = %v, want steps of %v", tc.end, ticks, tc.step)
		}
	}
}

// TestWriteSVG: the document is well-formed XML, draws one path per panel
// following its steps, the cap line and the peak, and escapes titles.
func TestWriteSVG(t *testing.T) {
	c := Chart{
		Title:   "calls in flight <upstream>",
		Caption: "cap 2 & 4 processes",
		Panels: []Panel{
			{Title: "in-process", Steps: []Step{{0, 0}, {time.Second, 8}, {2 * time.Second, 0}}, Cap: 2},
			{Title: "mcpgate", Steps: []Step{{0, 0}, {time.Second, 2}, {3 * time.Second, 0}}, Cap: 2, Color: "green"},
		},
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, c); err != nil {
		t.Fatal(err)
	}
	doc := buf.String()
	dec := xml.NewDecoder(strings.NewReader(doc))
	paths, texts := 0, []string{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			texts = append(texts, string(cd))
		}
	}
	if paths != 2 {
		t.Errorf("%d paths, want one per panel", paths)
	}
	for _, want := range []string{"calls in flight <upstream>", "cap 2 & 4 processes", "in-process", "mcpgate", "cap 2", "peak 8", "peak 2", "0s", "3s"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	// The step path of the second panel: up to 2 at 1 s, down at 3 s,
	// held to the end of the shared axis.
	if !strings.Contains(doc, `stroke="green"`) {
		t.Errorf("the panel's color is not used")
	}
	if err := WriteSVG(io.Discard, Chart{}); err == nil {
		t.Error("a chart without panels was drawn")
	}
}

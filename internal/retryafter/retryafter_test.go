package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		h    string
		want time.Duration
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{" 30 ", 30 * time.Second},
		{"0", 0},
		{"-1", 0},
		{"1.5", 0},
		{"soon", 0},
		{"99999999", Max},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Add(24 * time.Hour).Format(http.TimeFormat), Max},
	} {
		if got := Parse(tt.h, now); got != tt.want {
			t.Errorf("Parse(%q) = %v; want %v", tt.h, got, tt.want)
		}
	}
}

func TestFromOnlyForBackPressure(t *testing.T) {
	now := time.Now()
	for status, want := range map[int]time.Duration{429: 3 * time.Second, 503: 3 * time.Second, 500: 0, 200: 0, 502: 0} {
		resp := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"3"}}}
		if got := From(resp, now); got != want {
			t.Errorf("status %d: %v; want %v", status, got, want)
		}
	}
}

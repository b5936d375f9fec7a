// Package gatewaylog reads the gateway's request records — one JSON line
// per request, msg "request", as internal/gateway logs them — from a file
// (make dev's .dev/logs/gateway.log) or a CloudWatch Logs group (a deployed
// stack's), and the console's audit records (msg "audit") from the same
// places. mcpgate refusals and the console's Calls screen read through it.
package gatewaylog

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
)

// Record is the part of the gateway's request record that tools read.
type Record struct {
	Time       time.Time `json:"time"`
	Msg        string    `json:"msg,omitempty"`
	RequestID  string    `json:"request_id"`
	Method     string    `json:"method,omitempty"`
	Path       string    `json:"path,omitempty"`
	Status     int       `json:"status"`
	DurationMS int64     `json:"duration_ms"`
	Principal  string    `json:"principal,omitempty"`
	Team       string    `json:"team,omitempty"`
	MCPMethod  string    `json:"mcp_method,omitempty"`
	ServerID   string    `json:"server_id,omitempty"`
	Tool       string    `json:"tool,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	Code       string    `json:"code,omitempty"`
	Error      string    `json:"error,omitempty"`
	WaitMS     int64     `json:"wait_ms,omitempty"`
}

// MsgRequest is the msg of a request record.
const MsgRequest = "request"

// Refused reports whether the request was refused or failed: it carries an
// error code, or an HTTP error status.
func (r *Record) Refused() bool { return r.Code != "" || r.Status >= 400 }

// Parse reads one log line as a request record; at is the line's time
// when the record has none (a CloudWatch event's timestamp). Other lines
// (the gateway's other records, EMF records, Lambda's own lines) are not
// records.
func Parse(line string, at time.Time) (Record, bool) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return Record{}, false
	}
	var rec Record
	if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != MsgRequest {
		return Record{}, false
	}
	if rec.Time.IsZero() {
		rec.Time = at
	}
	return rec, true
}

// Filter selects request records.
type Filter struct {
	// Since, when set, leaves out older records.
	Since time.Time
	// Server and Principal, when set, keep only that server's, and that
	// caller's (see PrincipalMatches).
	Server, Principal string
	// Codes, when set, keep only refusals with these codes.
	Codes []string
}

// Selects reports whether rec is among the requests f selects, codes
// aside (see Codes).
func (f Filter) Selects(rec *Record) bool {
	return (f.Since.IsZero() || !rec.Time.Before(f.Since)) &&
		(f.Server == "" || rec.ServerID == f.Server) &&
		(f.Principal == "" || PrincipalMatches(rec.Principal, rec.Team, f.Principal))
}

// Coded reports whether rec's code is one of f's Codes (any, when none).
func (f Filter) Coded(rec *Record) bool {
	return len(f.Codes) == 0 || slices.Contains(f.Codes, rec.Code)
}

// PrincipalMatches reports whether the logged principal got, of team, is
// the one want names: a prefix of it, its label in mcpgate status
// (k:1a2b3c4d5e6f7a8b, which starts with the hex of the logged
// key:1a2b3c4d5e6f), or its team's label there (t: and the start of the
// hex SHA-256 of the team's name).
func PrincipalMatches(got, team, want string) bool {
	if strings.HasPrefix(got, want) {
		return true
	}
	wk, wid, ok := strings.Cut(want, ":")
	if !ok || len(wk) != 1 || wid == "" {
		return false
	}
	if wk == "t" {
		sum := sha256.Sum256([]byte(team))
		return team != "" && strings.HasPrefix(hex.EncodeToString(sum[:]), wid)
	}
	gk, gid, _ := strings.Cut(got, ":")
	return gid != "" && strings.HasPrefix(gk, wk) && (strings.HasPrefix(gid, wid) || strings.HasPrefix(wid, gid))
}

// Pattern is the CloudWatch Logs filter pattern of the records f selects,
// refused ones only when refused (callers filter again themselves, so a
// pattern the service reads differently costs only transfer).
func (f Filter) Pattern(refused bool) string {
	terms := []string{`($.msg = "request")`}
	if refused {
		terms = append(terms, `($.code = "*")`)
	}
	if f.Server != "" {
		terms = append(terms, fmt.Sprintf(`($.server_id = %q)`, f.Server))
	}
	if len(f.Codes) == 1 {
		terms = append(terms, fmt.Sprintf(`($.code = %q)`, f.Codes[0]))
	}
	return "{ " + strings.Join(terms, " && ") + " }"
}

// MaxLine is the longest log line read; longer ones are skipped.
const MaxLine = 4 << 20

// Lines calls fn with each line of r.
func Lines(r io.Reader, fn func(line string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	for sc.Scan() {
		fn(sc.Text())
	}
	return sc.Err()
}

// LogsAPI is the CloudWatch Logs operation the readers use.
type LogsAPI interface {
	FilterLogEvents(ctx context.Context, in *cloudwatchlogs.FilterLogEventsInput, optFns ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.FilterLogEventsOutput, error)
}

var _ LogsAPI = (*cloudwatchlogs.Client)(nil)

// ErrTruncated means a group held more events than the reader was to read.
var ErrTruncated = errors.New("gatewaylog: more events than read")

// Events calls fn with each event of group matching pattern since since
// (zero: all), with its timestamp, reading at most max events (then it
// returns ErrTruncated).
func Events(ctx context.Context, cw LogsAPI, group, pattern string, since time.Time, max int, fn func(msg string, at time.Time)) error {
	in := &cloudwatchlogs.FilterLogEventsInput{LogGroupName: aws.String(group), FilterPattern: aws.String(pattern)}
	if !since.IsZero() {
		in.StartTime = aws.Int64(since.UnixMilli())
	}
	p := cloudwatchlogs.NewFilterLogEventsPaginator(cw, in)
	n := 0
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, e := range out.Events {
			fn(aws.ToString(e.Message), time.UnixMilli(aws.ToInt64(e.Timestamp)))
			n++
		}
		if n >= max {
			return ErrTruncated
		}
	}
	return nil
}

// Tail follows a log file as it grows: each Read returns the lines
// appended since the last one (from the start the first time, at most
// MaxTail bytes back), and starts again from the beginning when the file
// was replaced or cut (make dev starts fresh logs each run).
type Tail struct {
	Path string
	off  int64
	ino  uint64
}

// MaxTail bounds how far back a Tail's first read starts.
const MaxTail = 16 << 20

// Read calls fn with each complete line appended since the last Read.
func (t *Tail) Read(fn func(line string)) error {
	f, err := os.Open(t.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	ino := inode(fi)
	if fi.Size() < t.off || ino != t.ino {
		t.off = 0
	}
	t.ino = ino
	// A first read of a long file starts MaxTail from its end, after the
	// line cut there.
	skipFirst := false
	if t.off == 0 && fi.Size() > MaxTail {
		t.off, skipFirst = fi.Size()-MaxTail, true
	}
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			// An incomplete last line is read again once it is whole.
			return nil
		}
		t.off += int64(len(line))
		if skipFirst {
			skipFirst = false
			continue
		}
		if len(line) <= MaxLine {
			fn(strings.TrimSuffix(line, "\n"))
		}
	}
}

package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/gatewaylog"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

var refusalsCmd = &command{
	name:    "refusals",
	args:    "[--since D] [--server ID] [--principal P] [--code CODE,...] [--limit N] [--json] [--log FILE | --log-group NAME]",
	summary: "why calls were refused: recent refusals and failures from the gateway's log",
	help: `
Reads the gateway's request log (one record per request, msg "request")
and shows the requests it refused or that failed, those with an error
code: first grouped by code, server and caller (principal), with a count,
the last time and the latest request ids; then the latest records one by
one (time, request id, status, code, server, tool, principal and, for
failures, the error the gateway logged); then what each code seen means
and where to look next. A request id is what the caller got in
X-Request-Id (under Lambda, the invocation's request id): find the whole
record with it.

Where the log is:
  --log FILE         a file of the gateway's log lines (make dev's is
                     .dev/logs/gateway.log, which .dev/env exports as
                     MCPGATE_LOG); - for standard input
  --log-group NAME   a deployed gateway's CloudWatch log group, read with
                     FilterLogEvents (MCPGATE_LOG_GROUP; with --stack NAME,
                     the stack's LogGroupName output)

Flags:
  --since D          only requests of the last D (default 1h; 0: all)
  --server ID        only this server
  --principal P      only this caller: a principal as logged (key:1a2b3c4d5e6f,
                     or a prefix of one) or as status labels leases
                     (k:1a2b3c4d5e6f7a8b; a team's t:... matches its members)
  --code CODE,...    only these codes (AT_CAPACITY, FORBIDDEN, ...)
  --limit N          records shown one by one, the latest (default 20)
  --json             print the groups and records as JSON, for scripts

Examples:
  mcpgate refusals                                  # make dev, after source .dev/env
  mcpgate refusals --stack mcpgate --since 15m --code AT_CAPACITY,QUEUE_TIMEOUT
`,
	run: runRefusals,
}

// logRecord is the gateway's request record (gatewaylog.Record).
type logRecord = gatewaylog.Record

// refusalGroup is the refusals of one code, server and principal.
type refusalGroup struct {
	Code      string    `json:"code"`
	Status    int       `json:"status"`
	ServerID  string    `json:"server_id,omitempty"`
	Principal string    `json:"principal,omitempty"`
	Count     int       `json:"count"`
	Last      time.Time `json:"last"`
	// RequestIDs are the latest few, newest first.
	RequestIDs []string `json:"request_ids"`
}

type refusalsReport struct {
	Source string     `json:"source"`
	Since  *time.Time `json:"since,omitempty"`
	// Requests is how many request records matched the filters (but the
	// code), when the source gives every record (a file; a log group is
	// asked for the refused ones only); Refused how many carry an error
	// code.
	Requests *int           `json:"requests,omitempty"`
	Refused  int            `json:"refused"`
	Groups   []refusalGroup `json:"groups"`
	// Records are the latest refusals, oldest first.
	Records []logRecord `json:"records"`
	// Truncated says the log held more than the CLI reads at once.
	Truncated bool `json:"truncated,omitempty"`

	requests int // request records read that the filter selects
}

// refusalFilter selects records (gatewaylog.Filter).
type refusalFilter = gatewaylog.Filter

// maxRecords bounds the request records read from a log group at once.
const maxRecords = 20000

// idsPerGroup is how many request ids a group shows.
const idsPerGroup = 3

func runRefusals(c *cli, args []string) error {
	fs := c.newFlags()
	since := fs.Duration("since", time.Hour, "")
	server := fs.String("server", "", "")
	principal := fs.String("principal", "", "")
	codes := fs.String("code", "", "")
	limit := fs.Int("limit", 20, "")
	asJSON := fs.Bool("json", false, "")
	logFile := fs.String("log", "", "")
	logGroup := fs.String("log-group", "", "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("want no arguments, got %d", len(pos))
	}
	if *since < 0 || *limit < 0 {
		return usagef("--since and --limit must not be negative")
	}
	if *logFile != "" && *logGroup != "" {
		return usagef("give --log or --log-group, not both")
	}
	f := refusalFilter{Server: *server, Principal: *principal}
	if *since > 0 {
		f.Since = time.Now().Add(-*since)
	}
	for code := range strings.SplitSeq(*codes, ",") {
		if code = strings.ToUpper(strings.TrimSpace(code)); code != "" {
			f.Codes = append(f.Codes, code)
		}
	}

	var r *refusalsReport
	switch {
	case *logFile != "":
		r, err = c.refusalsFromFile(*logFile, f)
	case *logGroup != "":
		r, err = c.refusalsFromGroup(*logGroup, f)
	case c.stack != "":
		s, serr := c.readStack()
		if serr != nil {
			return serr
		}
		if s.LogGroup == "" {
			return fmt.Errorf("stack %q has no %s output: give --log-group NAME", c.stack, outLogGroup)
		}
		r, err = c.refusalsFromGroup(s.LogGroup, f)
	case c.getenv(envLogGroup) != "":
		r, err = c.refusalsFromGroup(c.getenv(envLogGroup), f)
	case c.getenv(envLog) != "":
		r, err = c.refusalsFromFile(c.getenv(envLog), f)
	default:
		return usagef("where is the gateway's log? Give --log FILE (make dev: .dev/logs/gateway.log, or source .dev/env), --log-group NAME or --stack NAME")
	}
	if err != nil {
		return err
	}
	if !f.Since.IsZero() {
		r.Since = &f.Since
	}
	r.summarize(*limit)
	if *asJSON {
		return printJSON(c.stdout, r)
	}
	return printRefusals(c.stdout, r)
}

// refusalsFromFile reads a file of log lines (- for stdin).
func (c *cli) refusalsFromFile(path string, f refusalFilter) (*refusalsReport, error) {
	var in io.Reader = c.stdin
	if path != "-" {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read the gateway's log: %w", err)
		}
		defer fh.Close()
		in = fh
	}
	r := &refusalsReport{Source: path}
	if err := gatewaylog.Lines(in, func(line string) { r.add(line, time.Time{}, f) }); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	r.Requests = &r.requests
	return r, nil
}

// logsAPI is the CloudWatch Logs operation the CLI uses.
type logsAPI = gatewaylog.LogsAPI

// refusalsFromGroup reads a log group's request records with an error
// code, of the filter's window.
func (c *cli) refusalsFromGroup(group string, f refusalFilter) (*refusalsReport, error) {
	cfg, err := c.awsConfig()
	if err != nil {
		return nil, err
	}
	cw := cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) {
		c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS")
	})
	return c.readGroup(cw, group, f)
}

func (c *cli) readGroup(cw logsAPI, group string, f refusalFilter) (*refusalsReport, error) {
	r := &refusalsReport{Source: "log group " + group}
	err := gatewaylog.Events(c.ctx, cw, group, f.Pattern(true), f.Since, maxRecords, func(msg string, at time.Time) { r.add(msg, at, f) })
	switch {
	case errors.Is(err, gatewaylog.ErrTruncated):
		r.Truncated = true
	case err != nil:
		return nil, fmt.Errorf("read log group %s: %w", group, c.awsHint(&awsError{err}))
	}
	return r, nil
}

// add takes one log line: a request record the filter selects is counted,
// and kept if refused. at is the line's time when the record has none.
func (r *refusalsReport) add(line string, at time.Time, f refusalFilter) {
	rec, ok := gatewaylog.Parse(line, at)
	if !ok || !f.Selects(&rec) {
		return
	}
	r.requests++
	if !rec.Refused() || !f.Coded(&rec) {
		return
	}
	rec.Msg = ""
	// The gateway redacts what it logs; a log from elsewhere may not be.
	rec.Error = safeurl.RedactText(rec.Error)
	r.Refused++
	r.Records = append(r.Records, rec)
}

// principalMatches reports whether the logged principal got, of team, is
// the one want names (gatewaylog.PrincipalMatches).
func principalMatches(got, team, want string) bool {
	return gatewaylog.PrincipalMatches(got, team, want)
}

// summarize groups the records and keeps the latest limit of them.
func (r *refusalsReport) summarize(limit int) {
	slices.SortStableFunc(r.Records, func(a, b logRecord) int { return a.Time.Compare(b.Time) })
	type key struct{ code, server, principal string }
	groups := map[key]*refusalGroup{}
	for i := len(r.Records) - 1; i >= 0; i-- { // newest first
		rec := r.Records[i]
		k := key{rec.Code, rec.ServerID, rec.Principal}
		g := groups[k]
		if g == nil {
			g = &refusalGroup{Code: rec.Code, Status: rec.Status, ServerID: rec.ServerID, Principal: rec.Principal, Last: rec.Time}
			groups[k] = g
		}
		g.Count++
		if len(g.RequestIDs) < idsPerGroup {
			g.RequestIDs = append(g.RequestIDs, rec.RequestID)
		}
	}
	r.Groups = make([]refusalGroup, 0, len(groups))
	for _, g := range groups {
		r.Groups = append(r.Groups, *g)
	}
	slices.SortFunc(r.Groups, func(a, b refusalGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.Last.Compare(a.Last), cmp.Compare(a.Code, b.Code),
			cmp.Compare(a.ServerID, b.ServerID), cmp.Compare(a.Principal, b.Principal))
	})
	if len(r.Records) > limit {
		r.Records = r.Records[len(r.Records)-limit:]
	}
	if r.Records == nil {
		r.Records = []logRecord{}
	}
}

func printRefusals(w io.Writer, r *refusalsReport) error {
	window := ""
	if r.Since != nil {
		window = " since " + r.Since.Local().Format("2006-01-02 15:04:05")
	}
	of := ""
	if r.Requests != nil {
		of = fmt.Sprintf(" of %d", *r.Requests)
	}
	fmt.Fprintf(w, "Refused or failed in %s%s: %d%s requests.\n", clip.Escape(r.Source), window, r.Refused, of)
	if r.Truncated {
		fmt.Fprintf(w, "(the first %d request records only: narrow --since)\n", maxRecords)
	}
	if r.Refused == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tCODE\tSTATUS\tSERVER\tPRINCIPAL\tLAST\tLATEST REQUEST IDS")
	for _, g := range r.Groups {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", g.Count, orDash(g.Code), g.Status, orDash(g.ServerID), orDash(g.Principal),
			g.Last.Local().Format("01-02 15:04:05"), clip.Escape(strings.Join(g.RequestIDs, " ")))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nThe latest %d, oldest first:\n", len(r.Records))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tREQUEST ID\tSTATUS\tCODE\tSERVER\tTOOL\tPRINCIPAL\tERROR")
	for _, rec := range r.Records {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", rec.Time.Local().Format("01-02 15:04:05.000"), orDash(rec.RequestID), rec.Status,
			orDash(rec.Code), orDash(rec.ServerID), orDash(rec.Tool), orDash(rec.Principal), clip.String(oneLine(rec.Error), 100))
	}
	tw.Flush()

	var seen []string
	for _, g := range r.Groups {
		if !slices.Contains(seen, g.Code) {
			seen = append(seen, g.Code)
		}
	}
	slices.Sort(seen)
	fmt.Fprintln(w, "\nWhat the codes mean:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, code := range seen {
		fmt.Fprintf(tw, "  %s\t%s\n", orDash(code), cmp.Or(codeHints[fault.Code(code)], "see the error codes in docs/api.md#errors"))
	}
	return tw.Flush()
}

// codeHints says, per code, why a request gets it and where to look next.
var codeHints = map[fault.Code]string{
	fault.AtCapacity:       "a cap was full (the server's, a tool's, the caller's share, the key's max_parallel_requests), callers were queued ahead, or as many waited as max_queued and the bulkhead allow (the answer's reason says which); mcpgate status SERVER shows who holds the slots",
	fault.RateLimited:      "a request-rate limit was reached (the key's rpm_limit, the server's, the caller's on it, a tool's), or the upstream said so itself; Retry-After says when a call may pass; mcpgate status SERVER shows the buckets",
	fault.QueueTimeout:     "no slot came free within queue_timeout: the cap is low for the load or calls hold slots long; mcpgate status SERVER",
	fault.CircuitOpen:      "the tool's circuit breaker is open after consecutive upstream failures, for everyone or for this caller alone when only its calls failed (the earlier records' ERROR says which); mcpgate status SERVER",
	fault.UpstreamTimeout:  "the upstream did not answer within the server's timeout (or the caller left first)",
	fault.UpstreamError:    "the upstream failed, could not be reached, or its credential could not be read (ERROR says which); mcpgate servers check SERVER",
	fault.Unauthorized:     "no credentials, an unknown or revoked key, or a refused token; mcpgate keys list",
	fault.Forbidden:        "the key's servers (or the token's scopes) do not include the server, or the Origin was refused",
	fault.NotFound:         "an unknown server, tool or route, or a tool hidden from the caller by the server's or the key's tool filters",
	fault.BadRequest:       "a malformed request, or arguments the tool's schema or the upstream refused (ERROR says which)",
	fault.StoreUnavailable: "DynamoDB failed or throttled beyond the retry budget, or a long call lost its slot",
	fault.AuthUnavailable:  "the OAuth issuer's signing keys could not be fetched to check a token",
	fault.PayloadTooLarge:  "the request body was over MAX_BODY_BYTES",
	fault.MethodNotAllowed: "the wrong HTTP method for the route",
	fault.Misconfigured:    "the server's item is invalid or its calls cannot fit the function's timeout; mcpgate servers get SERVER",
	fault.Internal:         "a bug in the gateway; the record's ERROR and the log around it have the detail",
}

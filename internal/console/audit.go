package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/mcpgate/mcpgate/internal/gatewaylog"
)

// MsgAudit is the msg of an audit record, beside the gateway's "request"
// records.
const MsgAudit = "audit"

// AuditRecord is what one operator action leaves: one JSON line, in the
// same shape as the gateway's own log records (time, msg), so the tools
// that read those read these.
type AuditRecord struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	// Operator is who acted: the STS caller's ARN when deployed, the OS
	// user locally.
	Operator string `json:"operator"`
	// Action is pause, resume, reset_breaker, release_lease, set_cap,
	// edit_server, test_connection, create_key or revoke_key.
	Action string `json:"action"`
	// ServerID and Target say what it was done to (a breaker's tool, a
	// lease id, a key's hash prefix).
	ServerID string `json:"server_id,omitempty"`
	Target   string `json:"target,omitempty"`
	// Detail says what changed ("max_concurrent_requests 2 → 3", "until
	// 2026-…"), never a secret or a key.
	Detail string `json:"detail,omitempty"`
	// Result is "ok", "refused" (the store's condition, or validation,
	// refused it: nothing was written) or "failed" (an error; it may or
	// may not have been written), and Error why.
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// Auditor writes audit records.
type Auditor interface {
	Audit(ctx context.Context, rec AuditRecord) error
}

// AuditReader reads the latest audit records back, newest first.
type AuditReader interface {
	Recent(ctx context.Context, limit int) ([]AuditRecord, error)
	// Where says where the records are, for people.
	Where() string
}

// FileAudit appends audit records to a file (created 0600), one JSON line
// each: the local console's audit log.
type FileAudit struct {
	Path string
	mu   sync.Mutex
}

var (
	_ Auditor     = (*FileAudit)(nil)
	_ AuditReader = (*FileAudit)(nil)
)

// Audit appends rec.
func (f *FileAudit) Audit(_ context.Context, rec AuditRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	fh, err := os.OpenFile(f.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	_, err = fh.Write(append(line, '\n'))
	return errors.Join(err, fh.Close())
}

// Recent reads the file's latest records.
func (f *FileAudit) Recent(_ context.Context, limit int) ([]AuditRecord, error) {
	var out []AuditRecord
	t := &gatewaylog.Tail{Path: f.Path}
	err := t.Read(func(line string) {
		if rec, ok := parseAudit(line); ok {
			out = append(out, rec)
		}
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	slices.Reverse(out)
	return out[:min(len(out), limit)], err
}

// Where is the file's path.
func (f *FileAudit) Where() string { return f.Path }

func parseAudit(line string) (AuditRecord, bool) {
	var rec AuditRecord
	if !strings.HasPrefix(strings.TrimSpace(line), "{") || json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != MsgAudit {
		return AuditRecord{}, false
	}
	return rec, true
}

// LogsWriter is the CloudWatch Logs operations CloudWatchAudit uses.
type LogsWriter interface {
	CreateLogStream(context.Context, *cloudwatchlogs.CreateLogStreamInput, ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.CreateLogStreamOutput, error)
	PutLogEvents(context.Context, *cloudwatchlogs.PutLogEventsInput, ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.PutLogEventsOutput, error)
	gatewaylog.LogsAPI
}

var _ LogsWriter = (*cloudwatchlogs.Client)(nil)

// AuditStream is the log stream, in the gateway's log group, that a
// deployed stack's audit records go to.
const AuditStream = "mcpgate-console-audit"

// CloudWatchAudit writes audit records as events of a log stream (the
// deployed gateway's log group, stream AuditStream), where mcpgate
// refusals-like tools and Logs Insights find them by msg = "audit".
type CloudWatchAudit struct {
	Logs   LogsWriter
	Group  string
	Stream string // "" means AuditStream

	mu      sync.Mutex
	created bool
}

var (
	_ Auditor     = (*CloudWatchAudit)(nil)
	_ AuditReader = (*CloudWatchAudit)(nil)
)

func (c *CloudWatchAudit) stream() string {
	if c.Stream == "" {
		return AuditStream
	}
	return c.Stream
}

// Audit puts rec as one event, creating the stream on first use.
func (c *CloudWatchAudit) Audit(ctx context.Context, rec AuditRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.created {
		_, err := c.Logs.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String(c.Group), LogStreamName: aws.String(c.stream())})
		var exists *cwtypes.ResourceAlreadyExistsException
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("audit log stream %s/%s: %w", c.Group, c.stream(), err)
		}
		c.created = true
	}
	_, err = c.Logs.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{
		LogGroupName:  aws.String(c.Group),
		LogStreamName: aws.String(c.stream()),
		LogEvents:     []cwtypes.InputLogEvent{{Message: aws.String(string(line)), Timestamp: aws.Int64(rec.Time.UnixMilli())}},
	})
	if err != nil {
		return fmt.Errorf("audit log stream %s/%s: %w", c.Group, c.stream(), err)
	}
	return nil
}

// Recent reads the stream's records of the last day.
func (c *CloudWatchAudit) Recent(ctx context.Context, limit int) ([]AuditRecord, error) {
	var out []AuditRecord
	err := gatewaylog.Events(ctx, c.Logs, c.Group, `{ $.msg = "audit" }`, time.Now().Add(-24*time.Hour), 1000, func(msg string, _ time.Time) {
		if rec, ok := parseAudit(msg); ok {
			out = append(out, rec)
		}
	})
	if errors.Is(err, gatewaylog.ErrTruncated) {
		err = nil
	}
	slices.SortStableFunc(out, func(a, b AuditRecord) int { return b.Time.Compare(a.Time) })
	return out[:min(len(out), limit)], err
}

// Where names the group and stream.
func (c *CloudWatchAudit) Where() string { return "log group " + c.Group + ", stream " + c.stream() }

// Package store holds what the gateway's DynamoDB tables share: their names
// from the environment, their key schemas, and the client built once per
// process from the standard AWS SDK configuration.
//
// Each domain package owns the items of its table (registry the servers,
// auth the keys, lease the leases, tasks the tasks; catalog keeps the
// fleet's tool lists in the leases table too, under keys no server id can
// take); this package only knows the tables exist.
package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// The environment variables that name the tables.
const (
	EnvServersTable = "SERVERS_TABLE"
	EnvLeasesTable  = "LEASES_TABLE"
	EnvKeysTable    = "KEYS_TABLE"
	// EnvTasksTable names the tasks table, which is optional: without it
	// the gateway runs no tasks.
	EnvTasksTable = "TASKS_TABLE"
)

// Partition key attribute names, one per table.
const (
	ServerIDAttr   = "server_id"
	LimiterKeyAttr = "limiter_key"
	KeyHashAttr    = "key_hash"
	TaskIDAttr     = "task_id"
	// TTLAttr is the TTL attribute of the leases and tasks tables.
	// DynamoDB deletes items whose TTL has passed, lazily; the gateway
	// uses it only to clean up abandoned lease items and ended tasks,
	// never to expire a lease or a task.
	TTLAttr = "ttl"
)

// Retry budget of the DynamoDB client.
const (
	MaxAttempts = 4
	MaxBackoff  = 250 * time.Millisecond
)

// Tables names the gateway's tables.
type Tables struct {
	// Servers holds one item per upstream server, edited by admins.
	Servers string
	// Leases holds one item per limiter key: the live leases of the
	// distributed semaphore.
	Leases string
	// Keys holds one item per API key, keyed by the key's SHA-256.
	Keys string
	// Tasks holds one item per MCP task, keyed by its handle. Optional:
	// empty means no tasks.
	Tasks string
}

// TablesFromEnv reads the table names from SERVERS_TABLE, LEASES_TABLE,
// KEYS_TABLE and TASKS_TABLE through getenv (os.Getenv if nil). Every one
// but TASKS_TABLE must be set.
func TablesFromEnv(getenv func(string) string) (Tables, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	t := Tables{
		Servers: getenv(EnvServersTable),
		Leases:  getenv(EnvLeasesTable),
		Keys:    getenv(EnvKeysTable),
		Tasks:   getenv(EnvTasksTable),
	}
	var missing []error
	for _, v := range []struct{ name, value string }{
		{EnvServersTable, t.Servers}, {EnvLeasesTable, t.Leases}, {EnvKeysTable, t.Keys},
	} {
		if v.value == "" {
			missing = append(missing, fmt.Errorf("%s is not set", v.name))
		}
	}
	return t, errors.Join(missing...)
}

// NewClient builds a DynamoDB client from the standard AWS SDK configuration:
// AWS_REGION, credentials from the usual chain, and AWS_ENDPOINT_URL_DYNAMODB
// for a local endpoint. Build it once per process and share it. A process
// that builds other AWS clients too loads the configuration once with
// LoadConfig and uses NewClientFromConfig.
func NewClient(ctx context.Context, optFns ...func(*config.LoadOptions) error) (*dynamodb.Client, error) {
	cfg, err := LoadConfig(ctx, optFns...)
	if err != nil {
		return nil, err
	}
	return NewClientFromConfig(cfg), nil
}

// LoadConfig reads the standard AWS SDK configuration, which must name a
// region.
func LoadConfig(ctx context.Context, optFns ...func(*config.LoadOptions) error) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, optFns...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load aws config: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, errors.New("load aws config: no region: set AWS_REGION (or AWS_PROFILE, to a profile with a region)")
	}
	return cfg, nil
}

// NewClientFromConfig builds the DynamoDB client from cfg. Throttled and
// failed requests are retried at most MaxAttempts times in all, with
// jittered backoff capped at MaxBackoff: a hot item sheds load quickly
// instead of holding callers for the SDK's default 20 s backoff.
func NewClientFromConfig(cfg aws.Config) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = MaxAttempts
			o.MaxBackoff = MaxBackoff
		})
	})
}

// Definitions returns the CreateTable inputs for the tables (the tasks
// table when named): on-demand billing, one string partition key each.
func (t Tables) Definitions() []*dynamodb.CreateTableInput {
	def := func(name, key string) *dynamodb.CreateTableInput {
		return &dynamodb.CreateTableInput{
			TableName:   aws.String(name),
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(key), KeyType: types.KeyTypeHash},
			},
		}
	}
	defs := []*dynamodb.CreateTableInput{
		def(t.Servers, ServerIDAttr),
		def(t.Leases, LimiterKeyAttr),
		def(t.Keys, KeyHashAttr),
	}
	if t.Tasks != "" {
		defs = append(defs, def(t.Tasks, TaskIDAttr))
	}
	return defs
}

// HasTTL reports whether the table named name keeps a TTL attribute
// (TTLAttr): the leases and tasks tables.
func (t Tables) HasTTL(name string) bool {
	return name != "" && (name == t.Leases || name == t.Tasks)
}

// TableAPI is the part of the DynamoDB client that table creation uses.
type TableAPI interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// CreateReport says what CreateTables did with each table.
type CreateReport struct {
	Table   string
	Created bool // false: it existed already
	// TTL is set when TTL is enabled on the table's TTLAttr.
	TTL bool
	// TTLNote is set when the TTL attribute could not be enabled, e.g. on a
	// local endpoint without the TimeToLive API.
	TTLNote string
}

// CreateTables creates the tables if they do not exist (the tasks table
// when named), waits until each is active, and enables TTL on the leases
// and tasks tables. It is idempotent.
func (t Tables) CreateTables(ctx context.Context, db TableAPI) ([]CreateReport, error) {
	var reports []CreateReport
	for _, in := range t.Definitions() {
		name := aws.ToString(in.TableName)
		r := CreateReport{Table: name, Created: true}
		if _, err := db.CreateTable(ctx, in); err != nil {
			var inUse *types.ResourceInUseException
			if !errors.As(err, &inUse) {
				return reports, fmt.Errorf("create table %s: %w", name, err)
			}
			r.Created = false
		}
		if err := waitActive(ctx, db, name); err != nil {
			return reports, err
		}
		if t.HasTTL(name) {
			r.TTLNote = enableTTL(ctx, db, name)
			r.TTL = r.TTLNote == ""
		}
		reports = append(reports, r)
	}
	return reports, nil
}

func waitActive(ctx context.Context, db TableAPI, name string) error {
	delay := 50 * time.Millisecond
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for table %s: %w", name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// enableTTL turns on TTL for a table and returns a note when it could not
// (the local server has no TimeToLive API; TTL is only cleanup).
func enableTTL(ctx context.Context, db TableAPI, name string) string {
	_, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttr),
			Enabled:       aws.Bool(true),
		},
	})
	if err == nil {
		return ""
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "UnknownOperationException":
			return "TTL not supported by this endpoint; skipped (TTL only cleans up abandoned items)"
		case "ValidationException":
			// Already enabled on this attribute.
			return ""
		}
	}
	return "enabling TTL failed: " + err.Error()
}

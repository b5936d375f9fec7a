// Package storetest runs a real DynamoDB-compatible server (dynalite, from
// infra/node_modules) on a loopback port for tests, and creates fresh tables
// per test so tests never see each other's items.
//
// One dynalite process serves a whole test binary. Use Main from TestMain so
// it is stopped when the tests end:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
// When dynalite is not installed, tests skip locally, saying so on the
// terminal, and fail in CI (CI=true), so a CI run can never pass by skipping
// (see package missing).
//
// The server answers a failed conditional write with the item when asked
// (ReturnValuesOnConditionCheckFailure: ALL_OLD), as DynamoDB does, so
// tests run the code that production runs. Setting STORETEST_CCF_ITEM=off
// starts it without that, as dynalite itself behaves, to run a package's
// tests on the fallback path of clients that read the item instead:
//
//	STORETEST_CCF_ITEM=off go test ./internal/lease
package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// Server is a running dynalite process.
type Server struct {
	// Endpoint is the server's URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	tableSeq   atomic.Int64
)

// Main runs the tests and then stops the shared dynalite, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared dynalite, if one was started. A TestMain
// that cannot use Main calls it after m.Run.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// Shared returns the test binary's dynalite, starting it on first use.
// Under -short (make check) it skips the test instead.
func Shared(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping under -short: needs dynalite")
	}
	sharedOnce.Do(func() { shared, sharedErr = Start() })
	if sharedErr != nil {
		unavailable(t, sharedErr)
	}
	return shared
}

// ErrNotInstalled means infra/node_modules has no dynalite.
var ErrNotInstalled = errors.New("dynalite is not installed (run `make deps`)")

func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNotInstalled) {
		missing.Skip(t, err.Error())
	}
	t.Fatalf("dynalite: %v", err)
}

// RepoRoot returns the directory holding go.mod, found upwards from the
// working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// CCFItemEnv names the switch that starts dynalite without the item in
// failed conditional writes' answers ("off"); anything else leaves it on.
const CCFItemEnv = "STORETEST_CCF_ITEM"

// CCFItem reports whether servers started now return the item with a failed
// conditional write, as DynamoDB does.
func CCFItem() bool { return os.Getenv(CCFItemEnv) != "off" }

// Start launches a new dynalite on a free loopback port and waits until it
// says it is listening. Stop it with Stop.
func Start() (*Server, error) { return StartWith(CCFItem()) }

// StartWith is Start with the item returned on a failed conditional write
// (ccfItem) or not, whatever the environment says.
func StartWith(ccfItem bool) (*Server, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "infra", "dynalite.js")
	if _, err := os.Stat(filepath.Join(root, "infra", "node_modules", "dynalite")); err != nil {
		return nil, ErrNotInstalled
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node not found: %w", ErrNotInstalled)
	}
	cmd := exec.Command(node, script, "--host", "127.0.0.1", "--port", "0", "--ccfItem", strconv.FormatBool(ccfItem))
	cmd.Stderr = os.Stderr
	ep, done, err := Listen(cmd, "dynalite listening ", 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dynalite: %w", err)
	}
	return &Server{Endpoint: ep, cmd: cmd, done: done}, nil
}

// Listen starts cmd, which dies with the test process, and waits up to
// timeout for a line of its standard output that starts with prefix: the
// rest of that line (an endpoint) is returned, and done is closed when the
// process exits. A process that exits or does not say so in time is an
// error (and is killed).
func Listen(cmd *exec.Cmd, prefix string, timeout time.Duration) (endpoint string, done chan struct{}, err error) {
	SetParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start: %w", err)
	}
	done = make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if ep, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case ready <- ep:
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case ep := <-ready:
		return ep, done, nil
	case <-done:
		return "", nil, errors.New("exited before listening")
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return "", nil, fmt.Errorf("did not start within %v", timeout)
	}
}

// Stop kills the process and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

// Env is one test's view of the store: a client and four fresh tables
// (servers, leases, keys and tasks).
type Env struct {
	Endpoint string
	Client   *dynamodb.Client
	Tables   store.Tables
}

// Vars returns the environment variables a gateway process needs to use env.
func (e *Env) Vars() []string {
	return []string{
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=local",
		"AWS_SECRET_ACCESS_KEY=local",
		"AWS_ENDPOINT_URL_DYNAMODB=" + e.Endpoint,
		"AWS_EC2_METADATA_DISABLED=true",
		store.EnvServersTable + "=" + e.Tables.Servers,
		store.EnvLeasesTable + "=" + e.Tables.Leases,
		store.EnvKeysTable + "=" + e.Tables.Keys,
		store.EnvTasksTable + "=" + e.Tables.Tasks,
	}
}

// NewEnv creates four fresh tables on the shared dynalite.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	s := Shared(t)
	db := Client(t, s.Endpoint)
	n := tableSeq.Add(1)
	prefix := fmt.Sprintf("t%d-%d", os.Getpid(), n)
	tables := store.Tables{Servers: prefix + "-servers", Leases: prefix + "-leases", Keys: prefix + "-keys", Tasks: prefix + "-tasks"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tables.CreateTables(ctx, db); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	return &Env{Endpoint: s.Endpoint, Client: db, Tables: tables}
}

// Client returns a DynamoDB client for endpoint with static local credentials.
func Client(t testing.TB, endpoint string) *dynamodb.Client {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")),
	)
	if err != nil {
		t.Fatalf("aws config: %v", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	})
}

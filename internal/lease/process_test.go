package lease

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Worker processes: the test binary re-executed with LEASE_WORKER set runs
// runWorker instead of the tests, as one more gateway-like OS process.
const workerEnv = "LEASE_WORKER"

func isWorker() bool { return os.Getenv(workerEnv) != "" }

func runWorker() {
	if err := worker(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func worker() error {
	endpoint, table, key := os.Getenv("LEASE_ENDPOINT"), os.Getenv("LEASE_TABLE"), os.Getenv("LEASE_KEY")
	cap, _ := strconv.Atoi(os.Getenv("LEASE_CAP"))
	rounds, _ := strconv.Atoi(os.Getenv("LEASE_ROUNDS"))
	observer := os.Getenv("LEASE_OBSERVER")
	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
	l := New(db, table, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 { // 4 concurrent callers per process
		wg.Go(func() {
			for range rounds {
				ls, err := l.Acquire(ctx, Request{Key: key, Cap: cap, Hold: 10 * time.Second, Wait: 2 * time.Minute, MaxQueued: 64,
					Holder: "w" + strconv.Itoa(os.Getpid())})
				if err != nil {
					errs <- err
					return
				}
				for i, path := range []string{"/enter", "/exit"} {
					if i == 1 {
						// Hold the place a while, so holders overlap.
						time.Sleep(time.Duration(10+mrand.IntN(30)) * time.Millisecond)
					}
					resp, err := http.Post(observer+path+"?id="+ls.ID(), "text/plain", nil)
					if err != nil {
						errs <- err
						return
					}
					resp.Body.Close()
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					errs <- fmt.Errorf("release: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// observer counts holders across processes: each worker reports entering
// and leaving while it holds its lease.
type observer struct {
	mu             sync.Mutex
	inFlight, peak int
	entered        int
	ids            map[string]bool
	dup            []string
}

func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch r.URL.Path {
	case "/enter":
		id := r.URL.Query().Get("id")
		if o.ids[id] {
			o.dup = append(o.dup, id)
		}
		o.ids[id] = true
		o.entered++
		o.inFlight++
		o.peak = max(o.peak, o.inFlight)
	case "/exit":
		o.inFlight--
	}
}

func TestCapHoldsAcrossProcesses(t *testing.T) {
	env := storetest.NewEnv(t)
	const cap, procs, rounds = 2, 4, 5
	obs := &observer{ids: map[string]bool{}}
	srv := httptest.NewServer(obs)
	defer srv.Close()
	var cmds []*exec.Cmd
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			workerEnv+"=1",
			"LEASE_ENDPOINT="+env.Endpoint,
			"LEASE_TABLE="+env.Tables.Leases,
			"LEASE_KEY=shared",
			"LEASE_CAP="+strconv.Itoa(cap),
			"LEASE_ROUNDS="+strconv.Itoa(rounds),
			"LEASE_OBSERVER="+srv.URL,
		)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.peak > cap {
		t.Errorf("peak holders across %d processes = %d, cap %d", procs, obs.peak, cap)
	}
	if want := procs * 4 * rounds; obs.entered != want {
		t.Errorf("%d leases held, want %d", obs.entered, want)
	}
	if len(obs.dup) > 0 {
		t.Errorf("lease ids granted twice: %v", obs.dup)
	}
	if left := leaseIDs(t, env, "shared"); len(left) != 0 {
		t.Errorf("leases left: %v", left)
	}
	t.Logf("%d processes × 4 callers × %d rounds, cap %d: peak %d", procs, rounds, cap, obs.peak)
}

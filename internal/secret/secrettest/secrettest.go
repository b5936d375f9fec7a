// Package secrettest runs moto_server (python3 moto) on a loopback port, a
// real Secrets Manager and SSM over HTTP, for tests of code that reads
// secrets with the AWS SDK. The same server answers for every service moto
// has (Cognito, STS, CloudFormation, CloudWatch Logs, ...) at Endpoint.
//
// One moto process serves a whole test binary; stop it after the tests:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		secrettest.StopShared()
//		os.Exit(code)
//	}
//
// When python3 moto is not installed, tests skip locally, saying so on the
// terminal, and fail in CI (CI=true) (see package missing). Every test names its secrets under a prefix of its
// own (Name), so tests never see each other's values.
package secrettest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// Region is the region moto's resources live in.
const Region = "us-east-1"

// Server is a running moto_server.
type Server struct {
	// Endpoint is the server's URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
	sm       *secretsmanager.Client
	ssm      *ssm.Client
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	seq        atomic.Int64
)

// ErrNotInstalled means python3 has no moto.
var ErrNotInstalled = errors.New("python3 moto is not installed (pip install 'moto[server]')")

// StopShared stops the shared moto_server, if one was started.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// Shared returns the test binary's moto_server, starting it on first use.
// Under -short (make check) it skips the test instead.
func Shared(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping under -short: needs moto_server")
	}
	sharedOnce.Do(func() { shared, sharedErr = Start() })
	if sharedErr != nil {
		if errors.Is(sharedErr, ErrNotInstalled) {
			missing.Skip(t, "moto_server: "+sharedErr.Error())
		}
		t.Fatalf("moto: %v", sharedErr)
	}
	return shared
}

// serve runs moto's server on a free loopback port and says which.
const serve = `
from werkzeug.serving import make_server
from moto.server import DomainDispatcherApplication, create_backend_app
srv = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True)
print("moto listening http://127.0.0.1:%d" % srv.server_port, flush=True)
srv.serve_forever()
`

// Start launches a new moto_server on a free loopback port and waits until
// it listens. Stop it with Stop.
func Start() (*Server, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, ErrNotInstalled
	}
	if err := exec.Command(py, "-c", "import moto.server, werkzeug").Run(); err != nil {
		return nil, ErrNotInstalled
	}
	cmd := exec.Command(py, "-c", serve)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	// moto logs every request on stderr; nobody reads it.
	ep, done, err := storetest.Listen(cmd, "moto listening ", 60*time.Second)
	if err != nil {
		return nil, fmt.Errorf("moto: %w", err)
	}
	s := &Server{Endpoint: ep, cmd: cmd, done: done}
	cfg := s.Config()
	s.sm = secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(s.Endpoint) })
	s.ssm = ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = aws.String(s.Endpoint) })
	return s, nil
}

// Stop kills the process and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

// Config is an AWS configuration with static local credentials, without
// endpoints: the clients below set theirs.
func (s *Server) Config() aws.Config {
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")),
	)
	if err != nil {
		panic("aws config: " + err.Error()) // static options cannot fail
	}
	return cfg
}

// Vars returns the environment variables that point a process's AWS SDK
// at this server for Secrets Manager and SSM.
func (s *Server) Vars() []string {
	return []string{
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + s.Endpoint,
		"AWS_ENDPOINT_URL_SSM=" + s.Endpoint,
	}
}

// SecretsManager returns a client of the server's Secrets Manager.
func (s *Server) SecretsManager() *secretsmanager.Client { return s.sm }

// SSM returns a client of the server's SSM.
func (s *Server) SSM() *ssm.Client { return s.ssm }

// Resolver returns a Resolver reading from this server, with opts.
func (s *Server) Resolver(opts secret.Options) *secret.Resolver {
	if opts.SecretsManager == nil {
		opts.SecretsManager = s.sm
	}
	if opts.SSM == nil {
		opts.SSM = s.ssm
	}
	return secret.New(opts)
}

// Name returns a name unique to this test binary and call, under the
// mcpgate/ prefix: "mcpgate/t<pid>-<n>/<base>".
func Name(base string) string {
	return fmt.Sprintf("mcpgate/t%d-%d/%s", os.Getpid(), seq.Add(1), base)
}

// PutSecret creates the secret name with value and returns its ARN.
func (s *Server) PutSecret(t testing.TB, name, value string) string {
	t.Helper()
	out, err := s.sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String(name), SecretString: aws.String(value),
	})
	if err != nil {
		t.Fatalf("create secret %s: %v", name, err)
	}
	return aws.ToString(out.ARN)
}

// RotateSecret gives the secret name a new current value.
func (s *Server) RotateSecret(t testing.TB, name, value string) {
	t.Helper()
	if _, err := s.sm.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(name), SecretString: aws.String(value),
	}); err != nil {
		t.Fatalf("put secret value %s: %v", name, err)
	}
}

// PutParameter writes the SecureString parameter name (overwriting it).
func (s *Server) PutParameter(t testing.TB, name, value string) {
	t.Helper()
	if _, err := s.ssm.PutParameter(context.Background(), &ssm.PutParameterInput{
		Name: aws.String(name), Value: aws.String(value), Type: ssmtypes.ParameterTypeSecureString, Overwrite: aws.Bool(true),
	}); err != nil {
		t.Fatalf("put parameter %s: %v", name, err)
	}
}

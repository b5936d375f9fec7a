package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/mcpgate/mcpgate/internal/awssign"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// sigV4 signs each request (registry.AuthSigV4) with the gateway's own AWS
// credentials, for the server's service and region (the gateway's when it
// names none). It reads no secret, so it has nothing to refresh.
type sigV4 struct{ s *awssign.Signer }

func newSigV4(p *Pool, srv *registry.Server) provider {
	a := srv.Auth
	region := a.Region
	if region == "" {
		region = p.awsRegion
	}
	return &sigV4{s: awssign.New(p.awsCreds, a.Service, region)}
}

func (s *sigV4) kind() registry.AuthType { return registry.AuthSigV4 }

func (s *sigV4) apply(ctx context.Context, req *http.Request) (string, error) {
	return "", s.sign(ctx, req)
}

func (s *sigV4) refresh(context.Context, string) (bool, error) { return false, nil }

// sign signs req for AWS with the gateway's own credentials, last, over
// every header set so far.
func (s *sigV4) sign(ctx context.Context, req *http.Request) error {
	if s.s.Creds == nil {
		return errors.New("aws_sigv4: the gateway has no AWS credentials configured")
	}
	if s.s.Region == "" {
		return errors.New("aws_sigv4: no region (set auth.region or AWS_REGION)")
	}
	if err := s.s.Sign(ctx, req); err != nil {
		return fmt.Errorf("aws_sigv4: %w", err)
	}
	return nil
}

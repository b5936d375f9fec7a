package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// sigV4 signs each request (registry.AuthSigV4) with the gateway's own AWS
// credentials, for the server's service and region (the gateway's when it
// names none). It reads no secret, so it has nothing to refresh.
type sigV4 struct {
	creds   aws.CredentialsProvider
	service string
	region  string
	signer  *v4.Signer
}

func newSigV4(p *Pool, srv *registry.Server) provider {
	a := srv.Auth
	region := a.Region
	if region == "" {
		region = p.awsRegion
	}
	return &sigV4{creds: p.awsCreds, service: a.Service, region: region, signer: v4.NewSigner()}
}

func (s *sigV4) kind() registry.AuthType { return registry.AuthSigV4 }

func (s *sigV4) apply(ctx context.Context, req *http.Request) (string, error) {
	return "", s.sign(ctx, req)
}

func (s *sigV4) refresh(context.Context, string) (bool, error) { return false, nil }

// sign signs req for AWS with the gateway's own credentials, last, over
// every header set so far.
func (s *sigV4) sign(ctx context.Context, req *http.Request) error {
	if s.creds == nil {
		return errors.New("aws_sigv4: the gateway has no AWS credentials configured")
	}
	if s.region == "" {
		return errors.New("aws_sigv4: no region (set auth.region or AWS_REGION)")
	}
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("aws_sigv4: get AWS credentials: %w", err)
	}
	sum := sha256.New()
	if req.Body != nil && req.Body != http.NoBody {
		var body io.ReadCloser = req.Body
		if req.GetBody != nil {
			if body, err = req.GetBody(); err != nil {
				return fmt.Errorf("aws_sigv4: read body: %w", err)
			}
			_, err = io.Copy(sum, body)
			body.Close()
		} else {
			var buf bytes.Buffer
			_, err = io.Copy(io.MultiWriter(sum, &buf), body)
			body.Close()
			data := buf.Bytes()
			req.Body = io.NopCloser(bytes.NewReader(data))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		}
		if err != nil {
			return fmt.Errorf("aws_sigv4: read body: %w", err)
		}
	}
	req.Header.Del("Authorization")
	return s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum.Sum(nil)), s.service, s.region, time.Now())
}

package tracing

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

func asNetError(err error, ne *net.Error) bool { return errors.As(err, ne) }

// sigv4Client signs OTLP requests to X-Ray's endpoint in region with the
// function's credentials (the role needs xray:PutSpans).
func sigv4Client(ctx context.Context, region string) (*http.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("AWS credentials for X-Ray: %w", err)
	}
	return &http.Client{Transport: &signer{base: http.DefaultTransport, creds: cfg.Credentials, region: region, s: v4.NewSigner()}}, nil
}

type signer struct {
	base   http.RoundTripper
	creds  aws.CredentialsProvider
	region string
	s      *v4.Signer
}

func (s *signer) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	sum := sha256.Sum256(body)
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	creds, err := s.creds.Retrieve(req.Context())
	if err != nil {
		return nil, err
	}
	if err := s.s.SignHTTP(req.Context(), creds, out, hex.EncodeToString(sum[:]), "xray", s.region, time.Now()); err != nil {
		return nil, err
	}
	return s.base.RoundTrip(out)
}

// Package awssign signs HTTP requests with AWS Signature Version 4, using
// the AWS SDK's signer: the upstream credential of aws_sigv4 servers, and
// the traces sent to X-Ray's OTLP endpoint.
package awssign

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
)

// Signer signs requests for one service in one region.
type Signer struct {
	// Creds gives the credentials each request is signed with.
	Creds aws.CredentialsProvider
	// Service and Region name what the signature is for.
	Service, Region string

	s *v4.Signer
}

// New returns a Signer for service in region with creds.
func New(creds aws.CredentialsProvider, service, region string) *Signer {
	return &Signer{Creds: creds, Service: service, Region: region, s: v4.NewSigner()}
}

// Sign signs req in place, last, over every header set so far (an
// Authorization header already there is replaced). It hashes the body,
// leaving it, and GetBody, readable again.
func (s *Signer) Sign(ctx context.Context, req *http.Request) error {
	if s.Creds == nil {
		return errors.New("no AWS credentials configured")
	}
	if s.Region == "" {
		return errors.New("no AWS region")
	}
	creds, err := s.Creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("get AWS credentials: %w", err)
	}
	sum := sha256.New()
	if req.Body != nil && req.Body != http.NoBody {
		var body io.ReadCloser = req.Body
		if req.GetBody != nil {
			if body, err = req.GetBody(); err != nil {
				return fmt.Errorf("read body: %w", err)
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
			req.ContentLength = int64(len(data))
		}
		if err != nil {
			return fmt.Errorf("read body: %w", err)
		}
	}
	req.Header.Del("Authorization")
	return s.s.SignHTTP(ctx, creds, req, hex.EncodeToString(sum.Sum(nil)), s.Service, s.Region, time.Now())
}

// Transport signs every request it sends through Base (nil:
// http.DefaultTransport), on a copy: the caller's request is left as it
// was.
type Transport struct {
	Base   http.RoundTripper
	Signer *Signer
}

// RoundTrip signs a copy of req and sends it. It reads the body whole, to
// hash it, and closes req's, as a RoundTripper must.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		data, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
		out.Body = io.NopCloser(bytes.NewReader(data))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		out.ContentLength = int64(len(data))
	}
	if err := t.Signer.Sign(req.Context(), out); err != nil {
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}

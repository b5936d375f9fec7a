package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/mcpgate/mcpgate/internal/awssign"
)

func asNetError(err error, ne *net.Error) bool { return errors.As(err, ne) }

// sigv4Client signs OTLP requests to X-Ray's endpoint in region with the
// function's credentials (the role needs xray:PutTraceSegments).
func sigv4Client(ctx context.Context, region string) (*http.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("AWS credentials for X-Ray: %w", err)
	}
	return &http.Client{Transport: &awssign.Transport{Signer: awssign.New(cfg.Credentials, "xray", region)}}, nil
}

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mcpgate/mcpgate/internal/roundtrip"
	"github.com/mcpgate/mcpgate/internal/secret"
)

// requestStates builds the sealer of multi-round-trip request states from
// the key the whole fleet shares (the template creates it in Secrets
// Manager). REQUEST_STATE_KEY names it by reference, never by value, read
// with the same resolver as upstream credentials: secretsmanager:<name-or-arn>,
// ssm:<name> or, locally, env:<VAR>. Without it each process seals with a
// key of its own, and a retry completes only on the instance that started
// the round trip.
func requestStates(ctx context.Context, cfg config, secrets *secret.Resolver, log *slog.Logger) (*roundtrip.Sealer, error) {
	if cfg.RequestStateKey == "" {
		log.Warn("REQUEST_STATE_KEY is not set: input-required round trips complete only on the instance that started them")
		return nil, nil
	}
	ref, err := secret.ParseRef(cfg.RequestStateKey)
	if err != nil {
		return nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	value, err := secrets.Resolve(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	s, err := roundtrip.New([]byte(value), roundtrip.Options{TTL: cfg.RequestStateTTL, Now: cfg.clock()})
	if err != nil {
		return nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	return s, nil
}

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/roundtrip"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// requestStates builds the sealer of multi-round-trip request states from
// the key the whole fleet shares (the template creates it in Secrets
// Manager). REQUEST_STATE_KEY names it by reference, never by value, read
// with the same resolver as upstream credentials: secretsmanager:<name-or-arn>,
// ssm:<name> or, locally, env:<VAR>. Without it each process seals with a
// random key of its own, and a retry completes only on the instance that
// started the round trip. REQUEST_STATE_TTL applies either way. The key read
// is returned as reserved: no upstream's credential may be it.
func requestStates(ctx context.Context, cfg config.Config, secrets *secret.Resolver, log *slog.Logger) (*roundtrip.Sealer, *upstream.Reserved, error) {
	opts := roundtrip.Options{TTL: cfg.RequestStateTTL, Now: cfg.Clock()}
	if cfg.RequestStateKey == "" {
		log.Warn("REQUEST_STATE_KEY is not set: input-required round trips complete only on the instance that started them")
		key := make([]byte, roundtrip.MinSecretBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, nil, fmt.Errorf("request-state key: %w", err)
		}
		s, err := roundtrip.New(key, opts)
		return s, nil, err
	}
	ref, err := secret.ParseRef(cfg.RequestStateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	value, err := secrets.Resolve(ctx, ref)
	if err != nil {
		return nil, nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	s, err := roundtrip.New([]byte(value), opts)
	if err != nil {
		return nil, nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	reserved := upstream.Reserve(ref, value)
	return s, &reserved, nil
}

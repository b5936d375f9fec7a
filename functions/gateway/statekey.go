package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// The request-state key is a secret the whole fleet shares (the template
// creates it in Secrets Manager). REQUEST_STATE_KEY names it by reference,
// never by value: secretsmanager:<name-or-arn> or, locally, env:<VAR>.

// secretsAPI is the part of the Secrets Manager client the gateway uses.
type secretsAPI interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var _ secretsAPI = (*secretsmanager.Client)(nil)

// newSecretsClient builds a Secrets Manager client from the standard AWS
// configuration (AWS_ENDPOINT_URL_SECRETS_MANAGER for a local endpoint).
func newSecretsClient(ctx context.Context) (secretsAPI, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	return secretsmanager.NewFromConfig(cfg), nil
}

// readSecret resolves a secret reference. Its errors never contain the
// secret's value.
func readSecret(ctx context.Context, ref string, getenv func(string) string, sm func(context.Context) (secretsAPI, error)) ([]byte, error) {
	kind, name, ok := strings.Cut(ref, ":")
	if !ok || name == "" {
		return nil, errors.New("not a reference: use secretsmanager:<name-or-arn> or env:<VAR>")
	}
	switch kind {
	case "env":
		v := getenv(name)
		if v == "" {
			return nil, fmt.Errorf("environment variable %s is empty", name)
		}
		return []byte(v), nil
	case "secretsmanager":
		c, err := sm(ctx)
		if err != nil {
			return nil, err
		}
		out, err := c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("read secret %s: %w", name, err)
		}
		if out.SecretString != nil {
			return []byte(*out.SecretString), nil
		}
		if len(out.SecretBinary) > 0 {
			return out.SecretBinary, nil
		}
		return nil, fmt.Errorf("secret %s has no value", name)
	default:
		return nil, fmt.Errorf("unknown reference kind %q: use secretsmanager:<name-or-arn> or env:<VAR>", kind)
	}
}

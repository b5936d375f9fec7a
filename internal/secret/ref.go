package secret

import (
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"regexp"
	"strings"
)

// Kind is where a reference's value is kept.
type Kind string

// The kinds of reference.
const (
	// SecretsManager is an AWS Secrets Manager secret, by name or ARN.
	SecretsManager Kind = "secretsmanager"
	// SSM is an AWS Systems Manager parameter, read with decryption.
	SSM Kind = "ssm"
	// Env is an environment variable of the process, for local development.
	Env Kind = "env"
)

// Ref is a parsed secret reference.
type Ref struct {
	// Kind says where the value is kept.
	Kind Kind
	// Name is the secret's name or ARN, the parameter's name or ARN, or the
	// variable's name.
	Name string
	// Key, for a Secrets Manager secret holding a JSON object, names the
	// field whose value is meant; empty means the whole secret string.
	Key string
}

// String returns the reference as written.
func (r Ref) String() string {
	s := string(r.Kind) + ":" + r.Name
	if r.Key != "" {
		s += "#" + r.Key
	}
	return s
}

// Syntax is the reference syntax, for messages.
const Syntax = "secretsmanager:<name-or-arn>[#<json-key>], ssm:<parameter-name> or env:<VAR>"

// The patterns use + and the lengths are checked apart: a counted
// repetition such as {1,512} compiles to that many copies.
var (
	// Secrets Manager names: 1 to 512 of letters, digits and /_+=.@-.
	smName = regexp.MustCompile(`^[A-Za-z0-9/_+=.@-]+$`)
	smARN  = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$`)
	// SSM parameter names: letters, digits and _.-/, up to 2048 with the
	// path.
	ssmName = regexp.MustCompile(`^[A-Za-z0-9_./-]+$`)
	ssmARN  = regexp.MustCompile(`^arn:aws[a-z-]*:ssm:[a-z0-9-]+:[0-9]{12}:parameter/[A-Za-z0-9_./-]+$`)
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

const (
	// maxKey bounds a JSON key.
	maxKey = 256
	// maxSSMName bounds an SSM parameter name or ARN.
	maxSSMName = 2048 + 64
	// maxSecretID bounds a secret name (512) or ARN.
	maxSecretID = 512 + 96
	// maxEnvName bounds a variable name.
	maxEnvName = 128
)

// ParseRef parses a secret reference. Its errors never contain s: a
// literal secret written by mistake must not reach a log.
func ParseRef(s string) (Ref, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Ref{}, errors.New("is not a reference (a secret value never goes here; use " + Syntax + ")")
	}
	r := Ref{Kind: Kind(kind), Name: rest}
	switch r.Kind {
	case SecretsManager:
		r.Name, r.Key, _ = strings.Cut(rest, "#")
		if strings.Contains(rest, "#") {
			if r.Key == "" || len(r.Key) > maxKey || strings.ContainsFunc(r.Key, clip.IsControl) {
				return Ref{}, fmt.Errorf("secretsmanager reference: the JSON key after # must be 1 to %d printable characters", maxKey)
			}
		}
		if (!smName.MatchString(r.Name) || len(r.Name) > 512) && (!smARN.MatchString(r.Name) || len(r.Name) > maxSecretID) {
			return Ref{}, errors.New("secretsmanager reference: want a secret name (1 to 512 of letters, digits and /_+=.@-) or a secret ARN")
		}
	case SSM:
		if len(r.Name) > maxSSMName || !ssmName.MatchString(r.Name) && !ssmARN.MatchString(r.Name) {
			return Ref{}, errors.New("ssm reference: want a parameter name (letters, digits and _.-/, e.g. /mcpgate/github-token) or a parameter ARN")
		}
	case Env:
		if len(r.Name) > maxEnvName || !envName.MatchString(r.Name) {
			return Ref{}, errors.New("env reference: want a variable name (letters, digits and _, not starting with a digit)")
		}
	default:
		return Ref{}, errors.New("is not a reference (a secret value never goes here; use " + Syntax + ")")
	}
	return r, nil
}

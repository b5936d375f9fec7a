// Package template holds no code: its tests check template.yaml (and
// samconfig.toml and the Makefile's build target SAM calls) against the
// gateway's code with goformation, the real SAM translator and cfn-lint.
// They test the deployment, not the gateway binary, so they live apart
// from functions/gateway.
package template

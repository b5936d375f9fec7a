// Package infra holds the local stack: infra/dev.sh (what `make dev` runs),
// the dynalite wrapper, the demo upstream's command (infra/demo-upstream),
// seed data and the Node clients the tests drive (infra/clients). This
// package's own Go code is the test that runs dev.sh as a person would.
package infra

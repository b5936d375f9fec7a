package main

import (
	"fmt"

	"github.com/mcpgate/mcpgate/internal/store"
)

var tablesCreateCmd = &command{
	name:    "tables create",
	summary: "create the servers, leases and keys tables (idempotent)",
	help: `
Creates the three tables named by SERVERS_TABLE, LEASES_TABLE and KEYS_TABLE
(on-demand billing, one string partition key each) and enables TTL on the
leases table. Tables that exist already are left as they are, so it is safe
to run again. It waits until every table is active.

Example:
  AWS_REGION=us-east-1 SERVERS_TABLE=mcpgate-servers LEASES_TABLE=mcpgate-leases \
  KEYS_TABLE=mcpgate-keys mcpgate tables create
`,
	run: runTablesCreate,
}

func runTablesCreate(c *cli, args []string) error {
	if err := c.noArgs(args); err != nil {
		return err
	}
	if err := c.open(); err != nil {
		return err
	}
	reports, err := c.tables.CreateTables(c.ctx, c.db)
	for _, r := range reports {
		state := "created"
		if !r.Created {
			state = "already exists"
		}
		line := fmt.Sprintf("%s: %s", r.Table, state)
		switch {
		case r.TTLNote != "":
			line += " (" + r.TTLNote + ")"
		case r.Table == c.tables.Leases:
			line += " (TTL enabled on attribute " + store.TTLAttr + ")"
		}
		fmt.Fprintln(c.stdout, line)
	}
	if err != nil {
		return fmt.Errorf("create tables: %w", &awsError{err})
	}
	return nil
}

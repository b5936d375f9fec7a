package main

import (
	"fmt"

	"github.com/mcpgate/mcpgate/internal/store"
)

var tablesCreateCmd = &command{
	name:    "tables create",
	summary: "create the servers, leases, keys and tasks tables (idempotent)",
	help: `
Creates the tables named by SERVERS_TABLE, LEASES_TABLE, KEYS_TABLE and,
when set, TASKS_TABLE (on-demand billing, one string partition key each)
and enables TTL on the leases and tasks tables. Without TASKS_TABLE there is
no tasks table, and a gateway without one runs no MCP tasks. Tables that
exist already are left as they are, so it is safe to run again. It waits
until every table is active.

Example:
  AWS_REGION=us-east-1 SERVERS_TABLE=mcpgate-servers LEASES_TABLE=mcpgate-leases \
  KEYS_TABLE=mcpgate-keys TASKS_TABLE=mcpgate-tasks mcpgate tables create
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
		case r.TTL:
			line += " (TTL enabled on attribute " + store.TTLAttr + ")"
		}
		fmt.Fprintln(c.stdout, line)
	}
	if err == nil && c.tables.Tasks == "" {
		fmt.Fprintln(c.stdout, "no tasks table: "+store.EnvTasksTable+" is not set (a gateway without one runs no MCP tasks)")
	}
	if err != nil {
		return fmt.Errorf("create tables: %w", &awsError{err})
	}
	return nil
}

package console

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// page serves the whole screen name; live its live fragment alone.
func (c *Console) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { c.screen(w, r, name, "layout") }
}

func (c *Console) live(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { c.screen(w, r, name, "live") }
}

func (c *Console) screen(w http.ResponseWriter, r *http.Request, name, tmpl string) {
	if name == "keys" {
		c.poll.wantKeys()
		if c.poll.latest().KeysAt.IsZero() {
			// The first look at the keys: wait for the reading that
			// brings them (a second at most, or the read timeout).
			select {
			case <-c.poll.next():
			case <-time.After(c.o.Interval + c.o.ReadTimeout):
			case <-r.Context().Done():
			}
		}
	}
	snap := c.poll.latest()
	var d *pageData
	switch name {
	case "fleet":
		d = c.base(name, "Fleet", snap)
		d.Fleet = c.fleetView(snap)
		d.LivePath = "/live/fleet"
	case "server":
		id := r.PathValue("id")
		if registry.ValidateID(id) != nil {
			http.NotFound(w, r)
			return
		}
		d = c.base(name, "Server "+id, snap)
		d.Server = c.serverView(snap, id)
		if tmpl == "layout" {
			// The edit form shows the item as it is now, not as the
			// last reading (up to an interval old) had it: an edit is
			// made only to the version it shows.
			ctx, cancel := context.WithTimeout(r.Context(), c.o.ReadTimeout)
			item, err := c.o.Store.Server(ctx, id)
			cancel()
			if err == nil && item != nil {
				d.Server.Found, d.Server.Attrs, d.Server.Digest = true, attrRows(item), digest(item)
			}
		}
		d.LivePath = "/live/servers/" + id
	case "keys":
		d = c.base(name, "Keys", snap)
		d.Keys = c.keysView(snap)
		d.LivePath = "/live/keys"
	case "calls":
		d = c.base(name, "Calls", snap)
		d.Calls = c.callsView(r)
		d.LivePath = "/live/calls"
		if d.Calls.Query != "" {
			d.LivePath += "?" + d.Calls.Query
		}
	}
	c.render(w, name, tmpl, d)
}

// apiFleet answers the latest reading as JSON: the report mcpgate status
// --json prints, and the state of the store's readings.
func (c *Console) apiFleet(w http.ResponseWriter, r *http.Request) {
	snap := c.poll.latest()
	out := struct {
		Read     time.Time     `json:"read"`
		StoreOK  time.Time     `json:"store_ok,omitzero"`
		StoreErr string        `json:"store_error,omitempty"`
		Report   *fleet.Report `json:"report"`
		Operator string        `json:"operator,omitempty"`
		Where    string        `json:"where,omitempty"`
		ReadOnly bool          `json:"read_only,omitempty"`
	}{snap.At, snap.OK, snap.Err, snap.Report, c.o.Operator, c.o.Where, c.o.Audit == nil}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// actionTimeout bounds one action's store writes (and a connection test).
const actionTimeout = 20 * time.Second

// MaxPauseConsole bounds a pause an operator sets.
const MaxPauseConsole = 24 * time.Hour

// outcome is what an action did, for its answer and its audit record.
type outcome struct {
	rec AuditRecord
	// msg says it to the operator; html, when set, is shown instead
	// (already escaped: a connection test's tools, a key shown once).
	msg  string
	html template.HTML
}

func (o *outcome) ok(format string, a ...any) {
	o.rec.Result, o.msg = "ok", fmt.Sprintf(format, a...)
}

// refused: nothing was written.
func (o *outcome) refused(err error, format string, a ...any) {
	o.rec.Result, o.rec.Error = "refused", clipText(err.Error())
	o.msg = fmt.Sprintf(format, a...)
}

// failed: the store or upstream failed; a write may have landed.
func (o *outcome) failed(err error, format string, a ...any) {
	o.rec.Result, o.rec.Error = "failed", clipText(safeurl.RedactText(err.Error()))
	o.msg = fmt.Sprintf(format, a...)
}

// action runs do for a state-changing request, writes its audit record
// and answers the flash fragment that tells the operator.
func (c *Console) action(do func(ctx context.Context, r *http.Request, o *outcome)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.o.Audit == nil || c.o.Operator == "" {
			c.flash(w, "error", "This console is read-only: it has no audit log to record actions in, or does not know who you are.", "")
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, "console: bad form", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
		defer cancel()
		o := &outcome{rec: AuditRecord{Msg: MsgAudit, Operator: c.o.Operator, ServerID: r.PathValue("id")}}
		do(ctx, r, o)
		o.rec.Time = c.o.Now().UTC()
		kind := "ok"
		if o.rec.Result != "ok" {
			kind = "error"
		}
		msg := o.msg
		actx, acancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer acancel()
		if err := c.o.Audit.Audit(actx, o.rec); err != nil {
			c.o.Log.Error("console: audit record not written", "action", o.rec.Action, "error", err)
			kind = "error"
			msg += " — but its audit record could not be written: " + clipText(err.Error())
		}
		c.flash(w, kind, msg, o.html)
	}
}

// flash answers an action's message.
func (c *Console) flash(w http.ResponseWriter, kind, msg string, html template.HTML) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = c.pages["fleet"].t.ExecuteTemplate(w, "flash", map[string]any{"Kind": kind, "Msg": msg, "HTML": html, "At": c.o.Now()})
}

func (c *Console) pause(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "pause"
	id := r.PathValue("id")
	secs, err := strconv.ParseFloat(strings.TrimSpace(r.FormValue("seconds")), 64)
	d := time.Duration(secs * float64(time.Second))
	if err != nil || d <= 0 || d > MaxPauseConsole {
		o.refused(errors.New("bad duration"), "Not paused: give a pause of 1 second to %v.", MaxPauseConsole)
		return
	}
	until := c.o.Now().Add(d)
	o.rec.Detail = "until " + until.UTC().Format(time.RFC3339)
	if err := c.admin.Pause(ctx, id, until); err != nil {
		o.failed(err, "Pausing %s failed: %s", id, problem(err))
		return
	}
	o.ok("%s is paused until %s (%v): no call is admitted; calls in flight go on, and waiters wait.", id, until.Local().Format("15:04:05"), roundDur(d))
}

func (c *Console) resume(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "resume"
	id := r.PathValue("id")
	if err := c.admin.Resume(ctx, id); err != nil {
		o.failed(err, "Resuming %s failed: %s", id, problem(err))
		return
	}
	o.ok("%s admits calls again.", id)
}

func (c *Console) resetBreaker(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "reset_breaker"
	id, name := r.PathValue("id"), strings.TrimSpace(r.FormValue("breaker"))
	o.rec.Target = clipText(name)
	if name == "" {
		o.refused(errors.New("no breaker named"), "Name the breaker (its tool).")
		return
	}
	if err := c.admin.ResetBreaker(ctx, id, name); err != nil {
		o.failed(err, "Resetting the breaker of %s/%s failed: %s", id, name, problem(err))
		return
	}
	o.ok("The breaker of %s/%s is closed for everyone.", id, name)
}

// ReleaseWarning is what the console says before and after a lease is
// released by hand.
const ReleaseWarning = "Its call may still be running at the upstream: until that call ends, the upstream may see more calls at once than the cap allows."

func (c *Console) release(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "release_lease"
	id, lid := r.PathValue("id"), strings.TrimSpace(r.FormValue("lease"))
	o.rec.Target = clipText(lid)
	err := c.admin.Release(ctx, id, lid)
	switch {
	case errors.Is(err, lease.ErrNotHeld):
		o.refused(err, "Lease %s of %s is not held (released or expired already): nothing done.", lid, id)
	case err != nil:
		o.failed(err, "Releasing lease %s of %s failed: %s", lid, id, problem(err))
	default:
		o.ok("Lease %s of %s is released; its place is free. %s", lid, id, ReleaseWarning)
	}
}

// readForEdit reads server id fresh and checks it is the version the
// operator saw (digest).
func (c *Console) readForEdit(ctx context.Context, id, seen string) (fleet.Item, error) {
	item, err := c.o.Store.Server(ctx, id)
	switch {
	case err != nil:
		return nil, err
	case item == nil:
		return nil, fleet.ErrServerGone
	case seen == "" || digest(item) != seen:
		return nil, fmt.Errorf("%w since the page showed it", fleet.ErrServerChanged)
	}
	return item, nil
}

// update makes changes to server id as seen, reporting in o.
func (c *Console) update(ctx context.Context, id, seen string, changes []fleet.Change, o *outcome) bool {
	item, err := c.readForEdit(ctx, id, seen)
	if err == nil {
		before := detail(item, changes)
		o.rec.Detail = before
		if _, _, err = fleet.Apply(item, changes); err != nil {
			o.refused(err, "%s not changed: %s", id, clipText(fleet.OneLine(err.Error())))
			return false
		}
		_, err = c.o.Store.UpdateServer(ctx, id, item, changes)
	}
	switch {
	case errors.Is(err, fleet.ErrServerChanged) || errors.Is(err, fleet.ErrServerGone):
		o.refused(err, "%s not changed: %s. Look at it again, then make the change again.", id, err)
		return false
	case err != nil:
		o.failed(err, "Changing %s failed: %s", id, problem(err))
		return false
	}
	return true
}

// detail says what changes do to item: "name old → new; …".
func detail(item fleet.Item, changes []fleet.Change) string {
	doc := registry.ItemToJSON(item)
	var parts []string
	for _, ch := range changes {
		old := "(absent)"
		if v, ok := doc[ch.Name]; ok {
			old = setValue(ch.Name, v)
		}
		now := "(removed)"
		if ch.Value != nil {
			now = setValue(ch.Name, registry.ItemToJSON(fleet.Item{"v": ch.Value})["v"])
		}
		parts = append(parts, ch.Name+" "+old+" → "+now)
	}
	return clipText(strings.Join(parts, "; "))
}

func (c *Console) setCap(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "set_cap"
	id := r.PathValue("id")
	v := strings.TrimSpace(r.FormValue("cap"))
	ch, err := fleet.ParseChange("max_concurrent_requests=" + v)
	if err != nil {
		o.refused(err, "%s not changed: %s", id, clipText(err.Error()))
		return
	}
	if c.update(ctx, id, r.FormValue("digest"), []fleet.Change{ch}, o) {
		if v == "" || v == "0" {
			o.ok("%s has no cap now: calls take no place.", id)
		} else {
			o.ok("The cap of %s is %s; every gateway instance applies it within its registry cache time (a few seconds).", id, v)
		}
	}
}

// edit previews (a diff and the equivalent CLI command) or saves changes
// to a server's attributes.
func (c *Console) edit(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "edit_server"
	id := r.PathValue("id")
	seen := r.FormValue("digest")
	var changes []fleet.Change
	var args []string
	if r.FormValue("save") != "" {
		args = r.Form["change"]
	} else {
		item, err := c.readForEdit(ctx, id, seen)
		if err != nil {
			o.refused(err, "%s: %s. Look at it again.", id, err)
			return
		}
		for _, a := range attrRows(item) {
			v, ok := r.Form["attr."+a.Name]
			if !ok || len(v) != 1 || strings.TrimSpace(v[0]) == strings.TrimSpace(a.Value) {
				continue
			}
			args = append(args, a.Name+"="+strings.TrimSpace(v[0]))
		}
	}
	if len(args) == 0 {
		o.refused(errors.New("no change"), "Nothing to change: no value differs from the server's.")
		return
	}
	changes, err := fleet.ParseChanges(args)
	if err != nil {
		o.refused(err, "%s not changed: %s", id, clipText(err.Error()))
		return
	}
	if r.FormValue("save") == "" {
		// A preview writes nothing: it is not an action, but is recorded
		// all the same as one the operator looked at.
		item, err := c.readForEdit(ctx, id, seen)
		if err != nil {
			o.refused(err, "%s: %s", id, err)
			return
		}
		o.rec.Action, o.rec.Detail = "preview_edit", detail(item, changes)
		if _, _, err := fleet.Apply(item, changes); err != nil {
			o.refused(err, "%s would be refused by the gateway: %s", id, clipText(fleet.OneLine(err.Error())))
			return
		}
		o.ok("Check the change, then save it.")
		o.html = c.preview(id, seen, item, changes, args)
		return
	}
	if c.update(ctx, id, seen, changes, o) {
		o.ok("%s changed: %s", id, o.rec.Detail)
	}
}

// preview renders the diff, the CLI command and the form that saves it.
func (c *Console) preview(id, seen string, item fleet.Item, changes []fleet.Change, args []string) template.HTML {
	type row struct{ Name, Old, New string }
	var rows []row
	doc := registry.ItemToJSON(item)
	for _, ch := range changes {
		r := row{Name: ch.Name, Old: "(absent)", New: "(removed)"}
		if v, ok := doc[ch.Name]; ok {
			r.Old = setValue(ch.Name, v)
		}
		if ch.Value != nil {
			r.New = setValue(ch.Name, registry.ItemToJSON(fleet.Item{"v": ch.Value})["v"])
		}
		rows = append(rows, r)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	cmd := "mcpgate "
	if c.o.Stack != "" {
		cmd += "--stack " + shellQuote(c.o.Stack) + " "
	}
	cmd += "servers set " + shellQuote(id) + " " + strings.Join(quoted, " ")
	var b strings.Builder
	_ = c.pages["server"].t.ExecuteTemplate(&b, "preview", map[string]any{"ID": id, "Digest": seen, "Rows": rows, "Args": args, "Command": cmd})
	return template.HTML(b.String())
}

// shellQuote quotes s for a POSIX shell, unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@=+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// testConnection lists the upstream's tools through the gateway's own
// upstream client, with the server's credential.
func (c *Console) testConnection(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "test_connection"
	id := r.PathValue("id")
	item, err := c.o.Store.Server(ctx, id)
	if err != nil || item == nil {
		o.failed(cmpErr(err, fleet.ErrServerGone), "Cannot read server %s: %s", id, clipText(fmt.Sprint(cmpErr(err, fleet.ErrServerGone))))
		return
	}
	srv, err := registry.Parse(item)
	if err != nil {
		o.refused(err, "%s is invalid, the gateway refuses calls to it: %s", id, clipText(fleet.OneLine(err.Error())))
		return
	}
	pool := upstream.New(c.o.Upstream)
	defer pool.Close()
	start := time.Now()
	tools, err := pool.Tools(ctx, srv, upstream.Caller{Principal: "mcpgate-console"})
	took := time.Since(start)
	if err != nil {
		msg := err.Error()
		var ce *upstream.CredentialError
		if errors.As(err, &ce) {
			msg = "the credential could not be produced: " + ce.Err.Error()
		}
		o.failed(err, "%s did not list its tools (%v): %s", id, roundDur(took), clipText(safeurl.RedactText(fleet.OneLine(msg))))
		return
	}
	var names, hidden []string
	for _, t := range tools {
		if srv.ToolAllowed(t.Name) {
			names = append(names, t.Name)
		} else {
			hidden = append(hidden, t.Name)
		}
	}
	slices.Sort(names)
	o.rec.Detail = fmt.Sprintf("%d tools", len(tools))
	o.ok("%s answered in %v with %d tools (%d hidden by allowed_tools/disallowed_tools).", id, roundDur(took), len(tools), len(hidden))
	var b strings.Builder
	_ = c.pages["server"].t.ExecuteTemplate(&b, "tools", map[string]any{"Tools": names, "Hidden": hidden})
	o.html = template.HTML(b.String())
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (c *Console) createKey(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "create_key"
	servers, err := fleet.ParseServers(r.FormValue("servers"))
	if err != nil {
		o.refused(err, "No key created: servers: %s", clipText(err.Error()))
		return
	}
	tools, err := fleet.ParseTools(r.FormValue("tools"), servers)
	if err != nil {
		o.refused(err, "No key created: tools: %s", clipText(err.Error()))
		return
	}
	num := func(name string) (int, error) {
		v := strings.TrimSpace(r.FormValue(name))
		if v == "" {
			return 0, nil
		}
		return strconv.Atoi(v)
	}
	par, perr := num("max_parallel")
	rpm, rerr := num("rpm_limit")
	if err := errors.Join(perr, rerr, fleet.CheckLimits(par, rpm)); err != nil {
		o.refused(err, "No key created: %s", clipText(fleet.OneLine(err.Error())))
		return
	}
	name := strings.TrimSpace(r.FormValue("name"))
	k := &auth.Key{Name: name, Servers: servers, Tools: tools, MaxParallel: par, RPMLimit: rpm}
	key, err := c.o.Store.CreateKey(ctx, k, c.o.Now())
	if err != nil {
		o.failed(err, "No key created: %s", problem(err))
		return
	}
	o.rec.Target = fleet.ShortHash(k.Hash)
	o.rec.Detail = clipText(fmt.Sprintf("name %q, servers %s", name, strings.Join(servers, ",")))
	o.ok("Key %s created.", fleet.ShortHash(k.Hash))
	var b strings.Builder
	_ = c.pages["keys"].t.ExecuteTemplate(&b, "newkey", map[string]any{"Key": key, "Hash": fleet.ShortHash(k.Hash)})
	o.html = template.HTML(b.String())
}

func (c *Console) revokeKey(ctx context.Context, r *http.Request, o *outcome) {
	o.rec.Action = "revoke_key"
	prefix := strings.TrimSpace(r.FormValue("hash"))
	o.rec.Target = clipText(prefix)
	k, err := c.o.Store.RevokeKey(ctx, prefix)
	switch {
	case errors.Is(err, fleet.ErrNoKey) || errors.Is(err, fleet.ErrAmbiguous):
		o.refused(err, "Not revoked: %s", clipText(err.Error()))
	case err != nil && strings.Contains(err.Error(), "not a key hash"):
		o.refused(err, "Not revoked: %s", clipText(err.Error()))
	case err != nil:
		o.failed(err, "Revoking failed: %s", problem(err))
	default:
		o.rec.Target = fleet.ShortHash(k.Hash)
		o.ok("Key %s (%s) is revoked; gateways stop accepting it within their key cache time (default %v).", fleet.ShortHash(k.Hash), orNone(k.Name), auth.DefaultCacheTTL)
	}
}

func orNone(s string) string {
	if s == "" {
		return "no name"
	}
	return s
}

// problem says why an action's write failed, in a line: the store's own
// word for a refusal or a condition it reports (a pause that changed
// meanwhile), else what storeProblem makes of a failure to reach it.
func problem(err error) string {
	var api smithy.APIError
	msg := err.Error()
	if strings.Contains(msg, "meanwhile") || strings.Contains(msg, "kept changing") {
		return clipText(fleet.OneLine(msg))
	}
	if errors.As(err, &api) {
		return clipText(api.ErrorCode() + ": " + api.ErrorMessage())
	}
	return storeProblem(err)
}

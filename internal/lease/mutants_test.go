package lease

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mutantSeeds is how many of the simulation's seeds a mutant may pass
// before it fails the test; the run stops at the first seed that catches
// it.
const mutantSeeds = 3000

// A mutant is a one-line change of the protocol that breaks a promise of
// doc.go: the fault simulation, judging by its own model, must fail each
// within mutantSeeds seeds.
type mutant struct {
	name, file, from, to string
}

var mutants = []mutant{
	{"waiters served newest first", "turn.go",
		"cmp.Compare(a.n, b.n)", "cmp.Compare(b.n, a.n)"},
	{"a take that ignores the adaptive limit", "adaptive.go",
		"u.num(int64(a.req.capIn(v)+purgedLeases-ahead))", "u.num(int64(a.req.Cap+purgedLeases-ahead))"},
	{"a bucket admitting one token more", "rate.go",
		"func (r Rate) tolerance() int64 { return int64(r.PerMinute-1) * r.interval() }",
		"func (r Rate) tolerance() int64 { return int64(r.PerMinute) * r.interval() }"},
	{"no one-probe condition", "gate.go",
		`free := "(attribute_not_exists(" + pp + ") OR " + pe + " < " + u.num(now) + ")"`,
		`free := "(attribute_not_exists(" + pp + ") OR attribute_exists(" + pe + ") OR " + pe + " < " + u.num(now) + ")"`},
	{"a giving-up that does not move freed", "acquire.go",
		"		// for the callers behind it: freed tells the takes judged before.\n		u.count(u.path(FreedAttr), 1)",
		"		// for the callers behind it: freed tells the takes judged before."},
	{"a renew that skips the TTL", "release.go",
		"		u.set(u.probeOf(p, ls.id)+\".\"+u.path(gateProbeExp), u.num(exp))\n	}\n	u.ttl(exp)",
		"		u.set(u.probeOf(p, ls.id)+\".\"+u.path(gateProbeExp), u.num(exp))\n	}"},
	{"a release retry without its margin", "release.go",
		"l.clock().UnixMilli() < ls.firstExp()-l.margin.Milliseconds()", "l.clock().UnixMilli() < ls.firstExp()"},
	{"a take without its passed-over check", "acquire.go",
		"if mixed || a.req.PrincipalCap > 0 || h.passed || claimedAhead {", "if mixed || a.req.PrincipalCap > 0 || claimedAhead {"},
	{"a withdrawal that does not move freed", "task.go",
		"		u.count(u.path(FreedAttr), 1) // a ticket leaving can change whose turn it is\n", ""},
	{"a task started again before StartTimeout", "task.go",
		"if !t.task || t.started > now-StartTimeout.Milliseconds() ||", "if !t.task || t.started > now ||"},
	{"a claim when it is not the task's turn", "task.go",
		"if !served {", "if !served && tries < 0 {"},
	{"a claim that keeps the start it claimed", "acquire.go",
		"		u.remove(u.path(TicketsAttr, id, ticketStarted), u.path(TicketsAttr, id, ticketFirst))\n", ""},
	{"a task started again that reads as unclaimed since then", "task.go",
		"u.num(cmp.Or(t.unclaimedSince(), now))", "u.num(cmp.Or(now, t.unclaimedSince()))"},
	{"no task started behind a task passed", "task.go",
		"h, _, passed := v.presume(now, nil, r, nil)", "h, passed := v.walk(now, nil, r, nil), []*ticket(nil)"},
	{"a lost start never made again", "task.go",
		"if !t.task || t.started > now-StartTimeout.Milliseconds() ||", "if !t.task || t.started != 0 ||"},
	{"a claim that takes another worker's lease for its own", "task.go",
		"case held && slices.Contains(a.unsure, exp) && t != nil && t.claim == a.claim:", "case held && (slices.Contains(a.unsure, exp) || len(a.unsure) != 0):"},
	{"a task's join that can land late, after its claim", "acquire.go",
		"		// withdrawn or lapsed: each of those moves freed.\n		u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))\n", "		// withdrawn or lapsed: each of those moves freed.\n"},
	{"a task's release that leaves its claimed ticket behind", "release.go",
		"	if keep {\n", "	if keep || ls.task {\n"},
	{"a place given back that leaves its claim named in the ticket", "release.go",
		"		u.remove(tp + \".\" + u.path(ticketClaim))\n", ""},
	{"a claim that takes its task's ticket out", "acquire.go",
		"case a.n != 0 && a.task:", "case a.n != 0 && a.task && a.n < 0:"},
	{"a running task that holds its principal to the reserve", "task.go",
		"if t == nil || t.label != label || v.waits(t, now) {", "if t == nil || t.label != label || t.live(now) {"},
	{"a new estimate that starts a late waiter's back-off again", "acquire.go",
		"		// its place, or a move up the queue, does not start it again.\n		return min(d, most)",
		"		// its place, or a move up the queue, does not start it again.\n		a.look = overdueLook\n		return min(d, most)"},
	{"a lapsed claim that still holds its ticket", "item.go",
		"return t.task && ok && exp >= now && t.live(now)", "return t.task && ok && exp >= 0 && t.live(now)"},
	{"a charge beside a waiter that needs its token", "acquire.go",
		"		waiter = true\n", ""},
	{"a charge beside waiters not conditioned on how many wait", "acquire.go",
		"\t\tu.cond(\"size(\"+u.path(QueueAttr)+\") <= \"+u.num(int64(v.tickets(false)+room-room/2)),\n\t\t\t\"size(\"+u.path(TasksAttr)+\") <= \"+u.num(int64(v.tickets(true)+room/2)))\n", ""},
	{"a charge beside waiters that leaves them no tokens", "acquire.go",
		"	case err == nil && rl == nil:\n		return keep, nil\n", "	case err == nil && rl == nil:\n		return nil, nil\n"},
	{"whose turn counting a call holding nothing as a place", "turn.go",
		"		if !t.nothing {\n", "		if true {\n"},
	{"a call with no cap whose take holds a lease", "acquire.go",
		"place := a.req.holds()", "place := true"},
	{"a charge resent after an unknown outcome", "acquire.go",
		"\t\t\tu := newUpdate()\n\t\t\tu.once = true\n\t\t\tvar err error\n", "\t\t\tu := newUpdate()\n\t\t\tvar err error\n"},
	{"a charge through the hold and the pauses", "acquire.go",
		"\t\t\tu.admit(gateAttrs(req.Tool, \"\"), req.Holder, \"\", 0, now, nil, v)\n", ""},
	{"a refund resent after an unknown outcome", "release.go",
		"\t\t\tu.once = refund\n", ""},
	{"a newcomer's take holding nothing with no seq condition", "acquire.go",
		"\t\tif a.n == 0 {\n\t\t\t// A newcomer: nobody joined since it looked.\n", "\t\tif a.n == 0 && place {\n\t\t\t// A newcomer: nobody joined since it looked.\n"},
	{"a take holding nothing that leaves no tokens to the waiters before it", "acquire.go",
		"\tu.charge(a.req.Rates, bv, now, keep)\n",
		"\tif a.req.holds() {\n\t\tu.charge(a.req.Rates, bv, now, keep)\n\t} else {\n\t\tu.charge(a.req.Rates, bv, now, nil)\n\t}\n"},
	{"a refund of a token its bucket regained with time", "rate.go",
		"back := min(r.interval(), c.tats[r.Name]-since*r.interval()-now)", "back := r.interval() + 0*since"},
	{"a pass over callers presumed gone that does not move freed", "acquire.go",
		"		u.removeTicket(t.id, t.label, t.n, false)\n		u.count(u.path(FreedAttr), 1)\n", "		u.removeTicket(t.id, t.label, t.n, false)\n"},
	{"no caller passing dead callers for the tasks they hold back", "acquire.go",
		"case !h.served && !a.actsForTasks(v, now, rs, h, bypass):", "case !h.served:"},
}

// TestMutantsFailTheSimulation builds the package with each mutant in
// place (go test -overlay, the tree untouched) and runs the fault
// simulation over up to mutantSeeds seeds: every mutant must fail it. It runs
// when LEASE_MUTANTS is set (make mutants; CI's soak runs it).
func TestMutantsFailTheSimulation(t *testing.T) {
	if os.Getenv("LEASE_MUTANTS") == "" {
		t.Skip("LEASE_MUTANTS is not set: make mutants runs the mutants")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			// Each mutant builds and runs apart (its own overlay and
			// temporary directory): as many at once as go test allows.
			t.Parallel()
			src, err := os.ReadFile(filepath.Join(dir, m.file))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(src), m.from); n != 1 {
				t.Fatalf("%s holds the line to mutate %d times, want once: %q", m.file, n, m.from)
			}
			tmp := t.TempDir()
			mutated := filepath.Join(tmp, m.file)
			if err := os.WriteFile(mutated, []byte(strings.Replace(string(src), m.from, m.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(dir, m.file): mutated}})
			ov := filepath.Join(tmp, "overlay.json")
			if err := os.WriteFile(ov, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "test", "-count=1", "-overlay", ov, "-run", "^TestFaultSimulation$", ".")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "LEASE_MUTANTS=", "LEASE_SIM_SEEDS="+strconv.Itoa(mutantSeeds), "LEASE_SIM_SEED=", "LEASE_SIM_FROM=", "LEASE_SIM_STOP=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Errorf("the simulation passed with the mutant %q in place", m.name)
				return
			}
			// Caught by a violation the model found, not by a build error.
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, ": violations ") {
					t.Logf("caught: %s", strings.TrimSpace(line))
					return
				}
			}
			t.Errorf("the simulation failed with the mutant %q in place, but with no violation:\n%s", m.name, out)
		})
	}
}

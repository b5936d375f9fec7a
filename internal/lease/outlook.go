package lease

import "time"

// Outlook is what this process last saw of a key's item, as it bears on
// how long a request waits there: read from what the process's acquires,
// releases and claims on the key last brought back, never from the store.
type Outlook struct {
	// Ahead counts the live tickets, callers' and tasks', that come before
	// ticket id in the order of turn (before a ticket of req's principal
	// joining now, when id is not in the queue).
	Ahead int
	// Places is the key's cap as the item stands (the adaptive limit, with
	// Adaptive), req.Cap when the item is unknown; 0: none.
	Places int
	// CallLength is how long calls on the key last (the fleet's running
	// mean, as mcpgate status shows it), zero if unknown.
	CallLength time.Duration
	// Tasks counts the live tickets of tasks on the item.
	Tasks int
}

// Outlook returns what this process last saw of req.Key's item about
// ticket id; ok is false when it has seen nothing of the item.
func (l *Limiter) Outlook(req Request, id string) (o Outlook, ok bool) {
	v, _, _ := l.board(req.Key).latest()
	if v == nil {
		return Outlook{Places: req.Cap}, false
	}
	now := l.clock().UnixMilli()
	return Outlook{Ahead: v.before(now, &asker{id: id, label: req.Holder}), Places: req.capIn(v),
		CallLength: time.Duration(v.callMS) * time.Millisecond, Tasks: v.waiting(now, true)}, true
}

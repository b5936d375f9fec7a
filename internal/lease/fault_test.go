package lease

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// faultAPI stands between the limiter and the real store and does to the
// writes its armed rules match what the network can: lose an answer after
// the write landed, or hold a write in flight (the caller told it failed)
// until release sends it, landing late. Rules are used once, in order.
type faultAPI struct {
	API
	mu    sync.Mutex
	rules []rule
	held  []*dynamodb.UpdateItemInput
}

type fate int

const (
	lose fate = iota // landed; its answer lost
	hold             // not sent now; the caller is told it failed; sent on release()
)

type rule struct {
	match func(*dynamodb.UpdateItemInput) bool // nil matches any write
	fate  fate
	after func() // runs once the rule's write was dealt with, before its caller hears of it
}

var errInjected = errors.New("injected: connection reset")

func (f *faultAPI) arm(r rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, r)
}

func (f *faultAPI) take(in *dynamodb.UpdateItemInput) (rule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.match == nil || r.match(in) {
			f.rules = append(f.rules[:i], f.rules[i+1:]...)
			return r, true
		}
	}
	return rule{}, false
}

func (f *faultAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r, ok := f.take(in)
	if ok && r.after != nil {
		defer r.after()
	}
	switch fate := r.fate; {
	case !ok:
	case fate == lose:
		if _, err := f.API.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		return nil, errInjected
	case fate == hold:
		f.mu.Lock()
		f.held = append(f.held, in)
		f.mu.Unlock()
		return nil, errInjected
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

// release sends the writes held so far, as attempts landing late, and
// reports which landed.
func (f *faultAPI) release() []bool {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	var landed []bool
	for _, in := range held {
		_, err := f.API.UpdateItem(context.Background(), in)
		landed = append(landed, err == nil)
	}
	return landed
}

// writes matches a write whose clause kw (SET, REMOVE, ADD, DELETE)
// changes attribute attr, or something in it.
func writes(kw, attr string) func(*dynamodb.UpdateItemInput) bool {
	return func(in *dynamodb.UpdateItemInput) bool {
		for p, n := range in.ExpressionAttributeNames {
			if n == attr {
				c := clause(aws.ToString(in.UpdateExpression), kw)
				return strings.Contains(c, p+" ") || strings.Contains(c, p+".") || strings.HasSuffix(c, p)
			}
		}
		return false
	}
}

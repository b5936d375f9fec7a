package testkit

import "sync"

// Burst makes n calls at once, call(0) … call(n-1) each on its own
// goroutine, and returns their results in call order once all have
// returned. Spreading calls over gateway processes is the caller's:
// call(i) picks gateway i%len(gws).
func Burst[T any](n int, call func(i int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = call(i) })
	}
	wg.Wait()
	return out
}

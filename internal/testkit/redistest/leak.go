package redistest

import "go.uber.org/goleak"

// LeakOptions returns the goleak options that tests need to check for
// leaked goroutines when they use go-redis clients, as in
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(m, redistest.LeakOptions()...)
//	}
//
// Once a go-redis connection pool has failed to dial PoolSize times in a
// row, as it does while a test keeps a server down, it starts a goroutine
// that probes the server once a second. The goroutine sees that the client
// was closed only when it wakes, so it can outlive Close by up to a second,
// longer than goleak waits. It ends on its own, so it is not a leak.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	}
}

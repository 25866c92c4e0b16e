package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// redisGoroutines is the many-goroutine case of the Redis benchmarks.
const redisGoroutines = 32

// redisLimit is the rate per key, and the burst, of the limiters that
// decide in Redis: out of reach of one machine's round trips (10^5 a
// second at most). It is not limitPerSecond because redis_rate's GCRA
// keeps time in floating-point seconds since 2017, where an emission
// interval of 10^-9 s rounds away: it would then skip its SET, and be
// timed doing less than it does in service.
const redisLimit = 1_000_000

// redisServer is one redis-server process shared by the Redis
// benchmarks, started on first use and stopped by TestMain.
var redisServer struct {
	once sync.Once
	cmd  *exec.Cmd
	addr string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if redisServer.cmd != nil {
		redisServer.cmd.Process.Kill()
		redisServer.cmd.Wait()
	}
	os.Exit(code)
}

// startRedis returns the address of the shared redis-server, starting
// it on a free loopback port with no persistence. It skips b if
// redis-server is not on PATH.
func startRedis(b *testing.B) string {
	b.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("redis-server is not on PATH")
	}
	redisServer.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			redisServer.err = err
			return
		}
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", os.TempDir())
		if err := cmd.Start(); err != nil {
			redisServer.err = err
			return
		}
		redisServer.cmd = cmd
		redisServer.addr = "127.0.0.1:" + port
		c := redis.NewClient(&redis.Options{Addr: redisServer.addr})
		defer c.Close()
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			if c.Ping(context.Background()).Err() == nil {
				return
			}
			if time.Since(start) > 10*time.Second {
				redisServer.err = fmt.Errorf("redis-server on %s did not answer PING", redisServer.addr)
				return
			}
		}
	})
	if redisServer.err != nil {
		b.Fatal(redisServer.err)
	}
	return redisServer.addr
}

// roundTrips counts the round trips a go-redis client makes: one per
// command, or per pipeline however many commands it carries.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// commands is the total of calls in Redis's INFO commandstats, INFO
// itself left out: every command Redis ran, those run inside scripts
// included.
func commands(b *testing.B, admin *redis.Client) int64 {
	b.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}

// redisCPU is the CPU time Redis has used (INFO cpu: used_cpu_sys and
// used_cpu_user, its main thread and the others).
func redisCPU(b *testing.B, admin *redis.Client) time.Duration {
	b.Helper()
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu line %q: %v", sc.Text(), err)
			}
			total += x
		}
	}
	return time.Duration(total * float64(time.Second))
}

// timed is allow timing every 64th call into *lat: the calls' latency,
// sampled so that timing costs the fast ones (a Hybrid decision in
// memory) next to nothing, into a ring of the last 4,096 samples made
// once, so that it allocates nothing per call. One goroutine's.
func timed(allow decider, lat *[]time.Duration) decider {
	const ring = 1 << 12
	*lat = make([]time.Duration, 0, ring)
	n := 0
	return func(key string) (bool, error) {
		n++
		if n&63 != 0 {
			return allow(key)
		}
		t := time.Now()
		ok, err := allow(key)
		d := time.Since(t)
		if len(*lat) < ring {
			*lat = append(*lat, d)
		} else {
			(*lat)[(n>>6)%ring] = d
		}
		return ok, err
	}
}

// redisContender makes a decider over client; done releases it.
type redisContender func(b *testing.B, client *redis.Client) (allow decider, done func())

// newRedisRate is github.com/go-redis/redis_rate/v10: one GCRA script
// call in Redis per decision.
func newRedisRate(_ *testing.B, client *redis.Client) (decider, func()) {
	l := redis_rate.NewLimiter(client)
	limit := redis_rate.PerSecond(redisLimit)
	ctx := context.Background()
	return func(key string) (bool, error) {
		res, err := l.Allow(ctx, key, limit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, func() {}
}

// newHybridMode is hybridlimit's hybrid.Limiter over global.Redis with
// one policy of mode m, at limit per second, and every other setting at
// its default (sync every 100 ms).
func newHybridMode(m hybrid.Mode, limit int64) redisContender {
	return func(b *testing.B, client *redis.Client) (decider, func()) {
		syncer, err := global.NewRedis(context.Background(), global.RedisConfig{Client: client})
		if err != nil {
			b.Fatal(err)
		}
		l, err := hybrid.New(hybrid.Config{
			Policies: []hybrid.Policy{{Name: "bench", Mode: m, Limit: limit, Window: time.Second}},
			Syncer:   syncer,
		})
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) (bool, error) {
			d, err := l.Allow(key)
			return d.Allowed(), err
		}, func() { l.Close() }
	}
}

// redisBench runs newContender with 1 and 1,000 keys (offered in turn),
// from 1 goroutine and from redisGoroutines, against a fresh data set.
// Beside ns/op it reports cmds/op, Redis's commands (INFO commandstats)
// per decision, and rtt/op, the client's round trips per decision, both
// counted over the timed loop alone.
func redisBench(b *testing.B, newContender redisContender) {
	addr := startRedis(b)
	for _, nkeys := range []int{1, 1000} {
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		par := max(1, redisGoroutines/runtime.GOMAXPROCS(0))
		for _, g := range []int{1, par * runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("keys=%d/g=%d", nkeys, g), func(b *testing.B) {
				admin := redis.NewClient(&redis.Options{Addr: addr})
				defer admin.Close()
				if err := admin.FlushAll(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				var rtt roundTrips
				client := redis.NewClient(&redis.Options{
					Addr: addr, ContextTimeoutEnabled: true,
					PoolSize: 2 * redisGoroutines, // no goroutine waits for a connection
				})
				client.AddHook(&rtt)
				defer client.Close()
				allow, done := newContender(b, client)
				defer done()
				// Each key is offered, and then given a moment: a
				// Hybrid key's first lease comes from the sync
				// loop, within one interval.
				warmUp(b, allow, keys)
				time.Sleep(200 * time.Millisecond)
				warmUp(b, allow, keys)

				cmds0, rtt0, cpu0 := commands(b, admin), rtt.n.Load(), redisCPU(b, admin)
				var admitted, failed atomic.Int64
				var mu sync.Mutex
				var lat []time.Duration
				b.ReportAllocs()
				key := func(i int) string { return keys[i%nkeys] }
				if g == 1 {
					ok, bad := tally(timed(allow, &lat), key, 0, b.Loop)
					admitted.Add(int64(ok))
					failed.Add(int64(bad))
				} else {
					b.SetParallelism(par)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						var mine []time.Duration
						ok, bad := tally(timed(allow, &mine), key, int(offset.Add(1)), pb.Next)
						admitted.Add(int64(ok))
						failed.Add(int64(bad))
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
					})
					b.StopTimer()
				}
				cmds, rtts, cpu := commands(b, admin)-cmds0, rtt.n.Load()-rtt0, redisCPU(b, admin)-cpu0
				b.ReportMetric(float64(cmds)/float64(b.N), "cmds/op")
				b.ReportMetric(float64(rtts)/float64(b.N), "rtt/op")
				b.ReportMetric(cpu.Seconds()*1e9/float64(b.N), "redis-cpu-ns/op")
				if len(lat) > 0 {
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
					b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				}
				report(b, int(admitted.Load()), int(failed.Load()))
			})
		}
	}
}

// BenchmarkRedis_RedisRate measures one redis_rate Allow (PerSecond):
// a GCRA script run in Redis for every decision, with 1 and 1,000 keys,
// from 1 and 32 goroutines, with Redis's commands and the client's round
// trips per decision.
func BenchmarkRedis_RedisRate(b *testing.B) { redisBench(b, newRedisRate) }

// BenchmarkRedis_Strict measures one hybrid.Limiter decision under a
// Strict policy, one script call in Redis per decision as redis_rate
// makes, with 1 and 1,000 keys, from 1 and 32 goroutines, with Redis's
// commands and the client's round trips per decision.
func BenchmarkRedis_Strict(b *testing.B) { redisBench(b, newHybridMode(hybrid.Strict, redisLimit)) }

// BenchmarkRedis_Hybrid measures one hybrid.Limiter decision under a
// Hybrid policy, decided in memory from a lease while the sync loop
// reconciles with Redis every 100 ms in the background, with 1 and 1,000
// keys, from 1 and 32 goroutines. Its Redis commands per decision are the
// sync loop's, spread over however many decisions the run made.
func BenchmarkRedis_Hybrid(b *testing.B) { redisBench(b, newHybridMode(hybrid.Hybrid, limitPerSecond)) }

package local_test

import (
	"math"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

// fuzzCost decodes a byte into a cost: mostly ordinary ones, and the
// edges a caller can pass by mistake or on purpose — zero, negative, just
// above the burst, and near the ends of int.
func fuzzCost(b byte, burst int64) int {
	k := int(b >> 3)
	switch b % 8 {
	case 0:
		return 0
	case 1:
		return -1 - k
	case 2:
		return math.MinInt + k
	case 3:
		return math.MaxInt - k
	case 4:
		return int(burst) + 1 + k
	default:
		return 1 + k%int(burst)
	}
}

// FuzzCosts drives AllowN, ReserveNAt and Cancel (again, and on copies)
// with arbitrary costs and checks that nothing panics and that what was
// admitted, plus every reservation not cancelled, stays within what the
// algorithm allows over any stretch of time. Each op is three bytes: how
// far the clock moves (high bit: backwards), what to call, and the cost.
// An admission counts at the latest time the Limiter was shown, as a step
// back counts as no time passing.
func FuzzCosts(f *testing.F) {
	// Reserve 1 of a burst of 1, cancel, reserve again, cancel the first
	// again, then Allow: a Cancel that acts twice admits 2.
	f.Add([]byte{0, 0, 99, 0, 0, 1, 5, 0, 2, 0, 0, 1, 5, 0, 2, 0, 0, 0, 5})
	f.Add([]byte{0, 3, 10, 2, 0, 0, 5, 0, 1, 6, 0, 2, 0, 0, 1, 6, 0, 2, 0, 0, 3, 0, 0, 1, 6})
	f.Add([]byte{0, 1, 1, 1, 0, 1, 5, 0, 2, 0, 0, 1, 5, 0, 2, 0, 0, 2, 0, 0, 1, 5, 0, 1, 5})
	f.Add([]byte{0, 5, 3, 4, 0, 0, 3, 0, 0, 11, 0, 0, 2, 0, 1, 4, 0, 0, 1, 0, 5, 0})
	f.Add([]byte{1, 4, 2, 0, 10, 0, 6, 0, 0, 3, 0x81, 0, 7, 20, 0, 6})
	f.Add([]byte{2, 6, 9, 0, 0, 0, 7, 0, 0, 12, 0, 0, 1, 90, 0, 7})
	f.Add([]byte{3, 3, 4, 0, 0, 0, 6, 0x90, 0, 6, 0, 0, 0xff, 5, 0, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		alg := local.Algorithm(data[0] % 4)
		limit := int64(data[1]%16) + 1
		cfg := local.Config{
			Algorithm: alg,
			Limit:     limit,
			Window:    time.Duration(int64(data[2])+1) * 10 * time.Millisecond,
			Burst:     limit,
		}
		if alg == local.TokenBucket {
			cfg.Burst = int64(data[3]%16) + 1
		}
		c := clock.NewManual(epoch)
		cfg.Clock = c
		l, err := local.New(cfg)
		require.NoError(t, err)

		type held struct {
			r    local.Reservation
			at   int64
			n    int64
			live bool
		}
		var adm []admission
		var res []*held
		now, latest := int64(0), int64(0)
		monotone := true
		for b := data[4:]; len(b) >= 3; b = b[3:] {
			dt := time.Duration(b[0]&0x7f) * time.Millisecond
			if b[0]&0x80 != 0 {
				dt, monotone = -dt*7, false
			}
			c.Advance(dt)
			now += int64(dt)
			n := fuzzCost(b[2], cfg.Burst)
			kind := b[1] % 4
			if kind == 0 || kind == 1 && alg == local.TokenBucket {
				latest = max(latest, now) // the Limiter reads the time
			}
			switch kind {
			case 0:
				r, err := l.AllowN("k", n)
				require.NoError(t, err)
				require.GreaterOrEqual(t, r.Remaining(), int64(0))
				if !r.Allowed() {
					require.Positive(t, r.RetryAfter())
					if int64(n) > cfg.Burst {
						require.Equal(t, local.Never, r.RetryAfter())
					}
				} else if n > 0 {
					require.LessOrEqual(t, int64(n), cfg.Burst)
					adm = append(adm, admission{latest, int64(n)})
				}
			case 1:
				maxDelay := local.Never
				if b[1]&4 != 0 {
					maxDelay = time.Duration(b[1]>>3) * 10 * time.Millisecond
				}
				r, err := l.ReserveNAt("k", c.Now(), n, maxDelay)
				if alg != local.TokenBucket {
					require.ErrorIs(t, err, local.ErrReserveUnsupported)
					continue
				}
				require.NoError(t, err)
				if !r.OK() {
					require.Equal(t, local.Never, r.Delay())
					continue
				}
				require.LessOrEqual(t, r.Delay(), maxDelay)
				if n > 0 {
					require.LessOrEqual(t, int64(n), cfg.Burst)
					res = append(res, &held{r: r, at: latest + int64(r.Delay()), n: int64(n), live: true})
				}
			default:
				if len(res) == 0 {
					continue
				}
				h := res[int(b[1]>>2)%len(res)]
				copied := h.r
				h.r.Cancel()
				if b[1]%4 == 3 {
					copied.Cancel() // a copy, and the same one again
					h.r.Cancel()
				}
				h.live = false
			}
		}
		for _, h := range res {
			if h.live {
				adm = append(adm, admission{h.at, h.n})
			}
		}
		if alg != local.TokenBucket {
			checkBounds(t, cfg, adm)
			return
		}
		checkTokenBucket(t, cfg, adm, monotone)
	})
}

// checkTokenBucket asserts that in every stretch between two admissions a
// token bucket admitted at most its burst plus what refilled in between.
// An admission is recorded at the latest time the clock showed; after a
// step back the Limiter may have decided up to its high-water mark's lag
// (about a millisecond) earlier, which the bound allows for.
func checkTokenBucket(t *testing.T, cfg local.Config, adm []admission, monotone bool) {
	t.Helper()
	tk := (int64(cfg.Window) + cfg.Limit - 1) / cfg.Limit
	slack := int64(0)
	if !monotone {
		slack = (1<<20)/tk + 1
	}
	sort.SliceStable(adm, func(i, j int) bool { return adm[i].at < adm[j].at })
	for i := range adm {
		var total int64
		for j := i; j < len(adm); j++ {
			total += adm[j].n
			elapsed := adm[j].at - adm[i].at
			require.LessOrEqual(t, total, cfg.Burst+elapsed/tk+slack,
				"token bucket admitted %d in %v", total, time.Duration(elapsed))
		}
	}
}

package hybrid_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
)

// ledger is a fleet for FuzzCosts: it grants each sync a lease taken
// from the fuzzer's input and keeps the totals the invariants need.
type ledger struct {
	next     func() int64
	granted  int64 // every lease it handed out
	consumed int64 // every consumption reported
}

func (g *ledger) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		if u.Consumed < 0 || u.Demand < 0 {
			panic("negative report")
		}
		g.consumed += u.Consumed
		lease := g.next()
		g.granted += lease
		resp.Grants[i] = fleet.Grant{Lease: lease, TTL: time.Hour, Nodes: 1, Weight: 1}
	}
	return resp, nil
}

// FuzzCosts drives one Hybrid key with arbitrary costs (negative, zero,
// past the burst, past 2^31) through AllowN, TakeN and any
// number of Cancels, and syncs at arbitrary points with arbitrary leases.
// Invariants, end to end: nothing panics; what the node admitted, less
// what it gave back, never exceeds its starter credit plus every lease
// the fleet granted; and once synced, the fleet has been told of at
// least that much, and no more than was admitted.
func FuzzCosts(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 2, 5, 0, 0, 0, 4, 0})
	f.Add([]byte{3, 0, 0, 0, 128, 1, 0, 0, 0, 128, 4, 0, 4, 0, 4, 0})
	f.Add([]byte{1, 206, 255, 255, 255, 4, 0, 4, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{3, 255, 255, 255, 127, 3, 0, 0, 0, 128, 0, 0, 0, 0, 128, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const burst = math.MaxUint32 >> 1 // the largest a Hybrid policy takes
		pos := 0
		u32 := func() uint32 {
			var b [4]byte
			pos += copy(b[:], ops[min(pos, len(ops)):])
			return binary.LittleEndian.Uint32(b[:])
		}
		nodes := &ledger{next: func() int64 { return int64(u32() % (burst + 1)) }}
		clk := clock.NewManual(epoch)
		l, err := hybrid.New(hybrid.Config{
			Node: "n1", Syncer: nodes, ManualSync: true, Clock: clk, HotKeyRate: -1,
			Policies: []hybrid.Policy{{Name: "p", Rate: 1e9, Burst: burst}},
		})
		require.NoError(t, err)
		defer l.Close()
		ctx := context.Background()

		// A new key's starter credit: 1% of one interval's quota
		// (1e9/s × 100ms).
		const credit = 1_000_000
		var net, gross int64 // admitted less given back; admitted
		type hold struct {
			r    *hybrid.Reservation
			cost int64
		}
		var held []hold
		for pos < len(ops) {
			op := ops[pos]
			pos++
			cost := int(int32(u32()))
			switch op % 5 {
			case 0:
				d, err := l.AllowN("k", cost)
				require.NoError(t, err)
				require.False(t, d.Degraded())
				if d.Allowed() && cost > 0 {
					net += int64(cost)
					gross += int64(cost)
				}
			case 1, 2:
				r, err := l.TakeN("k", cost)
				require.NoError(t, err)
				if r.Decision().Allowed() && cost > 0 {
					net += int64(cost)
					gross += int64(cost)
					held = append(held, hold{r, int64(cost)})
				}
			case 3:
				if len(held) > 0 {
					i := cost & math.MaxInt32 % len(held)
					for range 1 + int(op>>3) {
						held[i].r.Cancel() // gives back once
					}
					net -= held[i].cost
					held[i] = held[len(held)-1]
					held = held[:len(held)-1]
				}
			case 4:
				clk.Advance(time.Duration(op>>3+1) * time.Millisecond)
				require.NoError(t, l.SyncOnce(ctx))
			}
			require.LessOrEqual(t, net, credit+nodes.granted, "admitted past every lease granted")
		}
		clk.Advance(time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx))
		// A take given back after a sync reported it stays reported
		// (reports only add), so the fleet may have been told more than
		// the net, never less, and never more than was admitted.
		require.GreaterOrEqual(t, nodes.consumed, net, "the fleet was told less than was admitted and kept")
		require.LessOrEqual(t, nodes.consumed, gross, "the fleet was told of more than was admitted")
	})
}

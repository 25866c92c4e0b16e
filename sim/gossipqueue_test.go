package sim

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// named is a memberlist.NamedBroadcast.
type named struct {
	name string
	msg  []byte
}

func (b *named) Invalidates(memberlist.Broadcast) bool { return false }
func (b *named) Message() []byte                       { return b.msg }
func (b *named) Finished()                             {}
func (b *named) Name() string                          { return b.name }

// TestTxQueueIsMemberlists drives the simulator's queue and memberlist's
// own TransmitLimitedQueue with the same random updates and packets, and
// checks that every packet holds the same messages in the same order.
func TestTxQueueIsMemberlists(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{4, 16, 200} {
		rng := rand.New(rand.NewPCG(uint64(nodes), 2))
		ml := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return nodes }, RetransmitMult: 12}
		q := newTxQueue()
		limit := 12 * len(strconv.Itoa(nodes)) // ceil(log10(n+1)) for these n
		seq := 0
		for step := range 20_000 {
			if rng.IntN(3) > 0 {
				name := "k" + strconv.Itoa(rng.IntN(60))
				seq++
				msg := append([]byte(strconv.Itoa(seq)+"/"), bytes.Repeat([]byte{'x'}, 30+rng.IntN(40))...)
				ml.QueueBroadcast(&named{name, msg})
				q.put(name, msg, version{key: -1})
				continue
			}
			avail := 100 + rng.IntN(1300)
			want := ml.GetBroadcasts(3, avail)
			got := q.take(3, avail, limit)
			require.Len(t, got, len(want), "%d nodes, step %d", nodes, step)
			for i := range want {
				require.Equal(t, string(want[i]), string(got[i].msg), "%d nodes, step %d, message %d", nodes, step, i)
			}
			require.Equal(t, ml.NumQueued(), q.n, "%d nodes, step %d", nodes, step)
		}
	}
}

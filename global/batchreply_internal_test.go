package global

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// batchReplyOf builds, from raw, what a store that lies could answer a
// lease batch of batch keys: a list of too few or too many entries, each
// a key's numbers (as integers or strings, of the right count or not),
// an error reply of any kind, a string or nothing; or no list at all.
func batchReplyOf(raw []byte, batch int) any {
	next := func() byte {
		if len(raw) == 0 {
			return 0
		}
		b := raw[0]
		raw = raw[1:]
		return b
	}
	num := func() int64 {
		var b [8]byte
		n := copy(b[:], raw)
		raw = raw[n:]
		return int64(binary.LittleEndian.Uint64(b[:]))
	}
	errs := []string{"CORRUPT tokens holds \"nan\"", "WRONGTYPE Operation against a key", "OOM command not allowed",
		"MOVED 1 127.0.0.1:1", "READONLY replica", "user_script:1: attempt to compare", "", "CROSSSLOT Keys"}
	switch next() % 8 {
	case 0:
		return "OK"
	case 1:
		return nil
	case 2:
		return int64(next())
	}
	list := make([]any, int(next())%(batch+2))
	for k := range list {
		switch next() % 6 {
		case 0:
			list[k] = reply(errs[int(next())%len(errs)])
		case 1:
			list[k] = fmt.Sprint(num())
		case 2:
			list[k] = nil
		default:
			v := make([]any, 10+int(next())%3-1)
			for i := range v {
				if next()%4 == 0 {
					v[i] = fmt.Sprint(num())
				} else {
					v[i] = num()
				}
			}
			list[k] = v
		}
	}
	return list
}

// FuzzBatchReplies feeds the lease batch's reader (batchOf) and the
// grant reader after it arbitrary replies, as FuzzReplies does a key's
// numbers: no panic; a reply that is no list of 1 to batch entries
// fails every key of the call as corrupt; otherwise each key in order
// gets its own outcome, numbers of the right count or an error that
// says what it is (corrupt, invalid or unreachable), and the call
// counts as unanswered only if every key's entry says Redis takes no
// writes. What is granted is within what a live fleet could hold.
func FuzzBatchReplies(f *testing.F) {
	f.Add(uint8(3), []byte{3, 3, 3, 0, 10, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(48), []byte{7, 49})
	f.Add(uint8(2), []byte{4, 2, 0, 2, 0, 4})
	f.Fuzz(func(t *testing.T, n uint8, raw []byte) {
		batch := 1 + int(n)%batchKeys
		c := scriptCall{script: leaseBatch, reply: 10, batch: batch}
		for k := range batch {
			c.keys = append(c.keys, fmt.Sprintf("hl:{k%d}:lease", k), fmt.Sprintf("hl:{k%d}:lshards", k))
		}
		r := &Redis{addr: "redis.test:6379"}
		res := r.batchOf(r.addr, c, batchReplyOf(raw, batch))
		if res.err != nil {
			require.ErrorIs(t, res.err, fleet.ErrCorrupt)
			require.Empty(t, res.items)
			require.False(t, res.down)
			return
		}
		require.True(t, len(res.items) >= 1 && len(res.items) <= batch, "%d entries for %d keys", len(res.items), batch)
		down := true
		u := fleet.Usage{Key: "k", Limit: fleet.Limit{Limit: 100, Window: time.Second}, Demand: 50}
		for k, it := range res.items {
			down = down && it.down
			if it.err == nil {
				require.Len(t, it.vals, c.reply, "entry %d", k)
				g, err := r.grantOf(u, 100*time.Millisecond, it.vals)
				if err != nil {
					require.ErrorIs(t, err, fleet.ErrCorrupt)
				} else if g.Shards == 0 {
					require.True(t, g.Lease >= 0 && g.Lease <= u.Limit.Capacity(), "lease %d", g.Lease)
				}
				continue
			}
			require.Nil(t, it.vals, "entry %d", k)
			require.Equal(t, it.down, errors.Is(it.err, fleet.ErrUnreachable), "entry %d: %v", k, it.err)
			require.True(t, errors.Is(it.err, fleet.ErrCorrupt) || errors.Is(it.err, fleet.ErrInvalid) || errors.Is(it.err, fleet.ErrUnreachable),
				"entry %d: %v", k, it.err)
		}
		require.Equal(t, down, res.down)
	})
}

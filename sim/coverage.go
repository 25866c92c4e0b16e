package sim

import (
	"encoding/binary"

	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
)

// coverage measures how far gossip carries each update: of every (peer,
// update) pair, the share in which the peer heard the update, or a newer
// one of the same origin and key, within coverWithin of the update's
// stamp (its origin's clock at the sync that made it). An update counts
// once it is first sent, towards every member of the fleet then; updates
// stamped too late to be heard before the run ends do not count. The
// reality test measures real memberlist with the same code.
//
// To stay small at a thousand nodes it follows at most maxSlots keys,
// the first ones sent, which a load spread over many keys samples well
// enough; the state is nodes² × slots.
type coverage struct {
	nodes, slots int
	names        map[string]int
	vers         [][]stamped // [origin*slots+slot]: versions sent, stamps ascending
	heardTo      []int32     // [(receiver*nodes+origin)*slots+slot]: versions heard so far
	epochMs      int64       // the stamp of the run's start
	end          int64       // the run's end, nanoseconds since its start
	hits         int64
}

// stamped is one version of an origin's key.
type stamped struct {
	stamp uint64
	peers int32
}

const maxCoverageCells = 1 << 22

func newCoverage(nodes int, epochMs, end int64) *coverage {
	slots := max(1, min(16, maxCoverageCells/(nodes*nodes)))
	return &coverage{
		nodes: nodes, slots: slots, names: map[string]int{},
		vers:    make([][]stamped, nodes*slots),
		heardTo: make([]int32, nodes*nodes*slots),
		epochMs: epochMs, end: end,
	}
}

// versionOf names origin's update u for sent and heard.
func (c *coverage) versionOf(origin int, u gossipsim.Update) version {
	return c.version(origin, u.Name, updateStamp(u.Msg))
}

func (c *coverage) version(origin int, name string, stamp uint64) version {
	if c == nil || origin >= c.nodes {
		return version{key: -1}
	}
	k, ok := c.names[name]
	if !ok {
		if len(c.names) == c.slots {
			return version{key: -1}
		}
		k = len(c.names)
		c.names[name] = k
	}
	return version{origin: origin, key: k, stamp: stamp}
}

// sent records the versions in a packet or stream leaving at now, to a
// fleet of peers+1 members.
func (c *coverage) sent(vs []version, peers int) {
	if c == nil {
		return
	}
	for _, v := range vs {
		if v.key < 0 {
			continue
		}
		l := &c.vers[v.origin*c.slots+v.key]
		if n := len(*l); n == 0 || (*l)[n-1].stamp < v.stamp {
			*l = append(*l, stamped{v.stamp, int32(peers)})
		}
	}
}

// deadline is when a version stamped stamp must have been heard,
// nanoseconds since the start.
func (c *coverage) deadline(stamp uint64) int64 {
	return (int64(stamp)-c.epochMs)*1e6 + coverWithin
}

// heard records that receiver got the versions vs at now.
func (c *coverage) heard(receiver int, vs []version, now int64) {
	if c == nil || receiver >= c.nodes {
		return
	}
	for _, v := range vs {
		if v.key < 0 || v.origin == receiver {
			continue
		}
		l := c.vers[v.origin*c.slots+v.key]
		at := &c.heardTo[(receiver*c.nodes+v.origin)*c.slots+v.key]
		for ; int(*at) < len(l) && l[*at].stamp <= v.stamp; *at++ {
			if d := c.deadline(l[*at].stamp); now <= d && d <= c.end {
				c.hits++
			}
		}
	}
}

// percent is the share of (peer, update) pairs heard in time, in
// percent; 0 if no update counted.
func (c *coverage) percent() float64 {
	if c == nil {
		return 0
	}
	var total int64
	for _, l := range c.vers {
		for _, s := range l {
			if c.deadline(s.stamp) <= c.end {
				total += int64(s.peers)
			}
		}
	}
	if total == 0 {
		return 0
	}
	return 100 * float64(c.hits) / float64(total)
}

// entryOffset is where a one-key update's entry starts: after its
// header, origin count, origin name, incarnation and entry count (the
// gossip package's wire format, version 2).
func entryOffset(msg []byte) int {
	r := msg[min(3, len(msg)):]
	skip := func() { // a uvarint
		_, n := binary.Uvarint(r)
		r = r[max(n, 0):]
	}
	skip() // origins
	nameLen, n := binary.Uvarint(r)
	r = r[max(n, 0):]
	r = r[min(int(nameLen), len(r)):]
	skip() // incarnation
	skip() // entries
	return len(msg) - len(r)
}

// updateStamp is a one-key update's stamp: its version.
func updateStamp(msg []byte) uint64 {
	r := msg[min(entryOffset(msg)+8, len(msg)):] // past the key's hash
	_, n := binary.Uvarint(r)                    // the window
	s, _ := binary.Uvarint(r[max(n, 0):])
	return s
}

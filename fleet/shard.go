package fleet

import (
	"strconv"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/redisslot"
)

// MaxShards is the most shards a key is split into: a count beyond it,
// in a mark or a call, is refused.
const MaxShards = 1024

// A Shard names one of the parts a key is split into in the store (see
// ShardsOf), or, the zero Shard, the key itself. A Shard goes with its
// key: beside it in Usage.Key and Usage.Shard, and in AllowShard,
// ChargeShardAtLeast, LeaseUsed and ChargeLeasesAtLeast. Shards are
// comparable: a Syncer that keeps state per key keeps it per key and
// Shard.
//
// No user key names a shard's state. Redis keeps a key's state under
// its hash tag, the key with '{', '}' and '%' spelt %XX; a shard's tag
// is its key's, then "%#" and a number. A user key's tag has a '%' only
// before two hex digits, never before '#', so no key, however spelt,
// reaches another key's shards, nor its own. (Shards were once spelt
// key + "#" + n, and the user key "tenant#7" was tenant's seventh shard:
// a client could spend another tenant's limit within its own.)
type Shard struct {
	n uint32 // the number in its name, plus one; 0 for the key itself
}

// String returns how s ends its key's hash tag in Redis: "%#" and its
// number, or "" for the key itself.
func (s Shard) String() string {
	if s.n == 0 {
		return ""
	}
	return "%#" + strconv.FormatUint(uint64(s.n-1), 10)
}

// ShardsOf returns n shards of key, one per n-th of the Redis Cluster
// hash-slot space: shard i is numbered so that its hash tag (as Redis
// names its keys) falls in slots [i×16384/n, (i+1)×16384/n). Masters
// own contiguous slot ranges, so the shards of a hot key spread over
// them evenly (exactly, when n is a multiple of the number of masters
// and the ranges are equal), instead of all landing on the one master
// that owns key. n is taken to be between 1 and MaxShards.
func ShardsOf(key string, n int) []Shard {
	n = min(max(n, 1), MaxShards)
	var tag strings.Builder
	redisslot.WriteTag(&tag, key) // as global names keys in Redis
	base := tag.String() + "%#"
	out := make([]Shard, n)
	// Numbers are tried in order, each filling its range if that is
	// still empty: every range gets the first number that falls in it.
	for s, left := uint32(0), n; left > 0; s++ {
		slot := int(redisslot.CRC16(base+strconv.FormatUint(uint64(s), 10))) % redisslot.Slots
		i := slot * n / redisslot.Slots
		if (i+1)*redisslot.Slots/n <= slot {
			i++
		}
		if out[i].n == 0 {
			out[i] = Shard{s + 1}
			left--
		}
	}
	return out
}

package global

import (
	"strconv"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/redisslot"
)

// MaxShards is the most shards a key is split into: a count beyond it,
// in a mark or a call, is refused.
const MaxShards = 1024

// ShardKeys returns n keys to stand for key's shards, one per n-th of the
// Redis Cluster hash-slot space: shard i is key + "#" + a suffix chosen so
// that the shard's hash tag (as Redis names its keys) falls in slots
// [i×16384/n, (i+1)×16384/n). Masters own contiguous slot ranges, so the
// shards of a hot key spread over them evenly (exactly, when n is a
// multiple of the number of masters and the ranges are equal), instead
// of all landing on the one master that owns key. n is taken to be
// between 1 and MaxShards.
func ShardKeys(key string, n int) []string {
	n = min(max(n, 1), MaxShards)
	var tag strings.Builder
	writeTag(&tag, key) // as redisKey names it
	base := tag.String() + "#"
	out := make([]string, n)
	// Suffixes are tried in order, each filling its range if that is
	// still empty: every range gets the first suffix that falls in it.
	for s, left := 0, n; left > 0; s++ {
		suffix := strconv.Itoa(s)
		slot := int(redisslot.CRC16(base+suffix)) % redisslot.Slots
		i := slot * n / redisslot.Slots
		if (i+1)*redisslot.Slots/n <= slot {
			i++
		}
		if out[i] == "" {
			out[i] = key + "#" + suffix
			left--
		}
	}
	return out
}

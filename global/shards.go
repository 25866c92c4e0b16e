package global

import (
	"strconv"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/redisslot"
)

// ShardKeys returns n keys to stand for key's shards, one per n-th of the
// Redis Cluster hash-slot space: shard i is key + "#" + a suffix chosen so
// that the shard's hash tag (as Redis names its keys) falls in slots
// [i×16384/n, (i+1)×16384/n). Masters own contiguous slot ranges, so the
// shards of a hot key spread over them evenly (exactly, when n is a
// multiple of the number of masters and the ranges are equal), instead
// of all landing on the one master that owns key.
func ShardKeys(key string, n int) []string {
	n = max(n, 1)
	var tag strings.Builder
	writeTag(&tag, key) // as redisKey names it
	base := tag.String() + "#"
	out := make([]string, n)
	for i := range out {
		lo, hi := i*redisslot.Slots/n, (i+1)*redisslot.Slots/n
		for s := 0; ; s++ {
			suffix := strconv.Itoa(s)
			if slot := int(redisslot.CRC16(base+suffix)) % redisslot.Slots; slot >= lo && slot < hi {
				out[i] = key + "#" + suffix
				break
			}
		}
	}
	return out
}

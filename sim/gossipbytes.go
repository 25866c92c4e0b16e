package sim

// Memberlist compresses with LZW (litWidth 8), wrapping the result in a
// msgpack struct: every stream, whether or not that helps, and every
// packet when it helps. Entries of one key after another share their
// window, stamps and counts' leading bytes, so a stream batch shrinks to
// about two thirds; a packet of one update never shrinks.
//
// The simulator estimates the compressed size from the raw size rather
// than compressing the bytes: the gossip package sums some floats in a
// map's order, so an entry's last bits, and with them what LZW makes of
// it, differ from run to run, and a simulation must not. The estimate
// follows LZW's two regimes, fitted to compress/lzw on the simulator's
// own stream batches (hotkey and zipf, 8 and 32 nodes): a short input
// is mostly 9-bit literals (48 raw bytes, one entry: 56 compressed);
// a long one settles near 64% (64-127 entries: 65%; 256-511: 66%).
// TestGossipRealityManyKeys checks the bytes against real memberlist.
const (
	compressHead = 16 // compressMsg, the msgpack map, "Algo", "Buf" and its length
	userHead     = 15 // a stream's userMsg type and its msgpack userMsgHeader
)

// compressed is the estimated size of raw bytes as memberlist
// compresses them.
func compressed(raw int) int {
	return compressHead + min(raw*9/8+2, raw*16/25+40)
}

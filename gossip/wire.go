package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format, version 2. Every message, whether piggybacked on
// memberlist's UDP gossip, sent over a reliable stream, or exchanged in a
// push/pull, is:
//
//	magic     1 byte   0xB7
//	version   1 byte   2
//	kind      1 byte   kindUpdate, kindState or kindLeave
//	origins   uvarint  number of origin sections, at least 1
//	then, per origin:
//	  nameLen     uvarint  1..255
//	  name        nameLen bytes: the origin node's memberlist name
//	  incarnation uvarint  tells a run of the origin from its others: random; not 0
//	  count       uvarint  number of entries
//	  then, per entry:
//	    hash      8 bytes, little endian: xxh3 of the key
//	    windowMs  uvarint  the key's window in milliseconds
//	    stamp     uvarint  when the origin last changed the entry, Unix ms
//	    cur       uvarint  consumed in window epoch = stamp / windowMs
//	    prev      uvarint  consumed in window epoch-1
//	    reserved  uvarint  the origin's lease at its last sync
//	    ttlMs     uvarint  how long that lease stands, in milliseconds
//	    demand    uvarint  the origin's demand, requests per second
//	    weight    2 bytes, little endian: the origin's share, out of 65535
//
// The stamp is the entry's version and its window at once: the origin's
// wall time (anchored to its monotonic clock, so it never steps back),
// raised past the previous stamp so that it grows with every change.
// Version 1 sent an epoch and a sequence number counted from 1 instead;
// a forged sequence number far ahead held the origin's lease, demand
// and weight for the rest of its run, where a stamp can be at most a
// window ahead of the receiver's clock (merge.go), so a forged one is
// overtaken by the origin's own within about a window.
//
// Updates carry the sender's own entries; states (push/pull snapshots)
// carry everything the sender knows, relayed from any origin; a leave is
// a node's farewell, one section with no entries, sent as it closes.
// (Memberlist tells a graceful leave from a death internally, but does
// not say which in its event callback, so the leaver says so itself.)

const (
	magic      = 0xB7
	version    = 2
	kindUpdate = 1
	kindState  = 2
	kindLeave  = 3

	headerLen   = 3
	maxNameLen  = 255
	maxMessage  = 1 << 20 // what a decoder accepts
	minEntryLen = 8 + 7 + 2
	maxEntryLen = 8 + 7*binary.MaxVarintLen64 + 2

	// Sanity caps on values from the network: a count or a window past
	// these is a corrupt or hostile message, not a real fleet.
	maxCount    = 1 << 53
	maxWindowMs = 1 << 40
	maxTTLms    = 1 << 32
)

// errMalformed is wrapped by every decoding error.
var errMalformed = errors.New("gossip: malformed message")

// entry is one origin's state for one key.
type entry struct {
	hash     uint64
	windowMs uint64
	stamp    uint64 // when the origin last changed it, Unix ms; 0 for an own entry not yet used
	epoch    uint64 // stamp / windowMs: the window cur counts in
	cur      uint64
	prev     uint64
	reserved uint64
	ttlMs    uint64
	demand   uint64
	weight   uint16
}

// countAt is the origin's count for window ep, or zero if e does not
// cover it.
func (e *entry) countAt(ep uint64) uint64 {
	switch ep {
	case e.epoch:
		return e.cur
	case e.epoch - 1:
		return e.prev
	}
	return 0
}

// section is one origin's entries in a message. name and entries alias
// the decoder's buffers.
type section struct {
	name    []byte
	inc     uint64
	entries []entry
}

// message is a decoded message. Decoding into the same message again
// reuses its buffers, so a steady stream of messages does not allocate.
type message struct {
	kind     byte
	sections []section
	pool     []entry
}

// decode parses b, which must be a whole message, into m. It checks every
// length against what is left of b before using it, so no input can make
// it read out of bounds or allocate more than a small multiple of len(b).
func (m *message) decode(b []byte) error {
	m.sections, m.pool = m.sections[:0], m.pool[:0]
	if len(b) > maxMessage {
		return fmt.Errorf("%w: %d bytes, more than %d", errMalformed, len(b), maxMessage)
	}
	if len(b) < headerLen {
		return fmt.Errorf("%w: %d bytes, shorter than a header", errMalformed, len(b))
	}
	if b[0] != magic {
		return fmt.Errorf("%w: magic %#x", errMalformed, b[0])
	}
	if b[1] != version {
		return fmt.Errorf("%w: version %d, want %d", errMalformed, b[1], version)
	}
	m.kind = b[2]
	if m.kind != kindUpdate && m.kind != kindState && m.kind != kindLeave {
		return fmt.Errorf("%w: kind %d", errMalformed, m.kind)
	}
	r := reader{b: b[headerLen:]}
	n := r.uvarint()
	if n == 0 || n > uint64(len(r.b))/3 {
		return fmt.Errorf("%w: %d origins in %d bytes", errMalformed, n, len(r.b))
	}
	for range n {
		var s section
		nameLen := r.uvarint()
		if nameLen == 0 || nameLen > maxNameLen {
			return fmt.Errorf("%w: origin name of %d bytes", errMalformed, nameLen)
		}
		s.name = r.bytes(int(nameLen))
		s.inc = r.uvarint()
		count := r.uvarint()
		if r.err != nil {
			return r.err
		}
		if s.inc == 0 {
			return fmt.Errorf("%w: origin %q has incarnation 0", errMalformed, s.name)
		}
		if count > uint64(len(r.b))/minEntryLen {
			return fmt.Errorf("%w: %d entries in %d bytes", errMalformed, count, len(r.b))
		}
		start := len(m.pool)
		for range count {
			var e entry
			e.hash = r.uint64()
			e.windowMs = r.uvarint()
			e.stamp = r.uvarint()
			e.cur = r.uvarint()
			e.prev = r.uvarint()
			e.reserved = r.uvarint()
			e.ttlMs = r.uvarint()
			e.demand = r.uvarint()
			e.weight = r.uint16()
			if r.err != nil {
				return r.err
			}
			if err := e.check(); err != nil {
				return err
			}
			e.epoch = e.stamp / e.windowMs
			m.pool = append(m.pool, e)
		}
		s.entries = m.pool[start:len(m.pool):len(m.pool)]
		m.sections = append(m.sections, s)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes after the last entry", errMalformed, len(r.b))
	}
	return nil
}

// check rejects values no real node sends.
func (e *entry) check() error {
	switch {
	case e.windowMs == 0 || e.windowMs > maxWindowMs:
		return fmt.Errorf("%w: window of %d ms", errMalformed, e.windowMs)
	case e.stamp < e.windowMs || e.stamp > maxCount:
		// A stamp is a Unix time in milliseconds: it falls in no
		// window before the first, and 2^53 ms is 285,000 years away.
		return fmt.Errorf("%w: stamp %d for a window of %d ms", errMalformed, e.stamp, e.windowMs)
	case e.cur > maxCount || e.prev > maxCount || e.reserved > maxCount || e.demand > maxCount:
		return fmt.Errorf("%w: count out of range", errMalformed)
	case e.ttlMs > maxTTLms:
		return fmt.Errorf("%w: lease TTL of %d ms", errMalformed, e.ttlMs)
	}
	return nil
}

// reader consumes b, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated %s", errMalformed, what)
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if len(r.b) < n {
		r.fail("name")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail("hash")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) uint16() uint16 {
	if len(r.b) < 2 {
		r.fail("weight")
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

// encoder builds one message. Counts not known until the end (origins,
// a section's entries) are written as fixed three-byte varints and
// patched, so entries append straight into the buffer. Three bytes hold
// up to 2^21-1, more entries than fit in a message of maxMessage bytes.
type encoder struct {
	b       []byte
	nsec    int
	countAt int // offset of the open section's count placeholder
	count   int
}

func (w *encoder) placeholder() int {
	at := len(w.b)
	w.b = append(w.b, 0x80, 0x80, 0)
	return at
}

func (w *encoder) patch(at, c int) {
	w.b[at] = byte(c) | 0x80
	w.b[at+1] = byte(c>>7) | 0x80
	w.b[at+2] = byte(c >> 14)
}

// header starts a message of kind.
func (w *encoder) header(kind byte) {
	w.b = append(w.b[:0], magic, version, kind)
	w.placeholder()
	w.nsec, w.countAt = 0, 0
}

// section starts an origin's section. Its entry count is written as a
// fixed three-byte varint, patched by finish or the next section, so that
// entries can be appended without knowing their number.
func (w *encoder) section(name string, inc uint64) {
	w.closeSection()
	w.b = binary.AppendUvarint(w.b, uint64(len(name)))
	w.b = append(w.b, name...)
	w.b = binary.AppendUvarint(w.b, inc)
	w.countAt = w.placeholder()
	w.count = 0
	w.nsec++
}

func (w *encoder) closeSection() {
	if w.countAt == 0 {
		return
	}
	w.patch(w.countAt, w.count)
	w.countAt = 0
}

func (w *encoder) entry(e *entry) {
	w.b = binary.LittleEndian.AppendUint64(w.b, e.hash)
	w.b = binary.AppendUvarint(w.b, e.windowMs)
	w.b = binary.AppendUvarint(w.b, e.stamp)
	w.b = binary.AppendUvarint(w.b, e.cur)
	w.b = binary.AppendUvarint(w.b, e.prev)
	w.b = binary.AppendUvarint(w.b, e.reserved)
	w.b = binary.AppendUvarint(w.b, e.ttlMs)
	w.b = binary.AppendUvarint(w.b, e.demand)
	w.b = binary.LittleEndian.AppendUint16(w.b, e.weight)
	w.count++
}

// finish closes the message and returns it; the bytes are the encoder's
// until the next header.
func (w *encoder) finish() []byte {
	w.closeSection()
	w.patch(headerLen, w.nsec)
	return w.b
}

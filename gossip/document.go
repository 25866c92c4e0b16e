package gossip

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// Documents are small files a fleet shares beside its counts, such as
// its rules (package rules follows one through Document). A save goes
// by stream to every live member at once, so the fleet holds it within
// a round trip; a member that missed it (cut off, joining, its stream
// failed) gets it in its next push/pull, which carries every document
// beside the snapshot of counts, and sends it on to every member, in
// case others missed it too.
//
// Two more message kinds, in the wire format of wire.go:
//
//	kindDocument: magic, version, 4, then
//	  nameLen  uvarint  1..255
//	  name     nameLen bytes
//	  docVer   uvarint  the document's version: a counter from 1 to
//	                   maxCounter above a 24-bit tag
//	  bodyLen  uvarint  at most maxDocument
//	  body     bodyLen bytes
//	kindBundle: magic, version, 5, then
//	  parts    uvarint  1..1+maxDocuments
//	  then, per part: uvarint length, and that many bytes: a message of
//	  another kind (a push/pull's snapshot, if not empty, then its
//	  documents)
const (
	kindDocument = 4
	kindBundle   = 5

	// maxDocument bounds a document, as global's does: a rules file's
	// bound (package rules), since a node parses what it loads.
	maxDocument = 256 << 10
	// maxDocuments bounds how many documents a node holds: names from
	// the network beyond it are refused, so a peer cannot fill memory.
	maxDocuments = 8
	maxBundle    = maxMessage + maxDocuments*(maxDocument+maxNameLen+32)

	// A document's version is a counter above a tag drawn at random by
	// each run of the saving node: two nodes (or two runs of one, a
	// restarted node that saves before it hears the fleet) that save
	// the version after the same one make two versions, not one with
	// two bodies, but for one chance in 2^24, and the fleet keeps the
	// higher everywhere.
	tagBits = 24
	// maxCounter bounds a version's counter: a version past it from the
	// network is refused, so that no peer can make the next save wrap
	// around below it.
	maxCounter = 1<<(64-tagBits) - 2
)

// Document is a document the fleet shares over gossip, named by its
// name: any node saves it, every node loads it, and its version, which
// only goes up, tells a node whether it has the latest. It is a
// rules.Store. A Document lives as long as a member of the fleet holds
// it; a fleet whose every node stops loses it (global.Document keeps one
// in Redis). A Document is safe for concurrent use.
//
// Unlike Redis, gossip cannot refuse one of two saves made at once to
// the same version: both succeed where they were made, and every node
// then keeps the one with the higher version (which a tag drawn at
// random by each run of a node decides). Save's error wrapping fleet.ErrVersion
// catches a change made to a version this node knows is out of date.
type Document struct {
	g    *Gossip
	name string
}

// storedDoc is a document's latest version held by this node.
type storedDoc struct {
	v    uint64
	body []byte
}

// Document returns the document named name, 1 to 255 bytes.
func (g *Gossip) Document(name string) *Document {
	return &Document{g: g, name: name}
}

// Load returns the document this node holds and its version, or nil and
// 0 if it holds none. If the version held is have, Load returns nil and
// have. It does no network I/O.
func (d *Document) Load(_ context.Context, have uint64) ([]byte, uint64, error) {
	d.g.docMu.Lock()
	defer d.g.docMu.Unlock()
	s := d.g.docs[d.name]
	if s.v == have {
		return nil, have, nil
	}
	return bytes.Clone(s.body), s.v, nil
}

// Save makes doc the version after prev, the version it was made from
// (0 if there was none), here, and sends it to every live member; it
// returns the new version. If this node holds another version than prev,
// it saves nothing and returns the version held with an error wrapping
// fleet.ErrVersion. A document over 256 KiB, a name that is empty or over
// 255 bytes, a ninth name, or a version after the last (2^40-2 saves) is
// refused with an error wrapping fleet.ErrInvalid. If ctx ends before the document is handed to the
// sender, the members get it from their next push/pull instead.
func (d *Document) Save(ctx context.Context, doc []byte, prev uint64) (uint64, error) {
	g := d.g
	switch {
	case len(doc) > maxDocument:
		return 0, fmt.Errorf("%w: a document of %d bytes; at most %d", fleet.ErrInvalid, len(doc), maxDocument)
	case len(d.name) == 0 || len(d.name) > maxNameLen:
		return 0, fmt.Errorf("%w: a document name of %d bytes; 1 to %d", fleet.ErrInvalid, len(d.name), maxNameLen)
	case g.closed.Load():
		return 0, errClosed
	}
	g.docMu.Lock()
	s, ok := g.docs[d.name]
	switch {
	case prev>>tagBits >= maxCounter:
		g.docMu.Unlock()
		return 0, fmt.Errorf("%w: version %d is the last a document can have", fleet.ErrInvalid, prev)
	case s.v != prev:
		g.docMu.Unlock()
		return s.v, fmt.Errorf("%w: version %d is held, the change was made to %d", fleet.ErrVersion, s.v, prev)
	case !ok && len(g.docs) >= maxDocuments:
		g.docMu.Unlock()
		return 0, fmt.Errorf("%w: %d documents already; at most %d", fleet.ErrInvalid, len(g.docs), maxDocuments)
	}
	v := (prev>>tagBits+1)<<tagBits | g.docTag
	g.docs[d.name] = storedDoc{v: v, body: bytes.Clone(doc)}
	g.docMu.Unlock()
	select {
	case g.outbox <- encodeDocument(d.name, v, doc):
	case <-ctx.Done():
		g.stats.outboxDropped.Add(1)
	case <-g.stopped:
	}
	return v, nil
}

// docTag is the tag of the versions one run of a node saves, from its
// random incarnation.
func docTag(inc uint64) uint64 { return inc & (1<<tagBits - 1) }

// encodeDocument is a kindDocument message.
func encodeDocument(name string, v uint64, body []byte) []byte {
	b := make([]byte, 0, headerLen+3*binary.MaxVarintLen64+len(name)+len(body))
	b = append(b, magic, version, kindDocument)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, v)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// decodeDocument parses a kindDocument message; name and body alias b.
func decodeDocument(b []byte) (name []byte, v uint64, body []byte, err error) {
	if len(b) < headerLen || b[0] != magic || b[1] != version || b[2] != kindDocument {
		return nil, 0, nil, fmt.Errorf("%w: not a document", errMalformed)
	}
	r := reader{b: b[headerLen:]}
	n := r.uvarint()
	if n == 0 || n > maxNameLen {
		return nil, 0, nil, fmt.Errorf("%w: document name of %d bytes", errMalformed, n)
	}
	name = r.bytes(int(n))
	v = r.uvarint()
	n = r.uvarint()
	if r.err != nil {
		return nil, 0, nil, r.err
	}
	switch {
	case v>>tagBits == 0 || v>>tagBits > maxCounter:
		return nil, 0, nil, fmt.Errorf("%w: document version %d", errMalformed, v)
	case n > maxDocument || n != uint64(len(r.b)):
		return nil, 0, nil, fmt.Errorf("%w: document of %d bytes in %d", errMalformed, n, len(r.b))
	}
	return name, v, r.b, nil
}

// bundle joins parts into one kindBundle message.
func bundle(parts ...[]byte) []byte {
	size := headerLen + binary.MaxVarintLen64
	for _, p := range parts {
		size += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, size)
	b = append(b, magic, version, kindBundle)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// unbundle calls each with every part of a kindBundle message, in order,
// after checking them all. A part is never itself a bundle.
func unbundle(b []byte, each func(part []byte)) error {
	if len(b) > maxBundle {
		return fmt.Errorf("%w: a bundle of %d bytes, more than %d", errMalformed, len(b), maxBundle)
	}
	if len(b) < headerLen || b[0] != magic || b[1] != version || b[2] != kindBundle {
		return fmt.Errorf("%w: not a bundle", errMalformed)
	}
	r := reader{b: b[headerLen:]}
	n := r.uvarint()
	if n == 0 || n > 1+maxDocuments {
		return fmt.Errorf("%w: a bundle of %d parts", errMalformed, n)
	}
	parts := make([][]byte, 0, n)
	for range n {
		size := r.uvarint()
		if r.err == nil && size > uint64(len(r.b)) {
			return fmt.Errorf("%w: a part of %d bytes in %d", errMalformed, size, len(r.b))
		}
		p := r.bytes(int(size))
		if r.err != nil {
			return r.err
		}
		switch {
		case len(p) < headerLen:
			return fmt.Errorf("%w: a part of %d bytes", errMalformed, len(p))
		case p[2] == kindBundle:
			return fmt.Errorf("%w: a bundle in a bundle", errMalformed)
		}
		parts = append(parts, p)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes after a bundle's last part", errMalformed, len(r.b))
	}
	for _, p := range parts {
		each(p)
	}
	return nil
}

// receiveDocument keeps the document in b if it is newer than the one
// held, and reports whether it did. Malformed messages, and new names
// beyond maxDocuments, are counted and dropped.
func (g *Gossip) receiveDocument(b []byte) bool {
	g.stats.received.Add(1)
	name, v, body, err := decodeDocument(b)
	if err != nil {
		g.stats.malformed.Add(1)
		return false
	}
	g.docMu.Lock()
	defer g.docMu.Unlock()
	s, ok := g.docs[string(name)]
	switch {
	case v <= s.v:
		return false
	case !ok && len(g.docs) >= maxDocuments:
		g.stats.docsRefused.Add(1)
		return false
	}
	g.docs[string(name)] = storedDoc{v: v, body: bytes.Clone(body)}
	return true
}

// documents returns every document held, as kindDocument messages.
func (g *Gossip) documents() [][]byte {
	g.docMu.Lock()
	defer g.docMu.Unlock()
	out := make([][]byte, 0, len(g.docs))
	for name, s := range g.docs {
		out = append(out, encodeDocument(name, s.v, s.body))
	}
	return out
}

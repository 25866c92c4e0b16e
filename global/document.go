package global

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// maxDocument bounds a document, written or read: a rules file's bound
// (package rules), since a node parses what it loads, and a 1 MiB YAML
// document took 126 MiB to parse.
const maxDocument = 256 << 10

// Document is a document a fleet shares through Redis, such as its rules
// file: any node saves it, every node loads it, and its version, which
// only goes up, tells a node whether it has the latest. It lives in one
// Redis hash (prefix + "doc:{name}") with no expiry, so it outlives every
// node. A Document is safe for concurrent use.
type Document struct {
	r   *Redis
	key string
}

// Document returns the document named name.
func (r *Redis) Document(name string) *Document {
	return &Document{r: r, key: r.cfg.Prefix + "doc:{" + name + "}"}
}

var (
	// The first version is Redis's time in µs, each after it one more:
	// a document saved again after Redis lost it (a FLUSH, a failover to
	// a replica that lagged) starts above every version saved before, so
	// that nodes still holding one take it.
	saveDocument = redis.NewScript(storedNum + `
local v = whole(redis.call('HGET', KEYS[1], 'v'), 'v', 0) or 0
if v ~= tonumber(ARGV[1]) then return {0, v} end
local n = v + 1
if v == 0 then
  local t = redis.call('TIME')
  n = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
redis.call('HSET', KEYS[1], 'v', n, 'doc', ARGV[2])
return {1, n}
`)
	loadDocument = redis.NewScript(storedNum + `
local v = whole(redis.call('HGET', KEYS[1], 'v'), 'v', 0) or 0
if v == tonumber(ARGV[1]) then return {v} end
if redis.call('HSTRLEN', KEYS[1], 'doc') > tonumber(ARGV[2]) then return redis.error_reply('CORRUPT the document is larger than ' .. ARGV[2] .. ' bytes') end
return {v, redis.call('HGET', KEYS[1], 'doc') or ''}
`)
)

// Save stores doc as the version after prev, the version it was made
// from (0 if there was none), and returns the new version: one more
// than prev, or, for the first, Redis's time in microseconds, so that a
// document saved anew after Redis lost it is above every version before.
// If another version was saved since prev, it stores nothing and returns
// the stored version with an error wrapping fleet.ErrVersion.
func (d *Document) Save(ctx context.Context, doc []byte, prev uint64) (uint64, error) {
	if len(doc) > maxDocument {
		return 0, fmt.Errorf("%w: a document of %d bytes; at most %d", fleet.ErrInvalid, len(doc), maxDocument)
	}
	ctx, cancel := context.WithTimeout(ctx, d.r.cfg.Timeout)
	defer cancel()
	v, err := saveDocument.Run(ctx, d.r.cfg.Client, []string{d.key}, prev, doc).Int64Slice()
	if err != nil {
		return 0, d.r.failed(d.r.addr, d.key, err).err
	}
	if len(v) != 2 || v[1] < 0 {
		return 0, d.r.corrupt(d.key, "the store answered %v to a save", v)
	}
	if v[0] != 1 {
		return uint64(v[1]), fmt.Errorf("%w: version %d is stored, the change was made to %d", fleet.ErrVersion, v[1], prev)
	}
	return uint64(v[1]), nil
}

// Load returns the stored document and its version, or nil and 0 if
// none was saved. If the stored version is have, the document is not
// sent again: Load returns nil and have, so that a node can poll for
// changes at the cost of one small reply.
func (d *Document) Load(ctx context.Context, have uint64) ([]byte, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.r.cfg.Timeout)
	defer cancel()
	vals, err := loadDocument.Run(ctx, d.r.cfg.Client, []string{d.key}, have, maxDocument).Slice()
	if err != nil {
		return nil, 0, d.r.failed(d.r.addr, d.key, err).err
	}
	if len(vals) == 0 {
		return nil, 0, d.r.corrupt(d.key, "the store answered nothing to a load")
	}
	v, ok := vals[0].(int64)
	if !ok || v < 0 {
		return nil, 0, d.r.corrupt(d.key, "the store answered version %v", vals[0])
	}
	if len(vals) == 1 {
		return nil, uint64(v), nil
	}
	doc, ok := vals[1].(string)
	if !ok {
		return nil, 0, d.r.corrupt(d.key, "the store answered a document of type %T", vals[1])
	}
	return []byte(doc), uint64(v), nil
}

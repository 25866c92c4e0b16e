package faultnet

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Proxy forwards TCP connections to a target, such as a Redis server,
// and can black-hole them: while it does, bytes in either direction are
// dropped and no connection is closed, as when a switch dies or a firewall
// starts dropping packets. Clients see neither an error nor an answer;
// only their timeouts save them. It can also delay every byte, as a
// distant server would. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	hole   atomic.Bool
	delay  atomic.Int64 // one way, in nanoseconds
	cut    atomic.Int64 // replies still to be lost by closing their connection (see LoseReplies)
	done   chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards what it accepts
// to target. Close stops it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the host:port clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole starts dropping every byte, on open connections and new ones.
func (p *Proxy) Blackhole() { p.hole.Store(true) }

// Restore forwards again. Connections opened before are still open;
// what was dropped meanwhile is lost, as on a real network.
func (p *Proxy) Restore() { p.hole.Store(false) }

// LoseReplies makes the next n replies from the target be lost: the
// proxy closes the connection as the first bytes of each arrive, after
// the target has done what it was asked, as when a connection breaks
// between a request and its reply. A client that retries sends it again.
func (p *Proxy) LoseReplies(n int) { p.cut.Store(int64(n)) }

// SetDelay delays every byte by d in each direction, on open connections
// and new ones, so that a round trip takes 2d longer: a server across a
// region. Bytes keep their order, and a delay does not slow the rate at
// which they flow. Zero forwards at once again.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Close stops accepting, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() error {
	close(p.done)
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// track adds c to the open connections, or reports false if the proxy is
// closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve(client net.Conn) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return // the target is down: the client sees its connection closed
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client, false) })
	p.pipe(client, server, true)
	wg.Wait()
}

// chunk is what pipe read at once, and when it is due at the other end.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, dropping what it reads while black-holed, and
// closes both when either side is done, or, for replies (from the
// target), when a reply is to be lost. What it reads is written by a
// second goroutine once the delay has passed, so that reading goes on
// meanwhile: the delay adds to each byte's trip, not to the next read.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	q := make(chan chunk, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		failed := false
		for c := range q {
			if failed {
				continue // drained, so the reader never blocks
			}
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				failed = true
				src.Close() // ends the reader's Read
			}
		}
	})
	defer func() {
		close(q)
		wg.Wait()
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && replies && p.cut.Load() > 0 && p.cut.Add(-1) >= 0 {
			return // the reply is lost with its connection
		}
		if n > 0 && !p.hole.Load() {
			q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			return // EOF, or closed by the other pipe, the writer or Close
		}
	}
}

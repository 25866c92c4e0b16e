package gossip

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWarnsPastStatedFleet: a node logs one warning as its fleet grows
// past what gossip serves within docs/gossip.md's bounds (16 members at
// the default GossipNodes), and again only after it shrank back and grew
// past it anew.
func TestWarnsPastStatedFleet(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var out strings.Builder
	g, err := New(Config{Name: "n", BindAddr: "127.0.0.1", Logger: log.New(lockedBuilder{&mu, &out}, "", 0)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	ev := (*events)(g)
	node := func(i int) *memberlist.Node {
		return &memberlist.Node{Name: fmt.Sprint("peer-", i), Addr: net.IPv4(127, 0, 0, 1), Port: 1}
	}
	warnings := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(out.String(), "[WARN] gossip:")
	}
	for i := 1; i < 16; i++ {
		ev.NotifyJoin(node(i))
	}
	assert.Zero(t, warnings(), "16 members")
	ev.NotifyJoin(node(16))
	ev.NotifyJoin(node(17))
	assert.Equal(t, 1, warnings(), "17 and 18 members: once")
	ev.NotifyLeave(node(16))
	ev.NotifyLeave(node(17))
	ev.NotifyJoin(node(16))
	assert.Equal(t, 2, warnings(), "past it again")
	assert.Equal(t, 32, warnFleet(6))
}

// lockedBuilder is a strings.Builder written under mu.
type lockedBuilder struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedBuilder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

package gossipsim

import "time"

// Package gossip's defaults that the simulator's network models. Package
// gossip takes its own from these, so the two cannot drift apart; see
// gossip.Config and gossip.New for what each does.
const (
	GossipInterval          = 50 * time.Millisecond
	GossipNodes             = 3
	RetransmitMult          = 12
	RejoinInterval          = 2 * time.Second
	ProbeInterval           = 500 * time.Millisecond
	ProbeTimeout            = 300 * time.Millisecond
	SuspicionMult           = 3
	SuspicionMaxTimeoutMult = 2
)

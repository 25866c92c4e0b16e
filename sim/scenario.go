package sim

import (
	"cmp"
	"math/rand/v2"
	"strconv"
)

// scenario sets up the fleet, the keys and the load of e.cfg.Scenario,
// and schedules its changes.
func (e *engine) scenario() error {
	c := e.cfg
	d := int64(c.Duration)
	keys := 1
	weights := make([]float64, c.Nodes)
	for i := range weights {
		weights[i] = 1
	}
	switch c.Scenario {
	case "skewed":
		for i := range weights {
			weights[i] = 0.2 / float64(max(1, c.Nodes-1))
		}
		weights[0] = 0.8
		if c.Nodes == 1 {
			weights[0] = 1
		}
	case "bursts":
		const on, period = int64(1e9), int64(3e9)
		e.burst = func(at int64) (float64, int64) {
			start := at / period * period
			if at-start < on {
				return 3, start + on
			}
			return 0, start + period
		}
	case "zipf":
		keys = cmp.Or(c.Keys, 1000)
		z := rand.NewZipf(e.rng, 1.1, 1, uint64(keys-1))
		e.pick = func() int { return int(z.Uint64()) }
	case "hotkey":
		keys = cmp.Or(c.Keys, 100)
		e.pick = func() int {
			if e.rng.IntN(2) == 0 {
				return 0
			}
			return 1 + e.rng.IntN(keys-1)
		}
	}
	e.keys = make([]string, keys)
	for i := range e.keys {
		e.keys[i] = "k" + strconv.Itoa(i)
	}
	for i := range c.Nodes {
		if err := e.join(i); err != nil {
			return err
		}
		e.nodes[i].weight = weights[i]
	}
	e.reschedule()

	switch c.Scenario {
	case "churn":
		last := c.Nodes - 1
		e.change(d/3, func() { e.leave(e.nodes[last]) })
		e.change(2*d/3, func() {
			_ = e.join(c.Nodes) // a new node, under a new name
			e.nodes[c.Nodes].weight = 1
			e.reschedule()
		})
	case "outage":
		e.cut(d/3, d/3+d/6, allNodes(c.Nodes), true)
	case "partition":
		e.cut(d/3, 2*d/3, allNodes(c.Nodes)[:max(1, c.Nodes/2)], false)
	}
	return nil
}

// change schedules fn at t and notes t as a change to converge after.
func (e *engine) change(t int64, fn func()) {
	e.changes = append(e.changes, t)
	e.at(t, fn)
}

// cut moves nodes out of the fleet's network from from to to: they
// cannot reach the store; over gossip, they reach each other (alone, if
// each is cut off by itself) but nobody else.
func (e *engine) cut(from, to int64, nodes []int, alone bool) {
	set := func(cut bool) func() {
		return func() {
			for _, i := range nodes {
				e.nodes[i].group = 0
				if cut {
					e.nodes[i].group = 1
					if alone {
						e.nodes[i].group = 1 + i
					}
				}
			}
			e.regroup()
		}
	}
	e.change(from, set(true))
	e.change(to, set(false))
}

func allNodes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

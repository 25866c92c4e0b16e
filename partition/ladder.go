package partition

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/enumtext"
)

// A Step is one rung of the ladder: until Until has passed since the
// fleet was last reached, a node may spend Factor of its last known
// share. The last step's Until is zero: it lasts for ever.
type Step struct {
	Until  time.Duration
	Factor float64
}

// DefaultSteps is the ladder a node climbs down when it is cut off: its
// whole share for 5 s (most blips), half of it until a minute, then a
// quarter for as long as the partition lasts.
var DefaultSteps = []Step{{5 * time.Second, 1}, {time.Minute, 0.5}, {0, 0.25}}

// LadderConfig configures a Ladder.
type LadderConfig struct {
	// Steps, in order, with strictly increasing Until and the last one's
	// Until zero. Factors are in [0, 1]. Default DefaultSteps.
	Steps []Step
	// Floor is the least factor in force, in [0, 1]: no step goes below
	// it. Default 0.
	Floor float64
}

// A Ladder tightens a cut-off node's limit step by step: a fraction of
// its last known share of the fleet's limit, as a function of how long
// the fleet has been out of reach. A node that kept its whole share for
// a long partition would, with every other node doing the same on its
// side, admit the whole limit on each side; stepping down bounds what a
// long split costs.
//
// A Ladder is immutable and safe for concurrent use.
type Ladder struct {
	steps     []Step
	floor     float64
	emergency time.Duration // how long after the cut the first factor below 1 takes force
}

// NewLadder returns a Ladder, or an error naming the first field of cfg
// that is out of range.
func NewLadder(cfg LadderConfig) (*Ladder, error) {
	steps := cfg.Steps
	if len(steps) == 0 {
		steps = DefaultSteps
	}
	if cfg.Floor < 0 || cfg.Floor > 1 || cfg.Floor != cfg.Floor {
		return nil, invalidf("partition: LadderConfig.Floor is %v; it must be in [0, 1]", cfg.Floor)
	}
	for i, s := range steps {
		last := i == len(steps)-1
		switch {
		case !(s.Factor >= 0 && s.Factor <= 1):
			return nil, invalidf("partition: LadderConfig.Steps[%d].Factor is %v; it must be in [0, 1]", i, s.Factor)
		case last && s.Until != 0:
			return nil, invalidf("partition: LadderConfig.Steps[%d].Until is %v; the last step's must be 0 (for ever)", i, s.Until)
		case !last && s.Until <= 0:
			return nil, invalidf("partition: LadderConfig.Steps[%d].Until is %v; only the last step's may be 0", i, s.Until)
		case !last && i > 0 && s.Until <= steps[i-1].Until:
			return nil, invalidf("partition: LadderConfig.Steps[%d].Until is %v; it must be after step %d's %v", i, s.Until, i-1, steps[i-1].Until)
		}
	}
	l := &Ladder{steps: append([]Step(nil), steps...), floor: cfg.Floor}
	// Emergency begins where the first factor below 1 takes force.
	for k, s := range l.steps {
		if max(s.Factor, l.floor) < 1 {
			if k > 0 {
				l.emergency = l.steps[k-1].Until
			}
			break
		}
	}
	return l, nil
}

// Factor is the part of its last known share a node may spend when the
// fleet was last reached cut ago.
func (l *Ladder) Factor(cut time.Duration) float64 {
	for _, s := range l.steps {
		if s.Until == 0 || cut < s.Until {
			return max(s.Factor, l.floor)
		}
	}
	return l.floor // not reached: the last step lasts for ever
}

// Level is how healthy a node's link to its fleet is.
type Level int

const (
	// Healthy: the last sync reached the fleet.
	Healthy Level = iota
	// Degraded: the fleet is out of reach, and the node still limits to
	// its whole last known share (the ladder's factor is 1); or it is in
	// reach, but the node's sync loop runs so late that it refuses what
	// its share would admit (Health.Late says how late).
	Degraded
	// Emergency: the fleet has been out of reach long enough that the
	// ladder has cut the node's share.
	Emergency
)

// String returns the level's name.
func (l Level) String() string {
	switch l {
	case Healthy:
		return "healthy"
	case Degraded:
		return "degraded"
	case Emergency:
		return "emergency"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

var levelNames = []enumtext.Name[Level]{{Text: "healthy", Value: Healthy}, {Text: "degraded", Value: Degraded}, {Text: "emergency", Value: Emergency}}

// MarshalText returns the level's name, for logs and JSON; a value that
// is not a Level is an error.
func (l Level) MarshalText() ([]byte, error) {
	return enumtext.Marshal("partition: Level", l.String(), l >= Healthy && l <= Emergency)
}

// UnmarshalText sets l from its name: "healthy", "degraded" or
// "emergency", in any case.
func (l *Level) UnmarshalText(text []byte) error {
	v, err := enumtext.Parse("partition: Level", text, levelNames)
	if err == nil {
		*l = v
	}
	return err
}

// Health is a node's link to its fleet at a moment.
type Health struct {
	Level Level
	// Since is how long the node has been at Level.
	Since time.Duration
	// Factor is the ladder's factor in force: 1 while Healthy.
	Factor float64

	// FailingKeys is how many keys the fleet, though reachable, answered
	// with an error at their last sync or decision (a value in the store
	// that no node could have written, a key the store refuses, or the
	// part of the store that holds the key down while the rest answers:
	// a partial outage, such as a Redis Cluster master down): they
	// follow their policy's FailMode until it answers them again. A
	// Ladder leaves it zero; hybrid.Limiter fills it in.
	FailingKeys int
	// KeyError is the last error the fleet answered a key with, nil if
	// none has been since the Limiter started. For a partial outage it
	// wraps the error of an unreachable fleet (fleet.ErrUnreachable).
	KeyError error
	// Late is how late the node's sync loop runs: how late its last
	// regular sync started, or how overdue the next is, whichever is
	// more; 0 while it keeps time. A loop starved of CPU runs late, and
	// its leases may run dry before the next sync brings more. A Ladder
	// leaves it zero; hybrid.Limiter fills it in.
	Late time.Duration
}

// Health is the health of a node whose fleet has been out of reach for
// cut, or, if cut is zero, that has been in touch with it for healthy.
func (l *Ladder) Health(cut, healthy time.Duration) Health {
	if cut <= 0 {
		return Health{Level: Healthy, Since: max(0, healthy), Factor: 1}
	}
	f := l.Factor(cut)
	if f >= 1 {
		return Health{Level: Degraded, Since: cut, Factor: f}
	}
	return Health{Level: Emergency, Since: max(0, cut-l.emergency), Factor: f}
}

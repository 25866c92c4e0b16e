package partition_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/partition"
)

func TestLadderDefaults(t *testing.T) {
	t.Parallel()
	l, err := partition.NewLadder(partition.LadderConfig{})
	require.NoError(t, err)
	tests := []struct {
		cut    time.Duration
		factor float64
	}{
		{0, 1}, {4 * time.Second, 1}, {5 * time.Second, 0.5}, {59 * time.Second, 0.5},
		{time.Minute, 0.25}, {24 * time.Hour, 0.25},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.factor, l.Factor(tt.cut), "after %v", tt.cut)
	}
}

func TestLadderFloor(t *testing.T) {
	t.Parallel()
	l, err := partition.NewLadder(partition.LadderConfig{Steps: []partition.Step{{time.Second, 1}, {0, 0}}, Floor: 0.1})
	require.NoError(t, err)
	assert.Equal(t, 0.1, l.Factor(time.Hour))
}

func TestLadderHealth(t *testing.T) {
	t.Parallel()
	l, err := partition.NewLadder(partition.LadderConfig{})
	require.NoError(t, err)
	assert.Equal(t, partition.Health{Level: partition.Healthy, Since: 3 * time.Second, Factor: 1},
		l.Health(0, 3*time.Second))
	assert.Equal(t, partition.Health{Level: partition.Degraded, Since: 2900 * time.Millisecond, Factor: 1},
		l.Health(2900*time.Millisecond, 0))
	assert.Equal(t, partition.Health{Level: partition.Emergency, Since: 2 * time.Second, Factor: 0.5},
		l.Health(7*time.Second, 0))
	assert.Equal(t, partition.Health{Level: partition.Emergency, Since: 85 * time.Second, Factor: 0.25},
		l.Health(90*time.Second, 0))
}

func TestNewLadderRejects(t *testing.T) {
	t.Parallel()
	tests := map[string]partition.LadderConfig{
		"Floor":           {Floor: 1.5},
		"Floor NaN":       {Floor: math.NaN()},
		"Steps[0].Factor": {Steps: []partition.Step{{0, 2}}},
		"Steps[1].Until":  {Steps: []partition.Step{{time.Second, 1}, {time.Second, 0.5}}},
		"Steps[0].Until":  {Steps: []partition.Step{{0, 1}, {0, 0.5}}},
	}
	for name, cfg := range tests {
		_, err := partition.NewLadder(cfg)
		require.ErrorIs(t, err, partition.ErrInvalidConfig, name)
		field := name
		if field == "Floor NaN" {
			field = "Floor"
		}
		assert.Contains(t, err.Error(), "LadderConfig."+field, name)
	}
}

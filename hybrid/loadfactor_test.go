package hybrid_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestSetLoadFactorRefuses: a factor out of (0, 1] or an unknown policy
// is an error, and nothing changes.
func TestSetLoadFactorRefuses(t *testing.T) {
	t.Parallel()
	p := hybrid.Policy{Name: "api", Mode: hybrid.Local, Limit: 10, Window: time.Hour}
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{p}})
	require.NoError(t, err)
	defer l.Close()
	for _, tt := range []struct {
		f     float64
		names []string
		want  string
	}{
		{0, nil, "the factor is 0"},
		{-0.5, nil, "the factor is -0.5"},
		{1.5, nil, "the factor is 1.5"},
		{math.NaN(), nil, "the factor is NaN"},
		{math.Inf(1), nil, "the factor is +Inf"},
		{0.5, []string{"api", "web"}, `no policy is named "web"`},
	} {
		err := l.SetLoadFactor(tt.f, tt.names...)
		require.ErrorIs(t, err, hybrid.ErrInvalidConfig)
		assert.ErrorContains(t, err, tt.want)
	}
	assert.Equal(t, 1.0, l.Stats().Policies[0].LoadFactor)
	admitted, _ := offerN(t, l, "k", 20)
	assert.Equal(t, 10, admitted)
}

// TestSetLoadFactorLocal: a factor scales a Local policy's limit, stays
// with the policy's name across SetPolicies, is reported by Stats, and
// leaves Config's policies as given.
func TestSetLoadFactorLocal(t *testing.T) {
	t.Parallel()
	a := hybrid.Policy{Name: "a", Prefix: "a:", Mode: hybrid.Local, Limit: 10, Window: time.Hour}
	b := hybrid.Policy{Name: "b", Prefix: "b:", Mode: hybrid.Local, Limit: 10, Window: time.Hour}
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{a, b}})
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.SetLoadFactor(0.3, "a"))
	n, _ := offerN(t, l, "a:1", 20)
	assert.Equal(t, 3, n, "a at 0.3")
	n, _ = offerN(t, l, "b:1", 20)
	assert.Equal(t, 10, n, "b untouched")
	b.Limit = 20
	require.NoError(t, l.SetPolicies([]hybrid.Policy{a, b}))
	n, _ = offerN(t, l, "a:2", 20)
	assert.Equal(t, 3, n, "the factor stays with a")
	assert.Equal(t, []hybrid.Policy{a, b}, l.Config().Policies, "as given")
	st := l.Stats().Policies
	require.Len(t, st, 2)
	for _, p := range st {
		assert.Equal(t, map[string]float64{"a": 0.3, "b": 1}[p.Name], p.LoadFactor, p.Name)
	}
	require.NoError(t, l.SetLoadFactor(1))
	n, _ = offerN(t, l, "a:3", 20)
	assert.Equal(t, 10, n, "back to the limit")
}

// TestLoadFactorOnARunningFleet: four nodes on a real Redis offered twice
// a limit of 1,000/s; every node sets a load factor of 0.5 at 1.5 s and
// 1 again at 4 s, against an ideal single limiter changed alike (see
// checkChanges).
//
// Not parallel with the package's other tests: beside them its busiest
// second after the change once ran 530 against 525 (the fleet's 5%).
func TestLoadFactorOnARunningFleet(t *testing.T) {
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Limit: 1000, Window: time.Second}
	nodes := redisFleet(t, s, 4, fleet.DemandWeighted, p)
	half := change{at: 1500 * time.Millisecond, limit: 500, apply: func(l *hybrid.Limiter) error { return l.SetLoadFactor(0.5) }}
	whole := change{at: 4 * time.Second, limit: 1000, apply: func(l *hybrid.Limiter) error { return l.SetLoadFactor(1) }}
	run, ideal, at := changingRun(t, nodes, p, 500, 6*time.Second, []change{half, whole})
	checkChanges(t, run, ideal, at, 500)
}

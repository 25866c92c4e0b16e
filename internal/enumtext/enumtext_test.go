package enumtext_test

import (
	"encoding"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// enum is one of the module's enums: its values, and a new zero one to
// decode into.
type enum struct {
	kind   string
	values []fmt.Stringer
	zero   func() encoding.TextUnmarshaler
	max    fmt.Stringer // one past the last value: it has no text form
}

var enums = []enum{
	{"hybrid: Mode", []fmt.Stringer{hybrid.Hybrid, hybrid.Local, hybrid.Strict},
		func() encoding.TextUnmarshaler { return new(hybrid.Mode) }, hybrid.Mode(3)},
	{"hybrid: FailMode", []fmt.Stringer{hybrid.FailStatic, hybrid.FailOpen, hybrid.FailClosed},
		func() encoding.TextUnmarshaler { return new(hybrid.FailMode) }, hybrid.FailMode(3)},
	{"local: Algorithm", []fmt.Stringer{local.TokenBucket, local.SlidingWindow, local.FixedWindow, local.SlidingLog},
		func() encoding.TextUnmarshaler { return new(local.Algorithm) }, local.Algorithm(4)},
	{"fleet: Shares", []fmt.Stringer{fleet.DemandWeighted, fleet.Equal},
		func() encoding.TextUnmarshaler { return new(fleet.Shares) }, fleet.Shares(2)},
	{"partition: Level", []fmt.Stringer{partition.Healthy, partition.Degraded, partition.Emergency},
		func() encoding.TextUnmarshaler { return new(partition.Level) }, partition.Level(3)},
	{"httplimit: Headers", []fmt.Stringer{httplimit.DraftHeaders, httplimit.LegacyHeaders, httplimit.BothHeaders, httplimit.NoHeaders},
		func() encoding.TextUnmarshaler { return new(httplimit.Headers) }, httplimit.Headers(4)},
}

// deref is the value a decoder points to, for comparison with a value.
func deref(u encoding.TextUnmarshaler) fmt.Stringer {
	switch v := u.(type) {
	case *hybrid.Mode:
		return *v
	case *hybrid.FailMode:
		return *v
	case *local.Algorithm:
		return *v
	case *fleet.Shares:
		return *v
	case *partition.Level:
		return *v
	case *httplimit.Headers:
		return *v
	}
	panic(fmt.Sprintf("unknown enum %T", u))
}

// TestTextRoundTrip checks that every value of every enum writes its
// String name and reads back from it, also through encoding/json, and
// reads back from the name as people write it in config files: another
// case, '_' or '-' between words. Before, json.Unmarshal of "strict"
// into a Mode failed: no enum had a text form.
func TestTextRoundTrip(t *testing.T) {
	t.Parallel()
	for _, e := range enums {
		for _, v := range e.values {
			t.Run(e.kind+"/"+v.String(), func(t *testing.T) {
				t.Parallel()
				text, err := v.(encoding.TextMarshaler).MarshalText()
				require.NoError(t, err)
				assert.Equal(t, v.String(), string(text))
				for _, written := range []string{string(text), strings.ToUpper(string(text)), " " + string(text) + " "} {
					u := e.zero()
					require.NoError(t, u.UnmarshalText([]byte(written)), "%q", written)
					assert.Equal(t, v, deref(u), "%q", written)
				}
				u := e.zero()
				require.NoError(t, json.Unmarshal([]byte(`"`+string(text)+`"`), u))
				assert.Equal(t, v, deref(u))
				out, err := json.Marshal(v)
				require.NoError(t, err)
				assert.Equal(t, `"`+string(text)+`"`, string(out))
			})
		}
	}
}

// TestTextAliases checks the other names config files use.
func TestTextAliases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		into encoding.TextUnmarshaler
		want fmt.Stringer
	}{
		{"FailStatic", new(hybrid.FailMode), hybrid.FailStatic},
		{"fail_open", new(hybrid.FailMode), hybrid.FailOpen},
		{"closed", new(hybrid.FailMode), hybrid.FailClosed},
		{"TokenBucket", new(local.Algorithm), local.TokenBucket},
		{"token-bucket", new(local.Algorithm), local.TokenBucket},
		{"sliding_window", new(local.Algorithm), local.SlidingWindow},
		{"Demand-Weighted", new(fleet.Shares), fleet.DemandWeighted},
	} {
		require.NoError(t, tc.into.UnmarshalText([]byte(tc.text)), tc.text)
		assert.Equal(t, tc.want, deref(tc.into), tc.text)
	}
}

// TestTextRefusesOthers checks that a name no enum value has, or a value
// out of range, is an error that names the enum and what it takes, and
// that a refused decode leaves the value as it was.
func TestTextRefusesOthers(t *testing.T) {
	t.Parallel()
	hostile := []string{"", "foo", "hybrid\x00", "1", strings.Repeat("strict", 1<<16), "strict;local", "ßtrict"}
	for _, e := range enums {
		for _, text := range hostile {
			u := e.zero()
			before := deref(u)
			err := u.UnmarshalText([]byte(text))
			require.Error(t, err, "%s %.20q", e.kind, text)
			assert.Contains(t, err.Error(), e.kind)
			assert.Less(t, len(err.Error()), 300, "the error quotes a long value in part")
			assert.Equal(t, before, deref(u), "a refused decode leaves the value")
		}
		_, err := e.max.(encoding.TextMarshaler).MarshalText()
		require.Error(t, err, "%s %v", e.kind, e.max)
		_, err = json.Marshal(e.max)
		require.Error(t, err, "json of %s %v", e.kind, e.max)
	}
}

// FuzzUnmarshalText decodes arbitrary bytes into every enum: nothing
// panics, and whatever decodes writes back as its canonical name, which
// decodes to the same value.
func FuzzUnmarshalText(f *testing.F) {
	for _, s := range []string{"strict", "FailStatic", "token-bucket", "equal", "emergency", "none", "", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		for _, e := range enums {
			u := e.zero()
			if u.UnmarshalText(text) != nil {
				continue
			}
			v := deref(u)
			canon, err := v.(encoding.TextMarshaler).MarshalText()
			require.NoError(t, err)
			again := e.zero()
			require.NoError(t, again.UnmarshalText(canon))
			require.Equal(t, v, deref(again))
		}
	})
}

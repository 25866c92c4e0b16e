package faultnet

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCut(t *testing.T) {
	t.Parallel()
	n := New()
	assert.False(t, n.Cut("a:1", "b:1"), "no partition")
	n.Partition([]string{"a:1", "b:1"}, []string{"c:1"})
	tests := []struct {
		from, to string
		cut      bool
	}{
		{"a:1", "b:1", false},
		{"a:1", "c:1", true},
		{"c:1", "b:1", true},
		{"d:1", "e:1", false}, // unlisted: one more group
		{"d:1", "a:1", true},
		{"d:1", "c:1", true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.cut, n.Cut(tt.from, tt.to), "%s -> %s", tt.from, tt.to)
	}
	n.Heal()
	assert.False(t, n.Cut("a:1", "c:1"), "healed")
}

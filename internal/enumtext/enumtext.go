// Package enumtext gives the module's enums their text forms, for config
// files (YAML, JSON, flags): each enum's MarshalText writes its String
// name, and its UnmarshalText reads any name of it, in any case, with or
// without '_', '-' or spaces ("FailStatic", "fail_static" and
// "failstatic" alike).
package enumtext

import (
	"fmt"
	"slices"
	"strings"
)

// maxLen bounds the text Parse reads, so that a hostile config value
// costs nothing to refuse.
const maxLen = 64

// A Name is one name of an enum's value.
type Name[T ~int] struct {
	Text  string // lower case, no '_', '-' or spaces
	Value T
}

// Parse returns the value that text names among names, or an error that
// names kind (such as "hybrid: Mode") and lists the names it takes.
func Parse[T ~int](kind string, text []byte, names []Name[T]) (T, error) {
	if len(text) <= maxLen {
		key := strings.Map(func(r rune) rune {
			switch r {
			case '_', '-', ' ':
				return -1
			}
			return r
		}, strings.ToLower(string(text)))
		for _, n := range names {
			if n.Text == key {
				return n.Value, nil
			}
		}
	}
	shown := string(text)
	if len(shown) > maxLen {
		shown = shown[:maxLen] + "..."
	}
	var known []string
	for _, n := range names {
		known = append(known, n.Text)
	}
	slices.Sort(known)
	known = slices.Compact(known)
	return 0, fmt.Errorf("%s %q is not one of %s", kind, shown, strings.Join(known, ", "))
}

// Marshal is the text of a value whose String is name, or an error if
// the value is not one of the enum's (known is false): a value out of
// range written to a config file would not read back.
func Marshal(kind, name string, known bool) ([]byte, error) {
	if !known {
		return nil, fmt.Errorf("%s %s has no text form", kind, name)
	}
	return []byte(name), nil
}

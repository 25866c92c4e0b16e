// Package decision lets the fleet limiter build local.Decision values,
// whose fields are unexported so that one type can carry the degraded flag
// in four machine words. Package local sets Make at init; hybrid reads it
// once at its own init. It is a hook between two packages of the module,
// not an API.
package decision

// Make is a func(limit, remaining int64, retryAfter, resetAfter
// time.Duration, degraded bool) local.Decision, typed any because this
// package cannot import local, which imports it.
var Make any

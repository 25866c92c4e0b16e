// Package layers holds no code: its test checks that the module's
// packages import each other only downwards, as docs/architecture.md's
// map draws them, and that a program that syncs by gossip links no Redis
// client.
package layers

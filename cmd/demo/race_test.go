//go:build race

package main

// raceEnabled: the tests were built with -race.
const raceEnabled = true

package main

import (
	"fmt"
	"math"
	"strconv"
)

// fmtNs prints a duration in ns, in µs from 10 µs, in ms from 1 ms.
func fmtNs(ns float64) string {
	switch {
	case ns >= 1_000_000:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 10_000:
		return fmt.Sprintf("%.1f µs", ns/1000)
	case ns >= 100:
		return fmt.Sprintf("%.0f ns", ns)
	}
	return fmt.Sprintf("%.1f ns", ns)
}

// fmtRatio prints a ratio with two decimals, or as fmtNum from 10.
func fmtRatio(x float64) string {
	if x < 10 {
		return fmt.Sprintf("%.2f", x)
	}
	return fmtNum(x)
}

// fmtNum prints a number with three significant figures, and thousands
// separators for large ones.
func fmtNum(x float64) string {
	switch {
	case x == 0:
		return "0"
	case math.Abs(x) >= 999.5: // what rounds to 1,000 or more
		s := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	default:
		return strconv.FormatFloat(x, 'g', 3, 64)
	}
}

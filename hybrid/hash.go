package hybrid

import "github.com/zeebo/xxh3"

func hashString(s string) uint64 { return xxh3.HashString(s) }

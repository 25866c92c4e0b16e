package local

// Defaults and bounds, for the tests of package local_test.
const (
	DefaultMaxKeys   = defaultMaxKeys
	DefaultMaxKeyLen = defaultMaxKeyLen
	MaxLogLimit      = maxLogLimit
)

package httplimit_test

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

func logTo(b *strings.Builder) *log.Logger { return log.New(b, "", 0) }

// TestKeyErrors checks what a client gets for a key it chose badly, and
// for a KeyFunc that failed: a problem body with no error text in it, a
// 4xx for the client's own errors, and the error itself in OnError and,
// for a 5xx, in the log.
func TestKeyErrors(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "tenant", Limit: 10, Window: time.Hour},
		hybrid.Policy{Name: "ip", Prefix: "ip:", Limit: 2, Window: time.Hour},
	)
	broken := func(*http.Request) (string, error) { return "", errors.New("secret: db at 10.0.0.5 down") }
	tests := []struct {
		name     string
		limit    httplimit.Limit
		key      string
		status   int
		want     error
		logged   bool
		detailed string
	}{
		{"too long", httplimit.Limit{Name: "tenant", Key: httplimit.Header("X-Key")}, strings.Repeat("k", 300), 400, hybrid.ErrKeyTooLong, false, `the key for the "tenant" limit is too long`},
		{"another policy's", httplimit.Limit{Name: "tenant", Key: httplimit.Header("X-Key")}, "ip:127.0.0.1", 400, httplimit.ErrForeignKey, false, "not accepted"},
		{"KeyFunc failed", httplimit.Limit{Name: "tenant", Key: broken}, "k", 500, nil, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log strings.Builder
			var seen error
			srv := server(t, lim, httplimit.Config{ErrorLog: logTo(&log), Limits: []httplimit.Limit{tt.limit}})
			resp := get(t, srv, "X-Key", tt.key)
			assert.Equal(t, tt.status, resp.StatusCode)
			assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			var body struct{ Type, Title, Detail string }
			require.NoError(t, json.Unmarshal(b, &body))
			assert.Equal(t, "about:blank", body.Type)
			assert.Equal(t, http.StatusText(tt.status), body.Title)
			assert.Contains(t, body.Detail, tt.detailed)
			for _, internal := range []string{"hybrid", "MaxKeyLen", "secret", "kkkk", "127.0.0.1"} {
				assert.NotContains(t, string(b), internal)
			}
			assert.Equal(t, tt.logged, log.Len() > 0, "logged: %q", log.String())

			srv = server(t, lim, httplimit.Config{Limits: []httplimit.Limit{tt.limit}, OnError: func(w http.ResponseWriter, _ *http.Request, err error) {
				seen = err
				w.WriteHeader(499)
			}})
			assert.Equal(t, 499, get(t, srv, "X-Key", tt.key).StatusCode)
			require.Error(t, seen)
			assert.Contains(t, seen.Error(), `limit "tenant"`)
			if tt.want != nil {
				assert.ErrorIs(t, seen, tt.want)
			}
		})
	}
}

// TestHashKeys checks that with HashKeys a key of any length is its own,
// and that the Limiter never sees it as written.
func TestHashKeys(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "api", Prefix: "key:", Limit: 2, Window: time.Hour})
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{{Name: "api", Key: httplimit.Header("X-API-Key"), HashKeys: true}}})
	long := strings.Repeat("k", 10_000)
	codes := func(key string) (c []int) {
		for range 3 {
			c = append(c, get(t, srv, "X-API-Key", key).StatusCode)
		}
		return c
	}
	assert.Equal(t, []int{200, 200, 429}, codes(long))
	assert.Equal(t, []int{200, 200, 429}, codes(long+"x"), "a different key, its own quota")
	assert.Equal(t, []int{200, 200, 429}, codes("short"))
	assert.Equal(t, 3, lim.Len())
	d, err := lim.AllowN("key:short", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Remaining(), "the key as written is untouched")
}

package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestHandlerOnFakeTime tests a handler's 429 and its recovery without
// sleeping: in a testing/synctest bubble the limiter runs on the bubble's
// fake clock, so time.Sleep(time.Minute) waits out the window at once.
// (docs/http.md shows it. Before the limiter followed the bubble's
// clock, Allow refused after the minute: time stood still for it, while
// the handler's TakeN, which read time.Now, moved on.)
func TestHandlerOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limiter, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{
			{Name: "key", Mode: hybrid.Local, Limit: 2, Window: time.Minute},
		}})
		require.NoError(t, err)
		defer limiter.Close()
		limit, err := httplimit.New(httplimit.Config{
			Limiter: limiter,
			Limits:  []httplimit.Limit{{Name: "key", Key: httplimit.Header("X-API-Key")}},
		})
		require.NoError(t, err)
		handler := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		get := func() int {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-API-Key", "k1")
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			return w.Code
		}

		assert.Equal(t, http.StatusOK, get())
		assert.Equal(t, http.StatusOK, get())
		assert.Equal(t, http.StatusTooManyRequests, get())
		d, err := limiter.Allow("k1")
		require.NoError(t, err)
		assert.False(t, d.Allowed())

		time.Sleep(time.Minute) // fake time: returns at once

		d, err = limiter.Allow("k1")
		require.NoError(t, err)
		assert.True(t, d.Allowed(), "a minute on, the window has passed")
		assert.Equal(t, http.StatusOK, get())
	})
}

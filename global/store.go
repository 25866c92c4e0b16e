package global

import (
	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// redisStore is a Redis as package hybrid sees it: the Syncer, and the
// store protocol of internal/store (strict decisions on shards and their
// charges, the directories of sharded keys, the census), whose methods
// are redisStore's and not Redis's, so that they are no part of the
// public API. hybrid finds it through store.Of.
type redisStore struct{ *Redis }

var (
	_ store.StrictDecider       = redisStore{}
	_ store.StrictCharger       = redisStore{}
	_ store.ShardDirectory      = redisStore{}
	_ store.LeaseShardDirectory = redisStore{}
	_ store.Census              = redisStore{}
	_ store.KeyLenLimiter       = redisStore{}
	_ store.Resetter            = redisStore{}
)

func init() {
	store.Register(func(s fleet.Syncer) any {
		if r, ok := s.(*Redis); ok && r != nil {
			return redisStore{r}
		}
		return nil
	})
}

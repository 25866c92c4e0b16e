package hybrid

// NodesOf is how many active nodes key's last grant on l reported; 0 if
// l does not track key or has had no grant for it.
func NodesOf(l *Limiter, key string) int {
	v, ok := l.keys.Load(key)
	if !ok {
		return 0
	}
	k := v.(*keyState)
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return k.nodes
}
